"""How far a run got: the subjects each use case finished since a moment, read while the run works.

What the terminal's progress bars (`pipeline run`, `pipeline demo`) show; one grouped count over an
indexed column, cheap enough to ask every half second beside a run."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from appdb.models import WorkItem


def finished_since(session: Session, use_cases: Sequence[str], since: datetime) -> dict[str, int]:
    """Subjects each use case finished since `since`: an output stored, an item parked, or an attempt
    failed and left for a later retry (done with for this run either way)."""
    finished = or_(
        WorkItem.status.in_(("done", "failed")),
        and_(WorkItem.status == "pending", WorkItem.attempts > 0),
    )
    rows = session.execute(
        select(WorkItem.use_case, func.count())
        .where(WorkItem.use_case.in_(list(use_cases)), WorkItem.updated_at >= since, finished)
        .group_by(WorkItem.use_case)
    ).all()
    return {name: 0 for name in use_cases} | dict(rows)
