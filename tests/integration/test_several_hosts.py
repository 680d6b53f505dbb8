"""Several model servers: runs pinned per host, spread by slots; a dead host pauses only itself."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from dagster import SensorResult, build_sensor_context
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from pytest_httpserver import HTTPServer
from sqlalchemy import select

from appdb import pauses
from appdb.database import session_scope
from appdb.models import WorkItem
from assets.factory import build_work_groups
from benchmarks.ports import free_port
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_llm_resource, build_use_cases
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.app_database import AppDatabase
from resources.llm_hosts import LLM_HOST_TAG, parse_hosts
from sensors.discovery_sensor import build_discovery_sensor
from tests.support.fakes import FakeOllama
from tests.support.postings import seed_postings

DEAD = "http://127.0.0.1:9"
POSTINGS = [{"key": f"k-{i:02d}", "title": f"Job {i}", "description": f"Do task {i}."} for i in range(6)]


def _settings(url: str, hosts: str) -> Settings:
    return Settings.from_env().changed(
        database_url=url,
        llm_backend="ollama",
        llm_hosts=tuple(hosts.split(";")),
        batch_size_override=1,
    )


def _tick(settings: Settings, instance) -> list[str | None]:  # noqa: ANN001
    [group] = build_work_groups(build_use_cases(settings, [POSTING_SUMMARY]))
    sensor = build_discovery_sensor(group, hosts=settings.resolved_hosts())
    context = build_sensor_context(
        instance=instance, resources={"app_db": AppDatabase(url=settings.database_url)}
    )
    result = sensor(context)
    assert isinstance(result, SensorResult), result
    return [request.tags.get(LLM_HOST_TAG) for request in result.run_requests]


def _run_pinned(defs, instance, keys: list[str], host: str):  # noqa: ANN001, ANN202
    known = set(instance.get_dynamic_partitions("postings"))
    instance.add_dynamic_partitions("postings", [key for key in keys if key not in known])
    tags = {
        ASSET_PARTITION_RANGE_START_TAG: keys[0],
        ASSET_PARTITION_RANGE_END_TAG: keys[-1],
        "pipeline/source": "test",
        LLM_HOST_TAG: host,
    }
    job = defs.resolve_job_def("posting_summary_job")
    return job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)


def test_runs_are_spread_over_the_hosts_by_slots_and_skip_hosts_without_the_model(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS)
    settings = _settings(
        sqlite_url, "http://a:1 parallel=4;http://b:1 parallel=2;http://c:1 parallel=8 models=qwen3:8b"
    )
    pinned = _tick(settings, dagster_instance)
    assert sorted(pinned) == ["http://a:1"] * 4 + ["http://b:1"] * 2  # by slots; c lacks gemma3:270m


def test_work_smaller_than_a_batch_is_cut_so_that_every_host_gets_a_run(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    """90 postings fit one 250-posting run: with three hosts that ran on one while two idled."""
    seed_postings(sqlite_url, tmp_path, [{**POSTINGS[0], "key": f"s-{i:03d}"} for i in range(90)])
    three = replace(_settings(sqlite_url, "http://a:1;http://b:1;http://c:1"), batch_size_override=None)
    assert sorted(_tick(three, dagster_instance)) == ["http://a:1", "http://b:1", "http://c:1"]

    one = replace(_settings(sqlite_url, "http://a:1"), batch_size_override=None)
    with session_scope(sqlite_url) as session:  # a fresh cursor and no runs queued: the same work again
        assert session.scalars(select(WorkItem)).all() == []
    assert _tick(one, dagster_instance) == ["http://a:1"]  # one host: one run of 90


def test_a_dead_host_pauses_itself_only_its_claims_return_unspent_and_the_others_take_its_postings(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    fake = FakeOllama(httpserver)
    alive = httpserver.url_for("/").rstrip("/")
    seed_postings(sqlite_url, tmp_path, POSTINGS[:3])
    settings = _settings(sqlite_url, f"{alive} parallel=2;{DEAD} parallel=2")
    defs = build_definitions(settings, use_cases=[POSTING_SUMMARY], llm=build_llm_resource(settings))
    keys = [row["key"] for row in POSTINGS[:3]]

    failed = _run_pinned(defs, dagster_instance, keys, DEAD)
    assert not failed.success and not fake.requests  # the dead host's run never reached the live one
    with session_scope(sqlite_url) as session:
        items = session.scalars(select(WorkItem)).all()
        paused = pauses.active_pauses(session)
    assert [(item.status, item.attempts) for item in items] == [("pending", 0)] * 3
    assert list(paused) == [parse_hosts([DEAD])[0].pause_key]  # the host, not posting_summary

    assert _tick(settings, dagster_instance) == [alive] * 3  # its postings go to the live host
    done = _run_pinned(defs, dagster_instance, keys, alive)
    assert done.success and len(fake.generations) == 3
    with session_scope(sqlite_url) as session:
        items = session.scalars(select(WorkItem)).all()
    assert [(item.status, item.attempts) for item in items] == [("done", 0)] * 3


def test_a_run_waits_ready_for_a_turn_at_its_host_and_sends_as_soon_as_one_frees(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path
) -> None:
    """Runs started ahead wait for a turn (the host pool), so steps follow each other with no idle gap."""
    from dagster._core.test_utils import instance_for_test

    with instance_for_test() as instance:  # SQLite storage: it enforces pools (the in-memory one does not)
        _wait_for_a_turn(httpserver, sqlite_url, tmp_path, instance)


def _wait_for_a_turn(httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance) -> None:  # noqa: ANN001
    import threading
    import time

    from assets.host_turns import HOST_TURNS, host_pool

    fake = FakeOllama(httpserver)
    alive = httpserver.url_for("/").rstrip("/")
    seed_postings(sqlite_url, tmp_path, POSTINGS[:2])
    settings = _settings(sqlite_url, f"{alive} parallel=2;{DEAD} parallel=2")
    defs = build_definitions(settings, use_cases=[POSTING_SUMMARY], llm=build_llm_resource(settings))
    storage = dagster_instance.event_log_storage
    storage.set_concurrency_slots(host_pool(alive), HOST_TURNS)
    for other in range(HOST_TURNS):  # every turn taken by other runs' steps
        assert storage.claim_concurrency_slot(
            host_pool(alive), f"other-{other}", "posting_summary"
        ).is_claimed
    outcome = {}
    worker = threading.Thread(
        target=lambda: outcome.update(result=_run_pinned(defs, dagster_instance, ["k-00", "k-01"], alive))
    )
    worker.start()
    deadline = time.monotonic() + 180
    while storage.get_concurrency_info(host_pool(alive)).pending_step_count < 1:  # waiting for a turn
        assert time.monotonic() < deadline and worker.is_alive(), "the run never waited for a turn"
        time.sleep(0.2)
    time.sleep(0.5)
    assert not fake.requests and worker.is_alive()  # started, batch claimed, not sending
    storage.free_concurrency_slot_for_step("other-0", "posting_summary")
    worker.join(timeout=300)
    assert outcome["result"].success and len(fake.generations) == 2
    assert storage.get_concurrency_info(host_pool(alive)).active_slot_count == HOST_TURNS - 1  # its turn back


def test_pipeline_run_with_dead_hosts_finishes_every_posting_on_the_live_one(
    httpserver: HTTPServer,
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 64, item 4: `pipeline run` stopped at the first run pinned to a dead host (exit 1, the
    postings left pending). Now each dead host pauses itself only, the group is planned again on the
    hosts left, and the live one does every posting: exit 0, no attempt spent on the dead ones."""
    fake = FakeOllama(httpserver)
    alive = httpserver.url_for("/").rstrip("/")
    dead = [DEAD, f"http://127.0.0.1:{free_port()}"]  # refused: nothing listens on either
    postings = [{**POSTINGS[0], "key": f"d-{i:02d}", "title": f"Job {i}"} for i in range(12)]
    seed_postings(sqlite_url, tmp_path, postings)
    for name, value in {
        "PIPELINE_DATA_DIR": str(tmp_path / "data"),
        "PIPELINE_DATABASE_URL": sqlite_url,
        "PIPELINE_LLM_HOSTS": f"{dead[0]} parallel=2; {dead[1]} parallel=2; {alive} parallel=2",
        "PIPELINE_BATCH_SIZE": "2",
        "PIPELINE_EMBEDDING_BACKEND": "none",
    }.items():
        monkeypatch.setenv(name, value)

    code = main(["run", "--use-case", "posting_summary", "--progress", "never"])
    printed = capsys.readouterr()
    assert code == 0, printed
    assert "posting_summary: 12 postings done\n" in printed.out
    assert len(fake.generations) == 12
    with session_scope(sqlite_url) as session:
        items = session.scalars(select(WorkItem)).all()
        paused = pauses.active_pauses(session)
    assert sorted((item.status, item.attempts) for item in items) == [("done", 0)] * 12
    assert sorted(paused) == sorted(parse_hosts(dead)[n].pause_key for n in range(2))
    for host in dead:
        assert f"warning: posting_summary: host {host} is unavailable, paused until " in printed.err
