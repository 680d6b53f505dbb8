"""Dagster's own storage: SQLite in DAGSTER_HOME by default, dagster-postgres when configured."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster_postgres.run_storage.run_storage import PostgresRunStorage
from pytest_httpserver import HTTPServer

from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings
from resources.ollama_backend import OllamaResource
from tests.support.fakes import FakeOllama
from tests.support.postings import run_use_case, seed_postings


def test_default_home_uses_sqlite_and_one_llm_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_postgres_url=None)
    config = yaml.safe_load((ensure_dagster_home(settings) / "dagster.yaml").read_text())
    assert "storage" not in config
    assert config["concurrency"]["pools"]["default_limit"] == 1
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        assert isinstance(instance.run_storage, SqliteRunStorage)


def test_a_launch_that_times_out_on_a_loaded_machine_is_queued_again_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At load 100 on 2 cores the daemon's call to the code server to start a run timed out (60 s) 15
    times in 25 minutes; each such run failed, and three failed taxonomy loads left skill resolution
    waiting for a changed file. Dagster's queue retries such launches when the home asks it to."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_postgres_url=None)
    ensure_dagster_home(settings)
    with DagsterInstance.from_config(str(tmp_path / "home")) as instance:
        queue = instance.get_concurrency_config().run_queue_config
        assert queue.max_user_code_failure_retries >= 3
        assert queue.user_code_failure_retry_delay >= 30


@pytest.mark.postgres
def test_runs_are_stored_in_postgres_when_configured(
    postgres_url: str,
    sqlite_url: str,
    tmp_path: Path,
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    bare_url = postgres_url.replace("postgresql+psycopg2://", "postgresql://")
    settings = Settings.from_env().changed(
        dagster_home=tmp_path / "home",
        dagster_postgres_url=bare_url,
        database_url=sqlite_url,
    )
    home = ensure_dagster_home(settings)
    # the file names the variable; the processes started from here get the URL with psycopg2's driver
    assert "postgres_url: {env: PIPELINE_DAGSTER_POSTGRES_URL}" in (home / "dagster.yaml").read_text()
    assert os.environ["PIPELINE_DAGSTER_POSTGRES_URL"].startswith("postgresql+psycopg2://")
    FakeOllama(httpserver)
    seed_postings(sqlite_url, tmp_path)
    defs = build_definitions(settings, llm=OllamaResource(host=httpserver.url_for("/").rstrip("/")))
    with DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        result = run_use_case(defs, instance, ["p-1", "p-2", "p-3"])
        assert result.success
        assert len(instance.get_runs()) == 1
        assert instance.get_materialized_partitions(
            result.get_asset_materialization_events()[0].asset_key
        ) == {"p-1", "p-2", "p-3"}
