"""Retention: which postings are finished, so their Dagster partitions can go (outputs and traces stay)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from appdb.models import UseCaseOutput, WorkItem

UNFINISHED_STATUSES = ("pending", "claimed", "failed")


def finished_postings(session: Session, use_cases: Sequence[str], before: datetime) -> list[str]:
    """Postings with an output of every use case, the last one written before `before`, and no work
    item still pending, claimed or parked. (Whether each output is still *current* is discovery's
    question: the caller drops the postings it finds pending.)"""
    names = sorted(set(use_cases))
    unfinished = select(WorkItem.posting_key).where(
        WorkItem.use_case.in_(names), WorkItem.status.in_(UNFINISHED_STATUSES)
    )
    query = (
        select(UseCaseOutput.posting_key)
        .where(UseCaseOutput.use_case.in_(names), UseCaseOutput.posting_key.not_in(unfinished))
        .group_by(UseCaseOutput.posting_key)
        .having(func.count(UseCaseOutput.use_case) == len(names), func.max(UseCaseOutput.updated_at) < before)
        .order_by(UseCaseOutput.posting_key)
    )
    return list(session.scalars(query))
