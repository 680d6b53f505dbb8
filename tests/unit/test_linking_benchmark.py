"""The linking benchmark's data readers and threshold arithmetic, on small files written here."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.linking_data import read_decorte, read_skillskape, sentence_chunks
from training.linking_evaluation import TopAnswer, coverage_curve, precision_threshold, shares_at

TEAM = "Team player with communication and collaboration skills"
DECORTE = "\n".join(
    [
        "sentence,span,sub_span,label",
        "javascript reactjs java,javascript,,JavaScript",
        "javascript reactjs java,reactjs,,LABEL NOT PRESENT",
        "javascript reactjs java,java,,Java (computer programming)",
        "javascript reactjs java,javascript,,JavaScript",
        f"{TEAM},Team player,,work in teams",
        f"{TEAM},communication and collaboration skills,communication skills,communication",
        f"{TEAM},communication and collaboration skills,collaboration skills,work in teams",
        "Apply your expertise,apply your expertise,,UNDERSPECIFIED",
    ]
)


def test_decorte_queries_are_counted_once_and_unlinked_labels_left_out(tmp_path: Path) -> None:
    path = tmp_path / "tech_validation_annotations.csv"
    path.write_text(DECORTE, encoding="utf-8")
    split = read_decorte(path, "tech")
    assert split.rows == 8 and split.excluded_rows == 2
    spans = {(q.sentence.split()[0], q.span): set(q.gold_labels) for q in split.span_queries}
    assert spans == {
        ("javascript", "javascript"): {"JavaScript"},  # the repeated row is one query
        ("javascript", "java"): {"Java (computer programming)"},
        ("Team", "Team player"): {"work in teams"},
        ("Team", "communication skills"): {"communication"},  # the sub-span is the query
        ("Team", "collaboration skills"): {"work in teams"},
    }
    sentences = {q.sentence.split()[0]: q for q in split.sentence_queries}
    assert set(sentences) == {"javascript", "Team"}  # "Apply your expertise" has no ESCO label
    assert set(sentences["javascript"].gold_labels) == {"JavaScript", "Java (computer programming)"}
    assert sentences["javascript"].spans == ("javascript", "reactjs", "java")  # gold spans, LNP included
    assert split.unlinked_spans == [("javascript reactjs java", "reactjs")]


def test_skillskape_rows_without_a_skill_are_dropped_and_a_bad_row_named(tmp_path: Path) -> None:
    path = tmp_path / "train.csv"
    path.write_text(
        ",sentence,skills\n0,Build dashboards in Excel.,\"['use spreadsheets software']\"\n"
        "1,We are a global company.,['UNK']\n",
        encoding="utf-8",
    )
    assert read_skillskape(path) == [("Build dashboards in Excel.", frozenset({"use spreadsheets software"}))]
    path.write_text(",sentence,skills\n7,Broken row,[unclosed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="row '7'"):
        read_skillskape(path)


def test_sentence_chunks_split_at_punctuation_and_linking_words() -> None:
    assert sentence_chunks("Experience in financial analysis and making data-driven recommendations.") == [
        "Experience in financial analysis",
        "making data-driven recommendations",
    ]


def test_the_threshold_is_the_lowest_with_at_most_a_tenth_wrong() -> None:
    answers = [TopAnswer(0.9, True)] * 6 + [
        TopAnswer(0.6, False),
        TopAnswer(0.5, True),
        TopAnswer(0.3, False),
    ]
    answers += [TopAnswer(0.2, False)]
    threshold = precision_threshold(answers, max_wrong=0.10)
    assert threshold == 0.5  # at 0.3 two of ten are wrong; at 0.5 one (0.6), and 0.5 itself is right
    shares = shares_at(answers, threshold)
    assert (shares["right"], shares["wrong"], shares["unmatched"]) == pytest.approx((0.7, 0.1, 0.2))
    curve = coverage_curve(answers)
    assert [point["threshold"] for point in curve][:3] == [0.0, 0.1, 0.2]
    assert curve[0]["unmatched"] == 0.0 and curve[-1]["unmatched"] == 1.0
    assert all(p["right"] + p["wrong"] + p["unmatched"] == pytest.approx(1.0) for p in curve)


def test_the_report_says_which_linker_saw_the_benchmark_and_what_training_saw(tmp_path: Path) -> None:
    from benchmarks.linking_quality import RULE_BASED_EXPOSURE, exposure, seen_shares
    from plugins.postings.skills.concept_reranker import LinkerModel
    from plugins.postings.skills.skill_resolver import SkillResolver, TaxonomyLabelEntry

    old = LinkerModel({}, 0.2, {"training_data": {"train": "SkillSkape train.csv"}})
    new = LinkerModel({}, 0.6, {"benchmark_exposure": {"decorte_labels": False, "skillskape": False}})
    assert exposure("linker", old).startswith("yes")
    assert exposure("linker", new).startswith("no")
    assert exposure("fuzzy", None) == RULE_BASED_EXPOSURE
    path = tmp_path / "tech.csv"
    path.write_text(DECORTE, encoding="utf-8")
    split = read_decorte(path, "tech")
    concepts = {"u:js": "JavaScript", "u:java": "Java (computer programming)", "u:team": "work in teams"}
    concepts["u:comm"] = "communication"
    entries = [TaxonomyLabelEntry(uri, label, label.lower(), True) for uri, label in concepts.items()]
    resolver = SkillResolver(entries, concepts)
    shares = seen_shares(resolver, split, {"u:js", "u:team"}, set())
    # spans: javascript, java, team player, communication skills, collaboration skills -> 3 of 5 seen
    assert shares["spans_all_seen"] == 0.6 and shares["spans_any_seen"] == 0.6
    # sentences: {JavaScript, Java} and {work in teams, communication}: all seen in none, any in both
    assert shares["sentences_all_seen"] == 0.0 and shares["sentences_any_seen"] == 1.0
    assert seen_shares(resolver, split, set(), {"JavaScript"})["spans_any_seen"] == 0.2  # by label
