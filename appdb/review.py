"""All SQL of the gym in one place: judge grades, review items and the corrections corpus.

The loop: a run's checks and judge flag outputs (`flag_for_review`); a reviewer accepts,
rejects or corrects them (`resolve_item`, `add_correction`, `apply_reviewed_output`);
the gold evaluation compares the model's current answers with the corpus
(`gold_pairs`). Grades and corrections are kept forever; a review item is open until a
reviewer resolves it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from appdb.dialects import CHUNK
from appdb.models import (
    Correction,
    OutputGrade,
    ReferenceData,
    ReviewItem,
    UseCaseOutput,
    WorkItem,
    utcnow,
)
from appdb.subject_tables import SubjectTable

REVIEW_STATUSES = ("open", "accepted", "rejected", "corrected")
REVIEW_BACKEND = "review"
REVIEWER = "reviewer"  # the model column of an output a reviewer made (exports, views, interactions)
_CHUNK = 500


class ReviewError(LookupError):
    """A review command that cannot apply: unknown item, already resolved, or a bad correction."""


# --- grades ------------------------------------------------------------------------------------


def record_grade(session: Session, **fields: Any) -> int:
    """Store the judge's grades of one output; returns the grade's id."""
    grade = OutputGrade(**fields)
    session.add(grade)
    session.flush()
    return grade.id


def graded_input_hashes(session: Session, use_case: str, input_hashes: Sequence[str]) -> set[str]:
    """Which of these outputs (by input hash) the judge has graded already."""
    found: set[str] = set()
    for start in range(0, len(input_hashes), _CHUNK):
        chunk = list(input_hashes[start : start + _CHUNK])
        found.update(
            session.scalars(
                select(OutputGrade.input_hash).where(
                    OutputGrade.use_case == use_case, OutputGrade.input_hash.in_(chunk)
                )
            )
        )
    return found


@dataclass(frozen=True)
class GradeSummary:
    """The judge's grades of a use case's current outputs: how many, and mean per criterion."""

    graded: int
    means: dict[str, float]
    overall: float | None


def current_grade_summary(session: Session, use_case: str) -> GradeSummary:
    """Mean grades over the current outputs that were graded (the latest grade of each)."""
    latest = (
        select(func.max(OutputGrade.id))
        .join(
            UseCaseOutput,
            (UseCaseOutput.use_case == OutputGrade.use_case)
            & (UseCaseOutput.subject_key == OutputGrade.subject_key)
            & (UseCaseOutput.input_hash == OutputGrade.input_hash),
        )
        .where(OutputGrade.use_case == use_case)
        .group_by(OutputGrade.subject_key)
    )
    grades = list(session.scalars(select(OutputGrade).where(OutputGrade.id.in_(latest))))
    return summarize_grades(grades)


def summarize_grades(grades: Sequence[OutputGrade]) -> GradeSummary:
    if not grades:
        return GradeSummary(0, {}, None)
    criteria = list(dict.fromkeys(name for grade in grades for name in grade.scores))
    means = {
        name: sum(grade.scores[name] for grade in grades if name in grade.scores)
        / sum(1 for grade in grades if name in grade.scores)
        for name in criteria
    }
    return GradeSummary(len(grades), means, sum(grade.overall for grade in grades) / len(grades))


# --- review items ------------------------------------------------------------------------------


def flag_for_review(
    session: Session,
    *,
    use_case: str,
    subject_key: str,
    use_case_version: str,
    reason: str,
    check_name: str | None = None,
    score: float | None = None,
    output: dict[str, Any] | None = None,
    interaction_id: int | None = None,
    run_id: str | None = None,
) -> int:
    """Open a review item, or update the open one of this (use case, subject); returns its id.

    One open item per output keeps the queue short: a second finding (another check, a
    low grade) is added to the item's reason rather than queued again.
    """
    item = session.scalar(
        select(ReviewItem)
        .where(
            ReviewItem.use_case == use_case,
            ReviewItem.subject_key == subject_key,
            ReviewItem.status == "open",
        )
        .with_for_update()
    )
    if item is None:
        item = ReviewItem(
            use_case=use_case,
            subject_key=subject_key,
            use_case_version=use_case_version,
            reason=reason,
            check_name=check_name,
            score=score,
            output=output,
            interaction_id=interaction_id,
            run_id=run_id,
            status="open",
            created_at=utcnow(),
        )
        session.add(item)
        session.flush()
        return item.id
    same_output = item.interaction_id == interaction_id
    reasons = item.reason.split("; ") if same_output else []
    if reason not in reasons:
        reasons.append(reason)
    item.reason = "; ".join(reasons)
    item.use_case_version = use_case_version
    item.check_name = check_name or (item.check_name if same_output else None)
    item.score = score if score is not None else (item.score if same_output else None)
    item.output = output
    item.interaction_id = interaction_id
    item.run_id = run_id
    return item.id


def list_review_items(
    session: Session, *, status: str | None = "open", use_case: str | None = None
) -> list[ReviewItem]:
    """Review items, lowest judge score first, then oldest (status None: every status)."""
    query = select(ReviewItem)
    if status is not None:
        query = query.where(ReviewItem.status == status)
    if use_case is not None:
        query = query.where(ReviewItem.use_case == use_case)
    query = query.order_by(ReviewItem.score.is_(None), ReviewItem.score, ReviewItem.id)
    return list(session.scalars(query))


def get_open_item(session: Session, item_id: int) -> ReviewItem:
    """The open review item `item_id`; ReviewError saying why when there is none."""
    item = session.get(ReviewItem, item_id, with_for_update=True)
    if item is None:
        raise ReviewError(f"no review item {item_id} (`pipeline review` lists the open ones)")
    if item.status != "open":
        raise ReviewError(
            f"review item {item_id} is already {item.status} (at {item.resolved_at:%Y-%m-%d %H:%M:%S} UTC)"
        )
    return item


def resolve_item(session: Session, item: ReviewItem, status: str, note: str | None = None) -> None:
    if status not in REVIEW_STATUSES[1:]:
        raise ValueError(f"a review item is resolved as accepted, rejected or corrected, not {status!r}")
    item.status = status
    item.note = note
    item.resolved_at = utcnow()


def review_counts(session: Session) -> dict[str, dict[str, int]]:
    """use case -> status -> number of review items."""
    counts: dict[str, dict[str, int]] = {}
    rows = session.execute(
        select(ReviewItem.use_case, ReviewItem.status, func.count()).group_by(
            ReviewItem.use_case, ReviewItem.status
        )
    )
    for use_case, status, count in rows:
        counts.setdefault(use_case, {})[status] = count
    return counts


# --- the corrections corpus --------------------------------------------------------------------


def add_correction(
    session: Session,
    *,
    use_case: str,
    subject_key: str,
    use_case_version: str,
    verdict: str,
    original: dict[str, Any] | None,
    corrected: dict[str, Any],
    note: str | None = None,
    review_item_id: int | None = None,
    interaction_id: int | None = None,
) -> int:
    if verdict not in ("accepted", "corrected"):
        raise ValueError(f"a correction's verdict is accepted or corrected, not {verdict!r}")
    correction = Correction(
        use_case=use_case,
        subject_key=subject_key,
        use_case_version=use_case_version,
        verdict=verdict,
        original=original,
        corrected=corrected,
        note=note,
        review_item_id=review_item_id,
        interaction_id=interaction_id,
        created_at=utcnow(),
    )
    session.add(correction)
    session.flush()
    return correction.id


def current_output(session: Session, use_case: str, subject_key: str) -> UseCaseOutput | None:
    return session.get(UseCaseOutput, (use_case, subject_key))


def apply_reviewed_output(
    session: Session,
    *,
    use_case: str,
    subject_key: str,
    subjects: SubjectTable,
    value: dict[str, Any],
    model: str,
    use_case_version: str,
    interaction_id: int,
) -> None:
    """Deliver a reviewer's value as the current output (until the output is remade); `subjects` is
    where the subject is stored.

    The output keeps its version and model, so it stays current; its `updated_at` moves,
    so downstream use cases that read it become stale and redo their part. When there
    was no output (the model's answer was blocked by a check), one is written and the
    subject's parked work item is marked done.
    """
    now = utcnow()
    output = current_output(session, use_case, subject_key)
    if output is None:
        subject_hash = subjects.content_hashes(session, [subject_key]).get(subject_key)
        if subject_hash is None:
            raise ReviewError(f"{subjects.kind} {subject_key!r} no longer exists")
        digest = hashlib.sha256(json.dumps([use_case, value], sort_keys=True).encode("utf-8")).hexdigest()
        session.add(
            UseCaseOutput(
                use_case=use_case,
                subject_key=subject_key,
                value=value,
                model=model,
                backend=REVIEW_BACKEND,
                use_case_version=use_case_version,
                input_hash=digest,
                subject_hash=subject_hash,
                interaction_id=interaction_id,
                created_at=now,
                updated_at=now,
            )
        )
        session.execute(
            update(WorkItem)
            .where(WorkItem.use_case == use_case, WorkItem.subject_key == subject_key)
            .where(WorkItem.status != "claimed")
            .values(status="done", attempts=0, next_attempt_at=None, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        return
    output.value = value
    output.backend = REVIEW_BACKEND
    output.interaction_id = interaction_id
    output.updated_at = now


@dataclass(frozen=True)
class GoldPair:
    """One corpus entry and the model's current answer for the same output (None: no current answer)."""

    subject_key: str
    verdict: str
    gold: dict[str, Any]
    answer: dict[str, Any] | None


def gold_pairs(session: Session, use_case: str, version: str) -> list[GoldPair]:
    """The newest corpus entry per subject, with the model's current answer of version `version`.

    Where the current output is the reviewer's own value (a correction delivered), the
    model's answer is the one the reviewer saw (`original`), so the evaluation measures
    the model, never the reviewer against themself.
    """
    newest = (
        select(func.max(Correction.id))
        .where(Correction.use_case == use_case)
        .group_by(Correction.subject_key)
    )
    corrections = session.scalars(
        select(Correction).where(Correction.id.in_(newest)).order_by(Correction.subject_key)
    ).all()
    outputs = {
        row.subject_key: row
        for row in session.scalars(
            select(UseCaseOutput).where(
                UseCaseOutput.use_case == use_case,
                UseCaseOutput.subject_key.in_([c.subject_key for c in corrections]),
            )
        )
    }
    pairs = []
    for correction in corrections:
        output = outputs.get(correction.subject_key)
        answer: dict[str, Any] | None = None
        if output is not None and output.use_case_version == version:
            if output.backend != REVIEW_BACKEND:
                answer = output.value
            elif correction.use_case_version == version:
                answer = correction.original
        pairs.append(GoldPair(correction.subject_key, correction.verdict, correction.corrected, answer))
    return pairs


def rejected_keys(session: Session, use_case: str, version: str) -> list[str]:
    """Subjects whose output of this version a reviewer rejected (and did not correct since)."""
    rejected = session.scalars(
        select(ReviewItem.subject_key).where(
            ReviewItem.use_case == use_case,
            ReviewItem.status == "rejected",
            ReviewItem.use_case_version == version,
        )
    ).all()
    later = set(
        session.scalars(
            select(Correction.subject_key).where(
                Correction.use_case == use_case, Correction.subject_key.in_(rejected)
            )
        )
    )
    return sorted(set(rejected) - later)


def current_values(
    session: Session, use_case: str, version: str, keys: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Current model-made values of version `version` for those of `keys` that have one."""
    values: dict[str, dict[str, Any]] = {}
    for start in range(0, len(keys), CHUNK):
        rows = session.execute(
            select(UseCaseOutput.subject_key, UseCaseOutput.value).where(
                UseCaseOutput.use_case == use_case,
                UseCaseOutput.use_case_version == version,
                UseCaseOutput.backend != REVIEW_BACKEND,
                UseCaseOutput.subject_key.in_(list(keys[start : start + CHUNK])),
            )
        )
        values.update(rows.all())
    return values


def gym_marker(session: Session) -> str:
    """A fingerprint of what the gold evaluation reads: equal markers, equal figures."""
    row = session.execute(
        select(
            select(func.count(Correction.id)).scalar_subquery(),
            select(func.max(Correction.id)).scalar_subquery(),
            select(func.count(ReviewItem.id)).where(ReviewItem.status == "rejected").scalar_subquery(),
            select(func.max(UseCaseOutput.updated_at)).scalar_subquery(),
            select(func.count()).select_from(UseCaseOutput).scalar_subquery(),
        )
    ).one()
    return "|".join(str(value) for value in row)


def judge_verdict(session: Session, judge: str, rubric_version: str) -> tuple[bool, str] | None:
    """Whether an LLM judge passed its calibration set under this rubric (and why), when it was tried."""
    row = session.get(ReferenceData, _verdict_name(judge, rubric_version))
    return (row.content_hash == "passed", row.source) if row is not None else None


def record_judge_verdict(
    session: Session, judge: str, rubric_version: str, passed: bool, message: str
) -> None:
    """Remember a judge's calibration verdict: the calibration costs dozens of calls, once per judge."""
    name = _verdict_name(judge, rubric_version)
    row = session.get(ReferenceData, name) or ReferenceData(name=name)
    row.content_hash, row.source, row.updated_at = ("passed" if passed else "refused"), message, utcnow()
    session.add(row)


def _verdict_name(judge: str, rubric_version: str) -> str:
    """The reference-data row of a judge's verdict (not an input of any use case)."""
    digest = hashlib.sha256(f"{judge}|{rubric_version}".encode()).hexdigest()[:16]
    return f"judge_calibration:{digest}"
