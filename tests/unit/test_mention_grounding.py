"""Grounding a mention in a posting: word boundaries, offsets pointing at the text, the evidence."""

from __future__ import annotations

import pytest

from plugins.postings.skills.mention_grounding import (
    Mention,
    ground_mentions,
    locate,
    locate_all,
    sentence_around,
    tokenize,
)

POSTING = "Backend developer. We write Go and Rust.\nOwn the go-to-market tooling in Cargo; R is a plus."


def found(mention: str, text: str = POSTING) -> list[str]:
    return [text[start:end] for start, end in locate_all(mention, text)]


def test_short_mentions_ground_only_as_whole_words_in_their_own_case() -> None:
    assert found("Go") == ["Go"]  # in "Go and Rust", not in "go-to-market" nor "Cargo"
    assert locate("Go", POSTING) == (POSTING.index("Go and"), POSTING.index("Go and") + 2)
    assert found("go") == []
    assert found("R") == ["R"]
    assert found("Go", "Go-to-market plans and Django") == []
    assert found("C", "C++ and C# but no plain one") == []
    assert found("C++", "We use C++, C# and C.") == ["C++"]
    assert found("R", "We use R.") == ["R"]


def test_longer_mentions_ground_on_word_boundaries_ignoring_case_and_spacing() -> None:
    text = "You will work in  teams\nand use JavaScript and java."
    assert found("Work in teams", text) == ["work in  teams"]
    assert found("Java", text) == ["java"]  # not inside "JavaScript"
    assert found("script", text) == []


def test_offsets_point_at_the_text_and_repeats_take_the_next_occurrence() -> None:
    text = "Python first. Then SQL, then Python again."
    grounded, dropped = ground_mentions(
        [("python", "knowledge"), ("Python", "knowledge"), ("SQL", "knowledge"), ("Cobol", "knowledge")],
        "",
        text,
    )
    assert dropped == ["Cobol"]
    assert [(m.start, m.end) for m in grounded] == [(0, 6), (29, 35), (19, 22)]
    for mention in grounded:
        assert text[mention.start : mention.end] == mention.text
        assert mention.source == "llm"


def test_a_mention_only_in_the_title_is_grounded_in_the_title() -> None:
    grounded, dropped = ground_mentions([("Kotlin", "knowledge")], "Kotlin developer", "Build Android apps.")
    assert dropped == []
    assert grounded[0].field == "title" and (grounded[0].start, grounded[0].end) == (0, 6)


def test_the_evidence_is_the_sentence_around_the_offsets() -> None:
    start = POSTING.index("Rust")
    assert sentence_around(POSTING, start, start + 4) == "We write Go and Rust."
    start = POSTING.index("Cargo")
    assert sentence_around(POSTING, start, start + 5) == "Own the go-to-market tooling in Cargo;"


def test_tokens_keep_skill_names_whole_and_their_offsets() -> None:
    text = "C++, C#, .NET, node.js, R&D and e-mail."
    tokens = tokenize(text)
    assert [t.text for t in tokens] == [
        "C++",
        ",",
        "C#",
        ",",
        ".NET",
        ",",
        "node.js",
        ",",
        "R&D",
        "and",
        "e-mail",
        ".",
    ]
    assert all(text[t.start : t.end] == t.text for t in tokens)


def test_a_mention_rejects_bad_kinds_and_offsets() -> None:
    with pytest.raises(ValueError, match="kind"):
        Mention("Python", "tool", 0, 6, "llm")
    with pytest.raises(ValueError, match="offsets"):
        Mention("Python", "knowledge", 6, 6, "llm")
