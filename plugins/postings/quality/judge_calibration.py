"""Does a judge discriminate? Its flags on a small calibration set, and a refusal when it does not.

A judge is any `grade(posting, output) -> {criterion: 1..5}`: the deterministic one
(`quality_signals.deterministic_judge`) or an LLM under the rubric (`llm_grader`). The
calibration set is six short postings (not the demo's, not the rubric's examples) with a
faithful summary each, written by hand, and the bad summaries `planted.py` makes from them by
rule (one invented fact each; loops). A judge that flags fewer than `MIN_FLAGGED_BAD` of the
bad ones, flags more than `MAX_FLAGGED_GOOD` of the good ones, or cannot answer on more than
`MAX_ERRORS` of the cases is refused: `require_calibrated` raises `JudgeRefused` saying which
figure failed, and the pipeline falls back to the deterministic judge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain.quality.judge_rubric import Grader, needs_review
from plugins.postings.quality.planted import plant_invented, plant_looping

MIN_FLAGGED_BAD = 0.8
MAX_FLAGGED_GOOD = 0.2
MAX_ERRORS = 0.1


class JudgeRefused(RuntimeError):
    """A judge that failed its calibration set: its grades would mislead, so it is not used."""


@dataclass(frozen=True)
class CalibrationCase:
    posting: Mapping[str, Any]
    summary: str
    bad: bool
    kind: str


@dataclass
class Calibration:
    """How a judge did on the calibration set: flagged shares of bad and good cases."""

    judge: str
    bad: int = 0
    good: int = 0
    flagged_bad: int = 0
    flagged_good: int = 0
    errors: list[str] = field(default_factory=list)
    by_kind: dict[str, list[int]] = field(default_factory=dict)  # kind -> [flagged, cases]

    @property
    def flagged_bad_share(self) -> float:
        return self.flagged_bad / self.bad if self.bad else 0.0

    @property
    def flagged_good_share(self) -> float:
        return self.flagged_good / self.good if self.good else 0.0

    @property
    def error_share(self) -> float:
        total = self.bad + self.good
        return len(self.errors) / total if total else 0.0

    @property
    def failures(self) -> list[str]:
        """Each calibration figure out of bounds, said plainly."""
        found = []
        if self.flagged_bad_share < MIN_FLAGGED_BAD:
            found.append(
                f"it flagged {self.flagged_bad_share:.0%} of {self.bad} planted bad summaries "
                f"(needs at least {MIN_FLAGGED_BAD:.0%})"
            )
        if self.flagged_good_share > MAX_FLAGGED_GOOD:
            found.append(
                f"it flagged {self.flagged_good_share:.0%} of {self.good} faithful summaries "
                f"(at most {MAX_FLAGGED_GOOD:.0%})"
            )
        if self.error_share > MAX_ERRORS:
            found.append(f"it gave no usable grade for {len(self.errors)} cases (first: {self.errors[0]})")
        return found

    @property
    def passed(self) -> bool:
        return not self.failures

    def message(self) -> str:
        if self.passed:
            return (
                f"judge {self.judge} passed calibration: flagged {self.flagged_bad_share:.0%} of planted bad "
                f"and {self.flagged_good_share:.0%} of faithful summaries"
            )
        return f"judge {self.judge} refused: " + "; ".join(self.failures)


def calibrate_judge(
    judge: str,
    grade: Grader,
    cases: Sequence[CalibrationCase] | None = None,
    review_below: float = 3.0,
) -> Calibration:
    """Run `grade` over the calibration cases; an exception is that case's error, not a crash."""
    result = Calibration(judge)
    for case in calibration_cases() if cases is None else cases:
        try:
            flagged = needs_review(grade(case.posting, case.summary), review_below)
        except Exception as exc:  # an unusable answer counts against the judge, never stops the run
            result.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            flagged = False
        counts = result.by_kind.setdefault(case.kind, [0, 0])
        counts[0] += flagged
        counts[1] += 1
        if case.bad:
            result.bad += 1
            result.flagged_bad += flagged
        else:
            result.good += 1
            result.flagged_good += flagged
    return result


def require_calibrated(calibration: Calibration) -> None:
    """Raise JudgeRefused (with the figures that failed) unless the judge passed."""
    if not calibration.passed:
        raise JudgeRefused(calibration.message())


# --- the calibration set -------------------------------------------------------------------------

