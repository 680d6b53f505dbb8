"""The event log: what Dagster's run log does not keep across runs and domains.

Kinds: `discovery` (how many items a sensor tick found, per work group), `pause` and `resume` (with the
reason), `error` (an item's failure, by class), `run_cost` (one per run and use case: calls, tokens and
cost). Each interaction carries its own cost too (`interactions.cost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from appdb.models import Event, Interaction, utcnow
from appdb.redaction import redact

EVENT_KINDS = ("discovery", "pause", "resume", "error", "run_cost")


def record_event(session: Session, kind: str, **fields: Any) -> None:
    """Append one event (in the caller's transaction)."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}: one of {', '.join(EVENT_KINDS)}")
    if fields.get("reason"):
        fields["reason"] = redact(fields["reason"])
    session.execute(insert(Event).values(kind=kind, at=fields.pop("at", None) or utcnow(), **fields))


def error_class(error: str) -> str:
    """A short class for an item's error message, so errors can be counted by kind.

    Exceptions are stored as ``Name: message``; the engine's own messages are classed by what they say.
    """
    head = error.split(":", 1)[0].strip()
    if head.isidentifier() and head[:1].isupper() and head != head.upper():
        return head
    lowered = error.lower()
    for needle, name in (
        ("claim lost", "claim_lost"),
        ("not valid json", "not_json"),
        ("cannot be read as json", "not_json"),
        ("empty response", "empty_output"),
        ("postprocess failed", "postprocess"),
        ("schema", "schema"),
        ("timed out", "timeout"),
        ("template variable", "template_variable"),
        ("no value for", "template_variable"),
        ("blocked", "blocked_by_check"),
        ("too long", "too_long"),
    ):
        if needle in lowered:
            return name
    return "item_error"


@dataclass(frozen=True)
class EventRow:
    at: datetime
    kind: str
    use_case: str | None
    run_id: str | None
    count: int | None
    error_class: str | None
    reason: str | None
    model: str | None
    tokens: int
    cost: float | None


def list_events(
    session: Session, *, kinds: Sequence[str] = (), since: datetime | None = None, limit: int = 50
) -> list[EventRow]:
    """The newest events first (of these kinds, since then)."""
    query = select(Event).order_by(Event.id.desc()).limit(limit)
    if kinds:
        query = query.where(Event.kind.in_(list(kinds)))
    if since is not None:
        query = query.where(Event.at >= since)
    return [
        EventRow(
            row.at,
            row.kind,
            row.use_case,
            row.run_id,
            row.count,
            row.error_class,
            row.reason,
            row.model,
            (row.prompt_tokens or 0) + (row.completion_tokens or 0),
            row.cost,
        )
        for row in session.scalars(query)
    ]


def errors_by_class(session: Session, since: datetime | None = None) -> dict[tuple[str, str], int]:
    """(use case, error class) -> how many item errors."""
    query = (
        select(Event.use_case, Event.error_class, func.count())
        .where(Event.kind == "error")
        .group_by(Event.use_case, Event.error_class)
    )
    if since is not None:
        query = query.where(Event.at >= since)
    return {(use_case or "", cls or ""): count for use_case, cls, count in session.execute(query)}


def usage_columns() -> tuple[Any, ...]:
    """Aggregates of a group of interactions: calls, prompt tokens, completion tokens, cost."""
    return (
        func.count(Interaction.id),
        func.coalesce(func.sum(Interaction.prompt_tokens), 0),
        func.coalesce(func.sum(Interaction.completion_tokens), 0),
        func.coalesce(func.sum(Interaction.cost), 0.0),
    )


def run_cost(session: Session, run_id: str, use_case: str) -> tuple[int, int, int, float]:
    """(calls, prompt tokens, completion tokens, cost) of one run's interactions for one use case."""
    row = session.execute(
        select(*usage_columns()).where(Interaction.run_id == run_id, Interaction.use_case == use_case)
    ).one()
    return int(row[0]), int(row[1]), int(row[2]), float(row[3])


def interactions_by_hour_and_source(session: Session, hours: int = 24) -> dict[str, dict[str, int]]:
    """Interactions per hour (``YYYY-MM-DD HH:00``) by source (sensor, backfill, ui, cli, ...), newest
    hours first: the view for comparing two systems run side by side."""
    since = utcnow() - timedelta(hours=hours)
    rows = session.execute(
        select(Interaction.started_at, Interaction.source).where(Interaction.started_at >= since)
    )
    table: dict[str, dict[str, int]] = {}
    for started_at, source in rows:
        hour = started_at.strftime("%Y-%m-%d %H:00")
        by_source = table.setdefault(hour, {})
        by_source[source] = by_source.get(source, 0) + 1
    return dict(sorted(table.items(), reverse=True))
