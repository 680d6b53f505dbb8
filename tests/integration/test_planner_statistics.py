"""Discovery keeps PostgreSQL's planner statistics fresh: a table written since its last analyze (by
more than autovacuum's threshold) is analyzed before discovery plans on it, once, even from a
read-only session; SQLite is left as it is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlalchemy import text

from appdb import discovery, planner_statistics
from appdb.database import read_only_session, session_scope
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from tests.support.postings import seed_postings

SPEC = discovery.WorkSpec(
    use_case="posting_summary", version="2026-11-22.1", upstream_versions={}, subjects=POSTINGS_TABLE
)
ROWS = [
    {"key": f"p-{n}", "title": "Nurse", "description": f"Care for patients, ward {n}."} for n in range(300)
]
COUNTERS_WAIT_SECONDS = 30.0  # a backend reports its counts when idle, within about 10 s


def _table_stats(url: str, table: str) -> tuple[float, object, int]:
    """(reltuples, last_analyze, n_mod_since_analyze) of `table`."""
    with session_scope(url) as session:
        row = session.execute(
            text(
                "SELECT class.reltuples, stats.last_analyze, stats.n_mod_since_analyze "
                "FROM pg_stat_user_tables AS stats JOIN pg_class AS class ON class.oid = stats.relid "
                "WHERE stats.relname = :table"
            ),
            {"table": table},
        ).one()
    return float(row[0]), row[1], int(row[2])


def _wait_for_counts(url: str, table: str, at_least: int) -> None:
    """Until the server has the writes' counts (each backend reports them a while after it idles)."""
    deadline = time.monotonic() + COUNTERS_WAIT_SECONDS
    while _table_stats(url, table)[2] < at_least:
        assert time.monotonic() < deadline, f"the server never counted the writes to {table}"
        time.sleep(0.2)


@pytest.mark.postgres
def test_discovery_analyzes_the_tables_written_since_their_last_analyze(
    postgres_url: str, tmp_path: Path
) -> None:
    seed_postings(postgres_url, tmp_path, ROWS)
    _wait_for_counts(postgres_url, "postings", len(ROWS))
    assert _table_stats(postgres_url, "postings")[:2] == (-1.0, None)  # never analyzed: the planner guesses

    planner_statistics.forget_checks()
    with read_only_session(postgres_url) as session:  # as `pipeline discover --shadow` reads
        assert len(discovery.find_pending_work(session, SPEC)) == len(ROWS)

    rows, analyzed_at, changed = _table_stats(postgres_url, "postings")
    assert (rows, changed) == (len(ROWS), 0)  # the planner now knows the table
    assert analyzed_at is not None

    planner_statistics.forget_checks()  # past the interval: nothing changed, nothing analyzed again
    with session_scope(postgres_url) as session:
        discovery.find_pending_work(session, SPEC)
    assert _table_stats(postgres_url, "postings")[1] == analyzed_at


@pytest.mark.postgres
def test_discovery_looks_at_most_every_few_seconds(postgres_url: str, tmp_path: Path) -> None:
    seed_postings(postgres_url, tmp_path, ROWS[:100])
    _wait_for_counts(postgres_url, "postings", 100)
    planner_statistics.forget_checks()
    with session_scope(postgres_url) as session:
        assert "postings" in planner_statistics.refresh_if_stale(session, ["postings"])
    seed_postings(postgres_url, tmp_path, ROWS[100:])
    _wait_for_counts(postgres_url, "postings", 200)
    with session_scope(postgres_url) as session:  # within the interval: not even a look
        assert planner_statistics.refresh_if_stale(session, ["postings"]) == []
    planner_statistics.forget_checks()
    with session_scope(postgres_url) as session:
        assert planner_statistics.refresh_if_stale(session, ["postings"]) == ["postings"]


def test_sqlite_is_left_as_it_is(sqlite_url: str, tmp_path: Path) -> None:
    seed_postings(sqlite_url, tmp_path, ROWS[:10])
    planner_statistics.forget_checks()
    with session_scope(sqlite_url) as session:
        assert planner_statistics.refresh_if_stale(session, ["postings"]) == []
        assert len(discovery.find_pending_work(session, SPEC)) == 10
