"""Pooled PostgreSQL connections are checked with a round trip only after sitting idle
(`appdb.database.ping_when_idle`): a connection the server dropped meanwhile is replaced, not handed
out dead, and a connection back from work a moment ago goes out without a round trip."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg2
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import OperationalError

from appdb.database import ping_when_idle

pytestmark = pytest.mark.postgres


def _backend(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _drop_on_the_server(postgres_admin_url: str, pid: int) -> None:
    admin = psycopg2.connect(postgres_admin_url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", (pid,))
    admin.close()


@contextmanager
def _a_dropped_connection_in_the_pool(
    url: str, admin_url: str, idle_seconds: float
) -> Iterator[tuple[Engine, int]]:
    """A pool of one whose connection the server has dropped while it sat in the pool."""
    engine = ping_when_idle(create_engine(url, pool_size=1), idle_seconds=idle_seconds)
    try:
        pid = _backend(engine)
        _drop_on_the_server(admin_url, pid)
        yield engine, pid
    finally:
        engine.dispose()


def test_an_idle_connection_the_server_dropped_is_replaced_before_it_is_handed_out(
    postgres_url: str, postgres_admin_url: str
) -> None:
    with _a_dropped_connection_in_the_pool(postgres_url, postgres_admin_url, 0.0) as (engine, pid):
        assert _backend(engine) != pid  # a new connection, and no error


def test_without_the_ping_the_dropped_connection_would_have_failed_the_query(
    postgres_url: str, postgres_admin_url: str
) -> None:
    """The same drop with a connection counted as busy (no ping): what the ping saves a user from."""
    with _a_dropped_connection_in_the_pool(postgres_url, postgres_admin_url, 3600.0) as (engine, pid):
        with pytest.raises(OperationalError):
            _backend(engine)
        assert _backend(engine) != pid  # SQLAlchemy dropped the dead connection: the next one works


def test_a_connection_back_from_work_a_moment_ago_goes_out_without_a_round_trip(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = ping_when_idle(create_engine(postgres_url, pool_size=1), idle_seconds=60.0)
    pings: list[object] = []
    ping = engine.dialect.do_ping
    monkeypatch.setattr(
        engine.dialect, "do_ping", lambda connection: pings.append(connection) or ping(connection)
    )
    try:
        for _ in range(20):
            _backend(engine)
        assert pings == []
        monkeypatch.setattr("appdb.database.time.monotonic", lambda: 1e12)  # an hour and more later
        _backend(engine)
        assert len(pings) == 1
    finally:
        engine.dispose()
