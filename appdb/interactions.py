"""Interactions: every LLM call (and each value a reviewer delivered), stored exactly as sent and answered."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from appdb.dialects import rows_by_columns
from appdb.models import Interaction
from appdb.redaction import redact

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def record_interaction(session: Session, **fields: Any) -> int:
    """Store one LLM call exactly as sent and answered; returns its id (`record_interactions`)."""
    return record_interactions(session, [fields])[0]


def record_interactions(session: Session, calls: Sequence[Mapping[str, Any]]) -> list[int]:
    """Store calls exactly as sent and answered, in one statement per kind of row; their ids, in order.

    Characters no text column can hold (NUL on PostgreSQL, unpaired surrogates anywhere) are
    stored as U+FFFD: an odd response is recorded as an item's outcome instead of crashing the run.
    """
    rows = [_storable(fields) for fields in calls]
    if not rows:
        return []
    # Core INSERT ... RETURNING, many rows a statement: the ORM unit of work (object, flush) cost more
    # than the insert itself, and a statement per call most of a script run's CPU
    table = Interaction.__table__
    by_subject = {(row.get("use_case"), row.get("subject_key")): index for index, row in enumerate(rows)}
    if len(by_subject) < len(rows):  # the same subject twice: rows a statement each, in order
        return [session.execute(insert(table).returning(table.c.id), row).scalar_one() for row in rows]
    ids: list[int] = [0] * len(rows)
    for same in rows_by_columns(rows).values():
        # matched by subject, not by order: SQLite returns a multi-row insert's ids in no set order
        # (SQLAlchemy's `sort_by_parameter_order` sends such rows one statement each)
        statement = insert(table).returning(table.c.id, table.c.use_case, table.c.subject_key)
        for interaction_id, use_case, subject_key in session.execute(statement, same):
            ids[by_subject[(use_case, subject_key)]] = interaction_id
    return ids


def _storable(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields as a row: unstorable characters replaced, an error message redacted."""
    row = {
        name: _UNSTORABLE.sub("\ufffd", value) if isinstance(value, str) else value
        for name, value in fields.items()
    }
    if row.get("error"):  # the prompt and response stay exact; an error message may name a server URL
        row["error"] = redact(row["error"])
    return row


def latest_run_interactions(
    session: Session, use_case: str, run_id: str, keys: Sequence[str]
) -> dict[str, Interaction]:
    """The last interaction of each posting in `keys` that this run recorded for `use_case`."""
    rows = session.scalars(
        select(Interaction)
        .where(
            Interaction.use_case == use_case, Interaction.run_id == run_id, Interaction.subject_key.in_(keys)
        )
        .order_by(Interaction.id)
    )
    return {row.subject_key: row for row in rows}
