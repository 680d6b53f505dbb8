"""PostgreSQL's planner statistics for the tables discovery reads, kept fresh by the application.

Discovery's queries join the subjects, their outputs and work items. Without statistics (a table
PostgreSQL never analyzed: autovacuum off, or not yet at it since a burst of writes) the planner
takes each equality filter as 0.5 % of the rows, estimates an upstream's 10,000 outputs at one row,
puts them on the outside of a nested loop and rescans the whole join for each: skill resolution's
discovery took 10-60 s a query at 10,000 postings (one server core busy the whole time), where
with statistics it takes 0.06 s, and the resolution trailed its skills by 3.5 minutes.

So discovery asks, at most every `CHECK_EVERY_SECONDS` per database and process, which of its
tables changed by more than autovacuum's own default threshold since their last analyze (50 rows
and a tenth of the table), and analyzes those: on its own autocommit connection (the caller's
transaction may be read-only or rolled back), skipping a table another session is analyzing.
Where autovacuum keeps up, nothing is stale and this is one query every few seconds. A failure
here (no privilege, the server gone) is logged and leaves discovery as it was.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from sqlalchemy import URL, text
from sqlalchemy.orm import Session

from appdb.dialects import is_postgres

CHECK_EVERY_SECONDS = 5.0
STALE_ROWS = 50  # autovacuum_analyze_threshold's default
STALE_FRACTION = 0.1  # autovacuum_analyze_scale_factor's default

STALE_TABLES_SQL = text(
    """
    SELECT stats.relname
    FROM pg_stat_user_tables AS stats
    JOIN pg_class AS class ON class.oid = stats.relid
    WHERE stats.schemaname = current_schema()
      AND stats.relname = ANY(:tables)
      AND stats.n_mod_since_analyze > :rows + :fraction * GREATEST(class.reltuples, 0)
    ORDER BY stats.relname
    """
)

LOG = logging.getLogger(__name__)
_last_check: dict[URL, float] = {}  # database -> monotonic time of this process's last look
_lock = threading.Lock()


def refresh_if_stale(session: Session, tables: Sequence[str]) -> list[str]:
    """Analyze those of `tables` whose statistics are stale (PostgreSQL; at most every few seconds
    per database in this process); the tables analyzed."""
    if not is_postgres(session):
        return []
    engine = session.get_bind().engine
    now = time.monotonic()
    with _lock:  # on every discovery query: a look-up, not a rendered URL
        if now - _last_check.get(engine.url, float("-inf")) < CHECK_EVERY_SECONDS:
            return []
        _last_check[engine.url] = now
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            stale = list(
                connection.scalars(
                    STALE_TABLES_SQL,
                    {"tables": list(tables), "rows": STALE_ROWS, "fraction": STALE_FRACTION},
                )
            )
            for table in stale:  # names read from the catalog, quoted as identifiers
                connection.execute(text(f"ANALYZE (SKIP_LOCKED) {_quoted(table)}"))
    except Exception as exc:  # statistics help the planner; their absence must not stop discovery
        LOG.warning("could not refresh the planner statistics of %s: %s", ", ".join(tables), exc)
        return []
    return stale


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def forget_checks() -> None:
    """Look again at the next call, whatever the interval (tests)."""
    with _lock:
        _last_check.clear()


__all__ = ["CHECK_EVERY_SECONDS", "forget_checks", "refresh_if_stale"]
