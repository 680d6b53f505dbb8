"""The database's clock: every age that decides liveness or a lease is measured on it, not a host's.

Runs on several hosts share one database; their own clocks can disagree by minutes (a host whose clock
ran 120 s ahead reaped a live run at once). So a heartbeat's beat, a claim's lease and the moment they
are judged at are all written and compared as `database_now()` inside the statement: PostgreSQL's
`statement_timestamp()` (UTC), SQLite's `'now'` (SQLite is one host's file, so that host's clock is the
database's). Both give a naive UTC timestamp, as the rest of the schema stores.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Float, literal, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import Session
from sqlalchemy.sql.functions import FunctionElement


class _DatabaseNow(FunctionElement[datetime]):
    """The database's UTC time now, plus an offset in seconds (a bound number)."""

    type = DateTime()
    name = "database_now"
    inherit_cache = True


def database_now(offset_seconds: float = 0.0) -> _DatabaseNow:
    """A SQL expression: the database's current UTC time, `offset_seconds` later (or earlier)."""
    return _DatabaseNow(literal(float(offset_seconds), Float()))


def _offset(element: _DatabaseNow, compiler: Any, **kw: Any) -> str:
    (offset,) = element.clauses
    return compiler.process(offset, **kw)


@compiles(_DatabaseNow, "postgresql")
def _postgresql_now(element: _DatabaseNow, compiler: Any, **kw: Any) -> str:
    return (
        f"(timezone('utc', statement_timestamp()) + {_offset(element, compiler, **kw)} * interval '1 second')"
    )


@compiles(_DatabaseNow, "sqlite")
def _sqlite_now(element: _DatabaseNow, compiler: Any, **kw: Any) -> str:
    # '%f' gives milliseconds; three more digits make it the six SQLAlchemy stores, so stored times and
    # this one compare as text in the right order
    return (
        f"(strftime('%Y-%m-%d %H:%M:%f', 'now', ({_offset(element, compiler, **kw)}) || ' seconds') || '000')"
    )


def now_on_database(session: Session) -> datetime:
    """The database's UTC time now: what ages read from the database are measured against."""
    return session.scalar(select(database_now()))
