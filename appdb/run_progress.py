"""How far a run got, and what failed: the subjects each use case finished since a moment, and the work
items whose last attempt failed.

What the terminal's progress bars (`pipeline run`, `pipeline demo`) show, read while the run works (one
grouped count over an indexed column, cheap enough to ask every half second), and what `pipeline run`
and `pipeline status` say failed. A failed attempt is not done: the subject waits for a retry (with
backoff) or, after the retry policy's last attempt, is parked until `pipeline retry`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, and_, case, func, select
from sqlalchemy.orm import Session

from appdb.models import WorkItem, utcnow

FAILED_SAMPLE = 500
"""At most this many failed items are read to group their errors (the newest); counts are exact."""


def attempt_failed() -> ColumnElement[bool]:
    """A work item whose last attempt failed: parked, or pending with its error, waiting for a retry (an
    item `pipeline retry` re-queued has no attempts left on it, and one being retried is `claimed`)."""
    return and_(
        WorkItem.status.in_(("pending", "failed")), WorkItem.attempts > 0, WorkItem.last_error.is_not(None)
    )


@dataclass(frozen=True)
class Finished:
    """Subjects of one use case the run is through with: an output stored, or the attempt failed."""

    done: int = 0
    failed: int = 0


def finished_since(session: Session, use_cases: Sequence[str], since: datetime) -> dict[str, Finished]:
    """Per use case, the subjects done (an output stored) and failed (the attempt failed: waiting for a
    retry, or parked) since `since`."""
    failed = attempt_failed()
    rows = session.execute(
        select(
            WorkItem.use_case,
            func.count(case((WorkItem.status == "done", 1))),
            func.count(case((failed, 1))),
        )
        .where(WorkItem.use_case.in_(list(use_cases)), WorkItem.updated_at >= since)
        .group_by(WorkItem.use_case)
    ).all()
    found = {name: Finished(done, failed) for name, done, failed in rows}
    return {name: found.get(name, Finished()) for name in use_cases}


@dataclass(frozen=True)
class FailureCounts:
    """The items of one use case whose last attempt failed, by what happens to them next."""

    failed: int = 0
    parked: int = 0  # failed the retry policy's last attempt: waits for `pipeline retry`
    waiting: int = 0  # backing off: no run takes it before `next_retry`
    next_retry: datetime | None = None

    @property
    def due(self) -> int:
        """Failed, not parked, and due again: the next run (or sensor tick) retries them."""
        return self.failed - self.parked - self.waiting


def failure_counts(
    session: Session, use_cases: Sequence[str], since: datetime | None = None, now: datetime | None = None
) -> dict[str, FailureCounts]:
    """Per use case, the items whose last attempt failed (since `since`, when given)."""
    now = now or utcnow()
    backing_off = and_(WorkItem.status == "pending", WorkItem.next_attempt_at > now)
    query = (
        select(
            WorkItem.use_case,
            func.count(),
            func.count(case((WorkItem.status == "failed", 1))),
            func.count(case((backing_off, 1))),
            func.min(case((backing_off, WorkItem.next_attempt_at))),
        )
        .where(WorkItem.use_case.in_(list(use_cases)), attempt_failed())
        .group_by(WorkItem.use_case)
    )
    if since is not None:
        query = query.where(WorkItem.updated_at >= since)
    found = {row[0]: FailureCounts(*row[1:]) for row in session.execute(query)}
    return {name: found.get(name, FailureCounts()) for name in use_cases}


@dataclass(frozen=True)
class FailedAttempt:
    use_case: str
    key: str
    error: str


def failed_attempts(
    session: Session, use_case: str, since: datetime | None = None, limit: int | None = FAILED_SAMPLE
) -> list[FailedAttempt]:
    """The newest `limit` (None: all) items of `use_case` whose last attempt failed (since `since`)."""
    query = (
        select(WorkItem.use_case, WorkItem.subject_key, WorkItem.last_error)
        .where(WorkItem.use_case == use_case, attempt_failed())
        .order_by(WorkItem.updated_at.desc(), WorkItem.subject_key)
        .limit(limit)
    )
    if since is not None:
        query = query.where(WorkItem.updated_at >= since)
    return [FailedAttempt(*row) for row in session.execute(query)]
