"""The pooled event log storages: what a run writes is what Dagster (and the UI) reads back."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from dagster import AssetKey, AssetMaterialization, DagsterEventType, DagsterInstance
from dagster._core.events import DagsterEvent, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.test_utils import create_run_for_test
from pytest_httpserver import HTTPServer
from sqlalchemy.engine import make_url

from assets.event_batches import asset_events_in_batches
from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.runtime.dagster_storage import OPEN_RUN_SHARDS
from pipeline_defs.settings import Settings
from resources.ollama_backend import OllamaResource
from tests.support.fakes import FakeOllama
from tests.support.postings import run_use_case, seed_postings

KEYS = ["p-1", "p-2", "p-3"]
SUMMARY = AssetKey("posting_summary")


def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **overrides) -> Path:  # noqa: ANN003
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_storage="pooled")
    return ensure_dagster_home(replace(settings, **overrides))


def _batch_run_is_read_back_by_another_instance(
    home: Path, app_db_url: str, tmp_path: Path, httpserver: HTTPServer
) -> None:
    FakeOllama(httpserver)
    seed_postings(app_db_url, tmp_path)
    settings = Settings.from_env().changed(database_url=app_db_url)
    defs = build_definitions(settings, llm=OllamaResource(host=httpserver.url_for("/").rstrip("/")))
    with DagsterInstance.from_config(str(home)) as writer, DagsterInstance.from_config(str(home)) as reader:
        result = run_use_case(defs, writer, KEYS)
        assert result.success
        # another process (the webserver, say) sees every partition while the writer is still open
        assert reader.get_materialized_partitions(SUMMARY) == set(KEYS)
        [record] = reader.get_run_records()
        assert record.dagster_run.is_success
    with DagsterInstance.from_config(str(home)) as later:
        events = later.all_logs(result.run_id)
        materialized = [e for e in events if e.dagster_event and e.dagster_event.is_step_materialization]
        assert sorted(e.dagster_event.partition for e in materialized) == KEYS
        # the planned materializations (written as one batch when the run was created) are there per
        # partition, each followed by its materialization: what the UI uses to mark partitions failed
        planned = later.get_records_for_run(
            result.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED
        ).records
        assert sorted(record.partition_key for record in planned) == KEYS
        storage = later.event_log_storage
        assert (
            storage.get_latest_asset_partition_materialization_attempts_without_materializations(SUMMARY)
            == {}
        )


def test_sqlite_home_pools_event_log_connections_and_reads_back_a_batch_run(
    sqlite_url: str, tmp_path: Path, httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path, monkeypatch, dagster_postgres_url=None)
    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.event_log_storage).__name__ == "PooledSqliteEventLogStorage"
        assert type(instance.run_storage).__name__ == "PooledSqliteRunStorage"
        assert type(instance.schedule_storage).__name__ == "PooledSqliteScheduleStorage"
    # Dagster's own SQLite layout inside DAGSTER_HOME, so existing homes and tools still find it
    assert (home / "history" / "runs.db").exists() and (home / "history" / "runs" / "index.db").exists()
    _batch_run_is_read_back_by_another_instance(home, sqlite_url, tmp_path, httpserver)


def test_sqlite_event_log_keeps_every_run_when_old_run_shards_are_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _home(tmp_path, monkeypatch, dagster_postgres_url=None)
    runs = OPEN_RUN_SHARDS + 2
    with DagsterInstance.from_config(str(home)) as instance:
        created = [create_run_for_test(instance, job_name="some_job") for _ in range(runs)]
        for index, run in enumerate(created):
            instance.report_engine_event(f"event of run {index}", run)
        for index, run in enumerate(created):  # read back while writing continues elsewhere
            assert f"event of run {index}" in [e.message for e in instance.all_logs(run.run_id)]
    with DagsterInstance.from_config(str(home)) as reopened:
        for index, run in enumerate(created):
            assert f"event of run {index}" in [e.message for e in reopened.all_logs(run.run_id)]


@pytest.mark.postgres
def test_postgres_home_pools_event_log_connections_and_reads_back_a_batch_run(
    postgres_url: str,
    sqlite_url: str,
    tmp_path: Path,
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = _home(tmp_path, monkeypatch, dagster_postgres_url=postgres_url)
    with DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.event_log_storage).__name__ == "PooledPostgresEventLogStorage"
        assert type(instance.run_storage).__name__ == "PooledPostgresRunStorage"
        assert type(instance.schedule_storage).__name__ == "PooledPostgresScheduleStorage"
    _batch_run_is_read_back_by_another_instance(home, sqlite_url, tmp_path, httpserver)


def test_event_log_asks_the_database_for_a_table_until_it_has_seen_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dagster checks for the tags table before every asset event's tags; once seen it is remembered,
    and a table that is missing is looked for again (`dagster instance migrate` may add it)."""
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    home = _home(tmp_path, monkeypatch, dagster_postgres_url=None)
    asked: list[str] = []
    original = SqliteEventLogStorage.has_table

    def counting(storage, table_name: str) -> bool:  # noqa: ANN001
        asked.append(table_name)
        return original(storage, table_name)

    monkeypatch.setattr(SqliteEventLogStorage, "has_table", counting)
    with DagsterInstance.from_config(str(home)) as instance:
        storage = instance.event_log_storage
        assert storage.has_table("asset_event_tags") and storage.has_table("asset_event_tags")
        assert not storage.has_table("no_such_table") and not storage.has_table("no_such_table")
    assert asked == ["asset_event_tags", "no_such_table", "no_such_table"]


