"""Shared fixtures: an application database on SQLite and on PostgreSQL, and a Dagster instance.

PostgreSQL tests use 127.0.0.1:5432 (override with PIPELINE_TEST_POSTGRES_URL). When the
server cannot be reached they are skipped, unless PIPELINE_REQUIRE_POSTGRES=1 (as in CI),
where they fail.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest
from dagster import DagsterInstance
from sqlalchemy.engine import make_url

from appdb.database import dispose, session_scope
from appdb.ingest import ingest_files

POSTGRES_ADMIN_URL = os.environ.get(
    "PIPELINE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REQUIRE_POSTGRES = os.environ.get("PIPELINE_REQUIRE_POSTGRES") == "1"
# `live_pipeline`: one real `dagster dev` per session, shared by the daemon and browser tests
pytest_plugins = ["tests.live_pipeline"]


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


@pytest.fixture(scope="session")
def postgres_admin_url() -> str:
    reason = _postgres_unavailable_reason()
    if reason:
        if REQUIRE_POSTGRES:
            pytest.fail(f"{reason} (PIPELINE_REQUIRE_POSTGRES=1, so PostgreSQL tests must run)")
        pytest.skip(reason)
    return POSTGRES_ADMIN_URL


@pytest.fixture
def postgres_url(postgres_admin_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    name = f"pipeline_test_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(postgres_admin_url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    url = make_url(postgres_admin_url).set(drivername="postgresql+psycopg2", database=name)
    rendered = url.render_as_string(hide_password=False)
    try:
        yield rendered
    finally:
        dispose(rendered)
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


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


POSTINGS = [
    {
        "key": "p-1",
        "title": "Data Engineer",
        "company": "Brightwave Energy",
        "location": "Berlin",
        "description": "Build Python and SQL pipelines for turbine telemetry with Dagster and dbt.",
    },
    {
        "key": "p-2",
        "title": "Registered Nurse",
        "company": "Northgate Hospital",
        "location": "Manchester",
        "description": "Care for critically ill patients, administer medication and keep accurate records.",
    },
    {
        "key": "p-3",
        "title": "Electrician",
        "company": "Volt & Partners",
        "location": "Lyon",
        "description": "Install cabling, switchboards and lighting in new homes; test them safely.",
    },
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def seed_postings(url: str, tmp_path: Path, rows: list[dict] | None = None) -> None:
    path = write_jsonl(tmp_path / f"seed-{uuid.uuid4().hex[:6]}.jsonl", rows or POSTINGS)
    with session_scope(url) as session:
        report = ingest_files(session, [path])
    assert not report.rejected, report.rejected


def run_use_case(
    defs, instance: DagsterInstance, keys: list[str], use_case: str = "posting_summary", **kwargs
):  # noqa: ANN001, ANN201
    """Materialize `use_case` for `keys` in ONE run over their partition range, as the sensor would."""
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    known = set(instance.get_dynamic_partitions("postings"))
    instance.add_dynamic_partitions("postings", [key for key in keys if key not in known])
    job = defs.resolve_job_def(f"{use_case}_job")
    tags = {
        ASSET_PARTITION_RANGE_START_TAG: keys[0],
        ASSET_PARTITION_RANGE_END_TAG: keys[-1],
        "pipeline/source": "test",
    }
    return job.execute_in_process(instance=instance, tags=tags, raise_on_error=False, **kwargs)
