"""The judge benchmark counts a flag by what a reader found in the summary, not "real = good"."""

from __future__ import annotations

from benchmarks.judge_discrimination import judge_cases, reading_label

POSTING = {
    "key": "demo-x",
    "title": "Nurse",
    "company": "Northgate",
    "location": "Leeds, UK",
    "description": ".",
}


def test_real_summaries_are_labelled_by_reading() -> None:
    readings = {
        "after": {
            "demo-x": {"summary": "A", "invents": False, "note": "", "misses": ["who", "where"]},
            "demo-y": {"summary": "B", "invents": True, "note": "'dementia'", "misses": []},
            "demo-z": {"summary": "C", "invents": False, "note": "", "misses": ["where"]},
        }
    }
    assert reading_label(readings, "after", POSTING, "A") == "faithful, thin"
    assert reading_label(readings, "after", dict(POSTING, key="demo-y"), "B") == "invents"
    assert reading_label(readings, "after", dict(POSTING, key="demo-z"), "C") == "faithful"
    assert reading_label(readings, "after", POSTING, "another text") == "unread"


def test_false_flags_and_catches_are_totalled_apart() -> None:
    grades = {
        "fine": {"faithful": 5, "complete": 5, "concise": 5},
        "bad": {"faithful": 2, "complete": 5, "concise": 5},
    }
    cases = [
        ("real (faithful)", POSTING, "fine"),
        ("real (faithful)", POSTING, "bad"),
        ("real (invents)", POSTING, "bad"),
        ("invented: headcount", POSTING, "bad"),
        ("invented: other_detail", POSTING, "fine"),
    ]
    table = judge_cases(lambda posting, summary: grades[summary], cases, review_below=3.0)
    assert table["totals"]["real (faithful)"] == {"cases": 2, "flagged": 1, "flagged_share": 0.5}
    assert table["totals"]["real (invents)"]["flagged_share"] == 1.0
    assert table["totals"]["planted invented (all kinds)"] == {"cases": 2, "flagged": 1, "flagged_share": 0.5}
