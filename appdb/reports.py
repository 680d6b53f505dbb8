"""Read-only questions the command line asks: counts, a posting's whole record, outputs for display."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from appdb.events import usage_columns
from appdb.models import Interaction, Posting, ReviewItem, Subject, UseCaseOutput, WorkItem


def posting_count(session: Session) -> int:
    return session.scalar(select(func.count(Posting.id))) or 0


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


def get_posting(session: Session, key: str) -> Posting | None:
    return session.scalar(select(Posting).where(Posting.key == key))


def get_subject(session: Session, key: str) -> Subject | None:
    """A subject of a kind other than postings by its key (the first kind that has it)."""
    return session.scalars(select(Subject).where(Subject.key == key).order_by(Subject.id)).first()


def postings_in_order(session: Session, keys: Sequence[str]) -> list[Posting]:
    """The postings with these keys, in ingest order."""
    return list(session.scalars(select(Posting).where(Posting.key.in_(keys)).order_by(Posting.id)))


def posting_titles(session: Session, keys: Sequence[str]) -> dict[str, str]:
    return dict(session.execute(select(Posting.key, Posting.title).where(Posting.key.in_(set(keys)))).all())


def output_values(session: Session, keys: Sequence[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Every current output value of these postings, by (posting key, use case)."""
    rows = session.scalars(select(UseCaseOutput).where(UseCaseOutput.posting_key.in_(keys)))
    return {(row.posting_key, row.use_case): row.value for row in rows}


def waiting_work(session: Session, use_case: str, keys: Sequence[str]) -> dict[str, WorkItem]:
    """The work items of these postings whose last attempt failed (parked or waiting for a retry), by key."""
    rows = session.scalars(
        select(WorkItem).where(
            WorkItem.use_case == use_case, WorkItem.posting_key.in_(keys), WorkItem.last_error.is_not(None)
        )
    )
    return {row.posting_key: row for row in rows}


def posting_outputs(session: Session, key: str) -> dict[str, UseCaseOutput]:
    """The current outputs of one posting, by use case."""
    rows = session.scalars(select(UseCaseOutput).where(UseCaseOutput.posting_key == key))
    return {row.use_case: row for row in rows}


def posting_interactions(session: Session, key: str) -> list[Interaction]:
    """Every call recorded for one posting, oldest first."""
    return list(
        session.scalars(select(Interaction).where(Interaction.posting_key == key).order_by(Interaction.id))
    )


def llm_usage(session: Session, key: str) -> list[tuple[str, int, int, float]]:
    """(use case, LLM calls, tokens, cost) of every call made for one subject, failed ones and retries
    included: what its outputs cost so far (scripts are not LLM calls)."""
    rows = session.execute(
        select(Interaction.use_case, *usage_columns())
        .where(Interaction.posting_key == key, Interaction.backend != "script")
        .group_by(Interaction.use_case)
        .order_by(Interaction.use_case)
    ).all()
    return [
        (use_case, int(calls), int(prompt) + int(completion), float(cost))
        for use_case, calls, prompt, completion, cost in rows
    ]


def mean_llm_latency(session: Session, keys: Sequence[str]) -> list[tuple[str, float, int]]:
    """(use case, mean latency in ms, calls) of the LLM calls that made these postings' current outputs."""
    rows = session.execute(
        select(UseCaseOutput.use_case, func.avg(Interaction.latency_ms), func.count(Interaction.id))
        .join(Interaction, Interaction.id == UseCaseOutput.interaction_id)
        .where(UseCaseOutput.posting_key.in_(keys), Interaction.backend != "script")
        .group_by(UseCaseOutput.use_case)
    ).all()
    return [(use_case, float(mean or 0.0), count) for use_case, mean, count in rows]


def get_review_item(session: Session, item_id: int) -> ReviewItem | None:
    return session.get(ReviewItem, item_id)


def stale_output_facts(session: Session, use_case: str, keys: Sequence[str]) -> dict[str, Any]:
    """For these postings' outputs: what made them (version, model, posting hash) and the posting's
    hash now, by posting key."""
    facts: dict[str, Any] = {}
    for start in range(0, len(keys), 500):
        rows = session.execute(
            select(
                UseCaseOutput.posting_key,
                UseCaseOutput.use_case_version,
                UseCaseOutput.model,
                UseCaseOutput.posting_hash,
                Posting.content_hash,
            )
            .join(Posting, Posting.key == UseCaseOutput.posting_key)
            .where(
                UseCaseOutput.use_case == use_case, UseCaseOutput.posting_key.in_(keys[start : start + 500])
            )
        )
        facts.update((row.posting_key, row) for row in rows)
    return facts
