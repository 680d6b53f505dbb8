"""What differs between the two engines the application database runs on (SQLite, PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

CHUNK = 500
"""Keys per IN (...) list: SQLite caps the parameters of a statement."""


def insert_for(session: Session) -> Any:
    """The dialect's INSERT constructor (both have ON CONFLICT)."""
    if is_postgres(session):
        from sqlalchemy.dialects import postgresql  # its drivers' modules cost ~0.1 s: only on PostgreSQL

        return postgresql.insert
    return sqlite.insert


def rows_by_columns(rows: Iterable[dict[str, Any]]) -> dict[tuple[str, ...], list[dict[str, Any]]]:
    """Rows grouped by the columns they set, in order: an executemany sends rows of one shape."""
    grouped: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(tuple(row), []).append(row)
    return grouped


def is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"
