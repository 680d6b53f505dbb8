"""LLM verification of candidate mentions: only unsure ones are asked; none drops, a kind relabels."""

from __future__ import annotations

import json

from plugins.postings.skills.mention_grounding import Mention
from plugins.postings.skills.mention_verification import verify_mentions

TEXT = "Use Python daily. We offer free lunch. You lead the team."


def candidates() -> list[Mention]:
    return [
        Mention("Python", "knowledge", 4, 10, "tagger", score=0.99),
        Mention("free lunch", "skill", 27, 37, "tagger", score=0.4),
        Mention("lead the team", "knowledge", 43, 56, "tagger", score=0.6),
    ]


def test_unsure_candidates_are_dropped_or_relabelled_and_sure_ones_pass() -> None:
    answers = {"free lunch": "none", "lead the team": "skill"}
    asked: list[str] = []

    def generate(prompt: str, schema: dict) -> str:
        phrase = prompt.rsplit("Phrase: ", 1)[1].split("\n")[0]
        asked.append(phrase)
        assert schema["properties"]["label"]["enum"] == ["skill", "knowledge", "none"]
        return json.dumps({"label": answers[phrase]})

    kept, stats = verify_mentions(candidates(), {"description": TEXT}, generate, below=0.8)
    assert asked == ["free lunch", "lead the team"]  # least sure first; "Python" not asked
    assert [(m.text, m.kind, m.source) for m in kept] == [
        ("Python", "knowledge", "tagger"),
        ("lead the team", "skill", "tagger+llm"),
    ]
    assert (stats.asked, stats.dropped, stats.relabelled, stats.unreadable) == (2, 1, 1, 0)


def test_an_unreadable_reply_keeps_the_candidate_and_is_counted() -> None:
    kept, stats = verify_mentions(
        candidates(), {"description": TEXT}, lambda prompt, schema: "{oops", max_calls=1
    )
    assert [m.text for m in kept] == ["Python", "free lunch", "lead the team"]
    assert (stats.asked, stats.unreadable) == (1, 1)
    assert "free lunch" in stats.errors[0]
