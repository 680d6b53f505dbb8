"""Taxonomy labels found in text: stems and articles, word boundaries, short labels, offsets."""

from __future__ import annotations

import pytest

from plugins.postings.skills.taxonomy_matcher import TaxonomyLabel, TaxonomyMatcher
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH


@pytest.fixture(scope="module")
def demo() -> TaxonomyMatcher:
    return TaxonomyMatcher.from_csv(DEMO_TAXONOMY_PATH)


def test_labels_meet_their_inflected_forms(demo: TaxonomyMatcher) -> None:
    text = "You enjoy working in teams and write Python."
    mentions = demo.mentions(text)
    assert [(m.text, m.kind) for m in mentions] == [("working in teams", "skill"), ("Python", "knowledge")]
    assert mentions[0].concept == "https://posting-enrichment.example/skill/teamwork"
    assert all(text[m.start : m.end] == m.text for m in mentions)


def test_short_labels_match_only_whole_tokens_in_their_own_case(demo: TaxonomyMatcher) -> None:
    assert [m.text for m in demo.mentions("We build in Go and Python.")] == ["Go", "Python"]
    assert demo.mentions("A go-to-market plan; let go of Cargo.") == []


def test_the_longest_label_wins_and_matches_do_not_overlap() -> None:
    matcher = TaxonomyMatcher(
        [
            TaxonomyLabel("project management", "pm", "skill"),
            TaxonomyLabel("management", "m", "skill"),
            TaxonomyLabel("project", "p", "knowledge"),
        ]
    )
    text = "Agile project management and people management."
    assert [(m.text, m.concept) for m in matcher.mentions(text)] == [
        ("project management", "pm"),
        ("management", "m"),
    ]


def test_an_empty_taxonomy_matches_nothing() -> None:
    assert TaxonomyMatcher([]).mentions("Python and SQL") == []