CALIBRATION_POSTINGS: tuple[tuple[dict[str, str], str], ...] = (
    (
        {
            "key": "calibration-1",
            "title": "Dental Receptionist",
            "company": "Smile Studio",
            "location": "Glasgow, UK",
            "description": (
                "Smile Studio is a busy dental practice. Our receptionist greets patients, books "
                "appointments in Dentally, takes payments and answers the phone. You are organised and "
                "friendly, and you have worked on a front desk before. Monday to Friday, 8am to 5pm."
            ),
        },
        "Smile Studio in Glasgow is hiring a dental receptionist to greet patients, book appointments "
        "in Dentally and take payments; front desk experience is required.",
    ),
    (
        {
            "key": "calibration-2",
            "title": "Forklift Driver",
            "company": "Kestrel Distribution",
            "location": "Leipzig, Germany",
            "description": (
                "Kestrel Distribution runs a 20,000 m² warehouse for online retailers. As a forklift "
                "driver you unload lorries, move pallets to the racks and load outgoing orders. You hold a "
                "forklift licence and can work in three shifts. German at a basic level is enough."
            ),
        },
        "Kestrel Distribution seeks a forklift driver for its Leipzig warehouse to unload lorries and "
        "move pallets; a forklift licence and three-shift work are required.",
    ),
    (
        {
            "key": "calibration-3",
            "title": "Software Tester",
            "company": "Quill Systems",
            "location": "Tallinn, Estonia",
            "description": (
                "Quill Systems makes invoicing software for accountants. Our tester writes test plans, "
                "automates browser tests with Cypress and reports bugs in Jira. You have 2+ years of "
                "testing experience and know some JavaScript. Remote work is possible two days a week."
            ),
        },
        "Quill Systems in Tallinn is looking for a Software Tester to automate browser tests with "
        "Cypress and report bugs in Jira; it asks for 2+ years of testing and some JavaScript.",
    ),
    (
        {
            "key": "calibration-4",
            "title": "Bookkeeper",
            "company": "Fenwick & Daughters",
            "location": "Cardiff, UK",
            "description": (
                "Fenwick & Daughters is a family-run builders' merchant. The bookkeeper keeps the "
                "ledgers in Xero, reconciles the bank accounts, runs supplier payments and prepares VAT "
                "returns. AAT Level 3 or equivalent experience is required. Part-time, 25 hours a week."
            ),
        },
        "Fenwick & Daughters, a builders' merchant in Cardiff, is hiring a part-time bookkeeper for 25 "
        "hours a week to keep the ledgers in Xero and prepare VAT returns; AAT Level 3 is required.",
    ),
    (
        {
            "key": "calibration-5",
            "title": "Barista",
            "company": "Copper Kettle Coffee",
            "location": "Porto, Portugal",
            "description": (
                "Copper Kettle Coffee roasts its own beans and runs two cafés. Our barista prepares "
                "espresso drinks, serves customers, keeps the bar clean and helps with opening. "
                "Experience with specialty coffee is welcome; we train newcomers. Portuguese and English."
            ),
        },
        "Copper Kettle Coffee in Porto seeks a barista to prepare espresso drinks and serve customers; "
        "specialty coffee experience is welcome and Portuguese and English are needed.",
    ),
    (
        {
            "key": "calibration-6",
            "title": "Hotel Housekeeper",
            "company": "Alpenrose Hotel",
            "location": "Innsbruck, Austria",
            "description": (
                "The Alpenrose Hotel has 80 rooms near the old town. Our housekeepers clean and prepare "
                "guest rooms, change linen, restock supplies and report repairs to the front desk. No "
                "experience needed; you work carefully and speak German or English. Seasonal contract."
            ),
        },
        "The Alpenrose Hotel in Innsbruck is hiring housekeepers on a seasonal contract to clean guest "
        "rooms, change linen and restock supplies; German or English is needed.",
    ),
)


def calibration_cases() -> list[CalibrationCase]:
    """Each calibration posting's faithful summary, its invented variants and its loops."""
    postings = [posting for posting, _ in CALIBRATION_POSTINGS]
    cases: list[CalibrationCase] = []
    for posting, summary in CALIBRATION_POSTINGS:
        others = [other for other in postings if other is not posting]
        cases.append(CalibrationCase(posting, summary, bad=False, kind="faithful"))
        for kind, text in plant_invented(summary, posting, others).items():
            cases.append(CalibrationCase(posting, text, bad=True, kind=kind))
        for kind, text in plant_looping(summary, posting).items():
            cases.append(CalibrationCase(posting, text, bad=True, kind=kind))
    return cases


def describe_cases(cases: Sequence[CalibrationCase]) -> str:
    """The cases as JSON lines (for reading what a judge was shown)."""
    return "\n".join(
        json.dumps({"key": c.posting.get("key"), "kind": c.kind, "summary": c.summary}) for c in cases
    )
