"""Interactions: every LLM call (and each value a reviewer delivered), stored exactly as sent and answered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from appdb.models import Interaction
from appdb.redaction import redact


def record_interaction(session: Session, **fields: Any) -> int:
    """Store one LLM call exactly as sent and answered; returns its id.

    Characters no text column can hold (NUL on PostgreSQL, unpaired surrogates anywhere) are
    stored as U+FFFD: an odd response is recorded as an item's outcome instead of crashing the run.
    """
    import re

    unstorable = re.compile("[\x00\ud800-\udfff]")
    fields = {
        name: unstorable.sub("\ufffd", value) if isinstance(value, str) else value
        for name, value in fields.items()
    }
    if fields.get("error"):  # the prompt and response stay exact; an error message may name a server URL
        fields["error"] = redact(fields["error"])
    # A Core INSERT ... RETURNING: the ORM unit of work (object, flush) cost more than the insert itself.
    table = Interaction.__table__
    return session.execute(insert(table).returning(table.c.id), fields).scalar_one()


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