@pytest.mark.parametrize(
    "dagster_storage", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_run_after_the_first_reflects_no_table_of_dagster_storage(
    dagster_storage: str,
    request: pytest.FixtureRequest,
    sqlite_url: str,
    tmp_path: Path,
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dagster asks which optional columns its tables have (the runs table's run stats and backfill
    id, the asset keys table's index columns) several times per run, each a schema query on
    PostgreSQL. Columns only ever appear, so once seen the storages answer from memory."""
    from sqlalchemy.engine.reflection import Inspector

    postgres = request.getfixturevalue("postgres_url") if dagster_storage == "postgresql" else None
    home = _home(tmp_path, monkeypatch, dagster_postgres_url=postgres)
    FakeOllama(httpserver)
    seed_postings(sqlite_url, tmp_path)
    settings = Settings.from_env().changed(database_url=sqlite_url)
    defs = build_definitions(settings, llm=OllamaResource(host=httpserver.url_for("/").rstrip("/")))
    reflected: list[str] = []
    original = Inspector.get_columns

    def counting(inspector, table_name: str, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        reflected.append(table_name)
        return original(inspector, table_name, *args, **kwargs)

    monkeypatch.setattr(Inspector, "get_columns", counting)
    with DagsterInstance.from_config(str(home)) as instance:
        assert run_use_case(defs, instance, KEYS[:2]).success
        assert reflected  # the first run asks
        reflected.clear()
        assert run_use_case(defs, instance, KEYS[2:]).success
        assert reflected == []
        assert instance.get_materialized_partitions(SUMMARY) == set(KEYS)


@pytest.mark.postgres
def test_opening_an_instance_again_lists_no_tables_and_a_fresh_database_still_gets_them(
    postgres_database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """The code server opens an instance for every sensor tick; each of the three PostgreSQL storages
    listed the database's tables on a new connection every time. Now once per database and process;
    a database this process has not seen yet is still looked at, and given its tables."""
    from sqlalchemy.engine.reflection import Inspector

    listed: list[str] = []
    original = Inspector.get_table_names

    def counting(inspector, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        listed.append(inspector.bind.engine.url.database)
        return original(inspector, *args, **kwargs)

    monkeypatch.setattr(Inspector, "get_table_names", counting)
    first, second = postgres_database(), postgres_database()
    home = _home(tmp_path / "a", monkeypatch, dagster_postgres_url=first)
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == []
    assert listed  # the first time: each storage looks (and makes its tables)
    listed.clear()
    for _ in range(3):
        with DagsterInstance.from_config(str(home)) as instance:
            create_run_for_test(instance, job_name="tick")
    assert listed == []
    # a fresh database in the same process: looked at, and its tables made
    other = _home(tmp_path / "b", monkeypatch, dagster_postgres_url=second)
    with DagsterInstance.from_config(str(other)) as instance:
        run = create_run_for_test(instance, job_name="elsewhere")
        assert instance.get_run_by_id(run.run_id) is not None
    assert listed and set(listed) == {make_url(second).database}


def _materialization(run_id: str, partition: str, tags: dict[str, str] | None = None) -> EventLogEntry:
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        job_name="posting_summary_batch_job",
        step_key="posting_summary",
        event_specific_data=StepMaterializationData(
            AssetMaterialization("posting_summary", partition=partition, tags=tags)
        ),
    )
    return EventLogEntry(
        error_info=None,
        level=10,
        user_message="",
        run_id=run_id,
        timestamp=time.time(),
        step_key="posting_summary",
        job_name="posting_summary_batch_job",
        dagster_event=event,
    )


def _log_line(run_id: str, text: str) -> EventLogEntry:
    return EventLogEntry(
        error_info=None, level=20, user_message=text, run_id=run_id, timestamp=time.time(), job_name="j"
    )


@pytest.mark.parametrize(
    "dagster_storage", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_held_materializations_are_written_together_in_order_and_none_is_lost(
    dagster_storage: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's materializations wait while it yields a group (assets/event_batches.py) and go in one
    write; anything else Dagster logs meanwhile is written after them, so the log keeps its order."""
    postgres = request.getfixturevalue("postgres_url") if dagster_storage == "postgresql" else None
    home = _home(tmp_path, monkeypatch, dagster_postgres_url=postgres)
    with DagsterInstance.from_config(str(home)) as instance:
        run = create_run_for_test(instance, job_name="posting_summary_batch_job")
        storage = instance.event_log_storage
        batches: list[int] = []
        write_batch = storage.store_event_batch
        monkeypatch.setattr(
            storage, "store_event_batch", lambda events: batches.append(len(events)) or write_batch(events)
        )
        with asset_events_in_batches(instance) as flush:
            for key in KEYS:
                instance.handle_new_event(_materialization(run.run_id, key))
            assert instance.get_materialized_partitions(SUMMARY) == set()  # held
            flush()
            assert instance.get_materialized_partitions(SUMMARY) == set(KEYS)
            instance.handle_new_event(_materialization(run.run_id, "p-4"))
            instance.handle_new_event(_log_line(run.run_id, "a line after p-4"))  # p-4 goes first
            instance.handle_new_event(_materialization(run.run_id, "p-5"))
        # closing the block writes what still waits
        assert instance.get_materialized_partitions(SUMMARY) == {*KEYS, "p-4", "p-5"}
        assert batches == [3, 1, 1]
        logged = [
            entry.dagster_event.partition if entry.is_dagster_event else entry.user_message
            for entry in instance.all_logs(run.run_id)
        ]
        assert logged == [*KEYS, "p-4", "a line after p-4", "p-5"]
        # once the block is closed nothing waits
        instance.handle_new_event(_materialization(run.run_id, "p-6"))
        assert "p-6" in instance.get_materialized_partitions(SUMMARY)
        assert batches == [3, 1, 1]


@pytest.mark.parametrize(
    "dagster_storage", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_each_event_of_a_batch_keeps_its_own_id_and_data_version(
    dagster_storage: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's rows go to the database as an executemany; the ids it returns name the events in the
    order given, or a partition's data version (what staleness reads) would be another's."""
    from dagster._core.definitions.data_version import DATA_VERSION_TAG

    postgres = request.getfixturevalue("postgres_url") if dagster_storage == "postgresql" else None
    home = _home(tmp_path, monkeypatch, dagster_postgres_url=postgres)
    keys = [f"b-{index:03d}" for index in range(120)]
    with DagsterInstance.from_config(str(home)) as instance:
        run = create_run_for_test(instance, job_name="posting_summary_batch_job")
        instance.event_log_storage.store_event_batch(
            [_materialization(run.run_id, key, {DATA_VERSION_TAG: f"version of {key}"}) for key in keys]
        )
        storage = instance.event_log_storage
        versions = storage.get_latest_tags_by_partition(
            SUMMARY, DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG], keys
        )
        assert versions == {key: {DATA_VERSION_TAG: f"version of {key}"} for key in keys}
        ids = instance.get_latest_storage_id_by_partition(SUMMARY, DagsterEventType.ASSET_MATERIALIZATION)
        records = {record.storage_id: record for record in instance.get_records_for_run(run.run_id).records}
        assert all(records[ids[key]].partition_key == key for key in keys)
