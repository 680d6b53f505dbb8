"""Read-only questions the command line asks: counts, a subject's outputs and calls, outputs for display."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from appdb.events import usage_columns
from appdb.models import Interaction, ReviewItem, UseCaseOutput, WorkItem


def work_state_counts(session: Session, use_case: str) -> dict[str, int]:
    """How many work items of the use case are in each state (claimed, failed, done, pending)."""
    rows = session.execute(
        select(WorkItem.status, func.count()).where(WorkItem.use_case == use_case).group_by(WorkItem.status)
    ).all()
    return dict(rows)


def output_counts(session: Session) -> dict[str, int]:
    """Stored outputs per use case."""
    rows = session.execute(select(UseCaseOutput.use_case, func.count()).group_by(UseCaseOutput.use_case))
    return dict(rows.all())


def output_values(session: Session, keys: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every current output value of these subjects, by (subject key, use case)."""
    rows = session.scalars(select(UseCaseOutput).where(UseCaseOutput.subject_key.in_(keys)))
    return {(row.subject_key, row.use_case): row.value for row in rows}


def waiting_work(session: Session, use_case: str, keys: Sequence[str]) -> dict[str, WorkItem]:
    """The work items of these subjects whose last attempt failed (parked or waiting for a retry), by key."""
    rows = session.scalars(
        select(WorkItem).where(
            WorkItem.use_case == use_case, WorkItem.subject_key.in_(keys), WorkItem.last_error.is_not(None)
        )
    )
    return {row.subject_key: row for row in rows}


def subject_outputs(session: Session, key: str) -> dict[str, UseCaseOutput]:
    """The current outputs of one subject, by use case."""
    rows = session.scalars(select(UseCaseOutput).where(UseCaseOutput.subject_key == key))
    return {row.use_case: row for row in rows}


def subject_interactions(session: Session, key: str) -> list[Interaction]:
    """Every call recorded for one subject, oldest first."""
    return list(
        session.scalars(select(Interaction).where(Interaction.subject_key == key).order_by(Interaction.id))
    )


def llm_usage(session: Session, key: str) -> list[tuple[str, int, int, float]]:
    """(use case, LLM calls, tokens, cost) of every call made for one subject, failed ones and retries
    included: what its outputs cost so far (scripts are not LLM calls)."""
    rows = session.execute(
        select(Interaction.use_case, *usage_columns())
        .where(Interaction.subject_key == key, Interaction.backend != "script")
        .group_by(Interaction.use_case)
        .order_by(Interaction.use_case)
    ).all()
    return [
        (use_case, int(calls), int(prompt) + int(completion), float(cost))
        for use_case, calls, prompt, completion, cost in rows
    ]


def mean_llm_latency(session: Session, keys: Sequence[str]) -> list[tuple[str, float, int]]:
    """(use case, mean latency in ms, calls) of the LLM calls that made these subjects' current outputs."""
    rows = session.execute(
        select(UseCaseOutput.use_case, func.avg(Interaction.latency_ms), func.count(Interaction.id))
        .join(Interaction, Interaction.id == UseCaseOutput.interaction_id)
        .where(UseCaseOutput.subject_key.in_(keys), Interaction.backend != "script")
        .group_by(UseCaseOutput.use_case)
    ).all()
    return [(use_case, float(mean or 0.0), count) for use_case, mean, count in rows]


def get_review_item(session: Session, item_id: int) -> ReviewItem | None:
    return session.get(ReviewItem, item_id)
