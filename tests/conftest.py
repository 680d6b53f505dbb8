"""Shared fixtures: an application database on SQLite and on PostgreSQL, and a Dagster instance.

PostgreSQL tests use 127.0.0.1:5432 (override with PIPELINE_TEST_POSTGRES_URL). When the
server cannot be reached they are skipped, unless PIPELINE_REQUIRE_POSTGRES=1 (as in CI),
where they fail.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg2
import pytest
from dagster import DagsterInstance
from sqlalchemy.engine import make_url

from appdb.database import (
    DEFAULT_BUSY_TIMEOUT_SECONDS,
    DEFAULT_LOCK_WAIT_SECONDS,
    configure_sqlite,
    dispose,
)

POSTGRES_ADMIN_URL = os.environ.get(
    "PIPELINE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_POSTGRES = os.environ.get("PIPELINE_REQUIRE_POSTGRES") == "1"
# the test databases' names: `<prefix>_<random>` (a shared server may give each user a prefix of their own)
TEST_DATABASE_PREFIX = os.environ.get("PIPELINE_TEST_DATABASE_PREFIX", "pipeline_test")
# `live_pipeline`: one real `dagster dev` per session, shared by the daemon and browser tests
pytest_plugins = ["tests.support.live_pipeline"]


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background (`nohup`, `&`, some CI runners) inherits SIGINT ignored. Each
    in-process Dagster run copies SIGINT's handler onto SIGTERM (`dagster._utils.interrupts`), so SIGTERM
    would be ignored too, in this process and in the `tail` processes of Dagster's compute-log capture,
    which then take 30 s each to stop: a minute per in-process run on a Dagster home. A background job
    gets no Ctrl-C from the terminal, so Python's own SIGINT handler changes nothing else."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two test processes) the tests of the shared `dagster dev`
    go to one process, so it is started once, not once per process."""
    for item in items:
        if "live_pipeline" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("live_pipeline"))


def _postgres_unavailable_reason() -> str | None:
    try:
        psycopg2.connect(POSTGRES_ADMIN_URL, connect_timeout=3).close()
    except psycopg2.OperationalError as exc:
        return f"PostgreSQL not reachable at {POSTGRES_ADMIN_URL}: {str(exc).strip()}"
    return None


@pytest.fixture(autouse=True)
def _judge_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gym's judge grades a sample of each run with a second LLM call; tests whose fake models
    answer only the use cases' prompts run without it (tests/test_gym.py turns it on)."""
    monkeypatch.setenv("PIPELINE_JUDGE_SAMPLE", "0")


@pytest.fixture(autouse=True)
def _sqlite_waits_restored() -> Iterator[None]:
    """A test that reads settings with other SQLite waits leaves the defaults for the next test."""
    yield
    configure_sqlite(DEFAULT_BUSY_TIMEOUT_SECONDS, DEFAULT_LOCK_WAIT_SECONDS)


@pytest.fixture(autouse=True)
def _dagster_postgres_url_restored() -> Iterator[None]:
    """`ensure_dagster_home` exports the Dagster PostgreSQL URL its dagster.yaml names; a test's
    per-test database must not leak into the next test's settings."""
    before = os.environ.get("PIPELINE_DAGSTER_POSTGRES_URL")
    yield
    if before is None:
        os.environ.pop("PIPELINE_DAGSTER_POSTGRES_URL", None)
    else:
        os.environ["PIPELINE_DAGSTER_POSTGRES_URL"] = before


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    reason = _postgres_unavailable_reason()
    if reason:
        if REQUIRE_POSTGRES:
            pytest.fail(f"{reason} (PIPELINE_REQUIRE_POSTGRES=1, so PostgreSQL tests must run)")
        pytest.skip(reason)
    return POSTGRES_ADMIN_URL


@pytest.fixture
def postgres_database(postgres_admin_url: str) -> Iterator[Callable[[], str]]:
    """Fresh, empty PostgreSQL databases on demand (one per call), all dropped after the test."""
    admin = psycopg2.connect(postgres_admin_url)
    admin.autocommit = True
    made: list[tuple[str, str]] = []

    def make() -> str:
        name = f"{TEST_DATABASE_PREFIX}_{uuid.uuid4().hex[:12]}"
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        url = make_url(postgres_admin_url).set(drivername="postgresql+psycopg2", database=name)
        rendered = url.render_as_string(hide_password=False)
        made.append((name, rendered))
        return rendered

    try:
        yield make
    finally:
        for name, rendered in made:
            dispose(rendered)
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def postgres_url(postgres_database: Callable[[], str]) -> str:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    return postgres_database()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    yield url
    dispose(url)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def app_db_url(request: pytest.FixtureRequest) -> str:
    """The application database on each supported engine."""
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")


@pytest.fixture
def dagster_instance() -> Iterator[DagsterInstance]:
    with DagsterInstance.ephemeral() as instance:
        yield instance
