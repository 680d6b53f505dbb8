"""The read half of a merging upsert: each incoming row merged with the row already stored.

The merge function comes from the domain (`domain/core/merge.py`); this module only fetches the stored
fields it needs, in chunks, so a plain upsert can write the merged rows as if they had arrived so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from appdb.dialects import CHUNK

MergeFunction = Callable[[Mapping[str, Any] | None, Mapping[str, Any]], dict[str, Any]]
BOOKKEEPING_COLUMNS = frozenset({"id", "content_hash", "ingested_at", "updated_at", "created_at", "kind"})


def merge_with_stored(
    session: Session, model: Any, rows: Sequence[Mapping[str, Any]], merge: MergeFunction, **where: Any
) -> list[dict[str, Any]]:
    """`rows` (each with a `key`) with every stored one merged in by `merge(stored, incoming)`.

    `model` is the table's class (e.g. `Posting`); `where` narrows it (e.g. kind="autodo"). The key is
    kept whatever the merge returns; bookkeeping columns are not the merge's business.
    """
    fields = [column.key for column in model.__table__.columns if column.key not in BOOKKEEPING_COLUMNS]
    keys = [row["key"] for row in rows]
    stored: dict[str, dict[str, Any]] = {}
    for start in range(0, len(keys), CHUNK):
        query = select(*(getattr(model, name) for name in fields)).where(
            model.key.in_(keys[start : start + CHUNK]),
            *(getattr(model, name) == value for name, value in where.items()),
        )
        for found in session.execute(query):
            stored[found.key] = dict(zip(fields, found, strict=True))
    merged = []
    for row in rows:
        result = merge(stored.get(row["key"]), row)
        merged.append({**{name: result.get(name) for name in row}, "key": row["key"]})
    return merged
