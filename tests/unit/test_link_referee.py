"""The linking referee's rules: which answers are asked, how the prompt lists them, how answers apply."""

from __future__ import annotations

from typing import Any

from plugins.postings.skills import link_referee


def _entity(mention: str, confidence: float, stage: str = "learned", candidates: int = 3) -> dict[str, Any]:
    listed = [
        {
            "concept_uri": f"uri:{mention}:{n}",
            "concept_label": f"{mention} concept {n}",
            "probability": 0.5 / n,
        }
        for n in range(1, candidates + 1)
    ]
    matched = stage != "unmatched"
    return {
        "mention": mention,
        "source_mention": mention,
        "kind": "skill",
        "concept_uri": listed[0]["concept_uri"] if matched else None,
        "concept_label": listed[0]["concept_label"] if matched else None,
        "confidence": confidence if matched else 0.0,
        "stage": stage,
        "candidates": listed,
    }


def test_only_the_linkers_unsure_answers_with_a_choice_are_asked_least_sure_first() -> None:
    entities = [
        _entity("sure", 0.95),
        _entity("unsure", 0.4),
        _entity("exact label", 0.3, stage="exact"),
        _entity("left unmatched", 0.0, stage="unmatched"),
        _entity("one candidate", 0.2, candidates=1),
    ]
    assert link_referee.asked_entities(entities) == [1, 3]
    many = [_entity(f"m{n}", 0.7 - n / 100) for n in range(link_referee.MAX_REFEREED + 3)]
    asked = link_referee.asked_entities(many)
    # the least sure are kept, and listed in the posting's order
    assert asked == list(range(3, link_referee.MAX_REFEREED + 3))


def test_the_listing_numbers_the_phrases_and_letters_their_candidates() -> None:
    entities = [_entity("teamwork", 0.4), _entity("SQL", 0.99)]
    listing = link_referee.referee_listing(entities, [0], ["We value   teamwork.\n" + "x" * 400, "SQL."])
    lines = listing.splitlines()
    assert lines[0].startswith("1. teamwork | in: We value teamwork. xxx")
    assert len(lines[0]) < 300  # a long sentence is cut
    assert lines[1] == "   a) teamwork concept 1  b) teamwork concept 2  c) teamwork concept 3"
    assert len(lines) == 2  # the sure answer is not listed


def test_a_letter_takes_that_candidate_none_unmatches_and_an_unusable_answer_changes_nothing() -> None:
    entities = [
        _entity("switched", 0.4),
        _entity("confirmed", 0.6),
        _entity("rejected", 0.5),
        _entity("no such letter", 0.3, candidates=2),
        _entity("no answer", 0.3),
        _entity("rescued", 0.0, stage="unmatched"),
    ]
    asked = [0, 1, 2, 3, 4, 5]
    result, counts = link_referee.apply_choices(entities, asked, ["b", "a", "none", "c"])
    assert result[0]["concept_uri"] == "uri:switched:2" and result[0]["stage"] == "referee"
    assert result[0]["confidence"] == 0.25 and result[0]["referee"] == "b"
    assert result[1]["concept_uri"] == "uri:confirmed:1" and result[1]["confidence"] == 0.6
    assert result[2]["concept_uri"] is None and result[2]["stage"] == "unmatched"
    assert result[2]["candidates"] == entities[2]["candidates"]  # still offered to a reviewer
    assert result[3] == entities[3] and result[4] == entities[4]
    assert result[5]["concept_uri"] is None  # asked, but no answer came for it
    assert (counts.asked, counts.kept, counts.changed, counts.unmatched, counts.unreadable) == (6, 1, 1, 1, 3)
    again, _ = link_referee.apply_choices(entities, asked, ["b", "a", "none", "c", "a", "a"])
    assert again[5]["concept_uri"] == "uri:rescued:1" and again[5]["stage"] == "referee"
    assert entities[0]["stage"] == "learned"  # the input is not changed
