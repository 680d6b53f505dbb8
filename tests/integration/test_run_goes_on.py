"""A sensor's run goes on claiming its use case's pending postings after its own batch (fewer run
starts), and the sensor then starts no more runs than may work at once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from dagster import DagsterRunStatus, SensorResult, SkipReason, build_sensor_context
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from dagster._core.test_utils import create_run_for_test
from pytest_httpserver import HTTPServer
from sqlalchemy import func, select

from appdb import claims
from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput, WorkItem
from assets.factory import build_work_groups
from assets.run_tags import CONTINUE_TAG
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_llm_resource, build_use_cases
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.app_database import AppDatabase
from sensors.discovery_sensor import build_discovery_sensor
from tests.support.fakes import FakeOllama
from tests.support.postings import seed_postings

POSTINGS = [{"key": f"k-{i:02d}", "title": f"Job {i}", "description": f"Do task {i}."} for i in range(6)]
KEYS = [row["key"] for row in POSTINGS]
TAGLINE = replace(POSTING_SUMMARY, name="posting_tagline")  # a second use case of the same model


def _settings(url: str, host: str) -> Settings:
    return Settings.from_env().changed(
        database_url=url, llm_backend="ollama", llm_hosts=(host,), batch_size_override=2
    )


def _run(defs, instance, first: str, last: str, going_on: bool):  # noqa: ANN001, ANN202
    tags = {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
    if going_on:
        tags[CONTINUE_TAG] = "120"
    job = defs.resolve_job_def("posting_summary_job")
    return job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)


def _done_by_run(url: str) -> dict[str, str]:
    with session_scope(url) as session:
        return dict(session.execute(select(UseCaseOutput.subject_key, UseCaseOutput.run_id)).all())


def test_a_run_going_on_does_every_pending_known_posting_once_and_leaves_held_and_unknown_ones(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    FakeOllama(httpserver)
    seed_postings(sqlite_url, tmp_path, POSTINGS)
    settings = _settings(sqlite_url, httpserver.url_for("/").rstrip("/"))
    defs = build_definitions(settings, use_cases=[POSTING_SUMMARY], llm=build_llm_resource(settings))
    dagster_instance.add_dynamic_partitions("postings", KEYS[:5])  # k-05: not a partition yet
    with session_scope(sqlite_url) as session:  # k-04: held by another run
        assert claims.claim_items(session, "posting_summary", ["k-04"], "other-run") == ["k-04"]

    plain = _run(defs, dagster_instance, "k-00", "k-01", going_on=False)
    assert plain.success and set(_done_by_run(sqlite_url)) == {"k-00", "k-01"}  # its batch only

    going_on = _run(defs, dagster_instance, "k-02", "k-02", going_on=True)
    assert going_on.success
    done = _done_by_run(sqlite_url)
    assert set(done) == {"k-00", "k-01", "k-02", "k-03"}  # k-03 beyond its range; not k-04, k-05
    assert done["k-03"] == going_on.run_id
    materialized = {
        event.event_specific_data.materialization.partition
        for event in going_on.get_asset_materialization_events()
    }
    assert materialized == {"k-02", "k-03"}  # Dagster hears of each, in this run
    with session_scope(sqlite_url) as session:
        calls = dict(
            session.execute(
                select(Interaction.subject_key, func.count()).group_by(Interaction.subject_key)
            ).all()
        )
        held = session.scalars(select(WorkItem.claimed_by).where(WorkItem.subject_key == "k-04")).one()
    assert calls == dict.fromkeys(["k-00", "k-01", "k-02", "k-03"], 1)  # each generated once
    assert held == "other-run"


def test_a_run_going_on_whose_next_postings_another_run_claimed_first_claims_the_ones_after(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs going on draw on one backlog, oldest first, so two that finish a batch together race for the
    same postings. The one that loses looks again and takes the next ones: it had ended, and the
    sensor started a new run (a process loading the code location) for the work that waited."""
    from assets import batch_run

    postings = [{"key": f"k-{i:02d}", "title": f"Job {i}", "description": f"Do task {i}."} for i in range(8)]
    keys = [row["key"] for row in postings]
    FakeOllama(httpserver)
    seed_postings(sqlite_url, tmp_path, postings)
    settings = _settings(sqlite_url, httpserver.url_for("/").rstrip("/"))
    defs = build_definitions(settings, use_cases=[POSTING_SUMMARY], llm=build_llm_resource(settings))
    dagster_instance.add_dynamic_partitions("postings", keys)
    real_claim = batch_run.claims.claim_items
    raced: list[list[str]] = []

    def another_run_claims_them_first(session, use_case, candidates, run_id, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if not raced and candidates and candidates[0] != "k-00":  # the run's first look beyond its batch
            raced.append(list(candidates))
            real_claim(session, use_case, list(candidates), "other-run")
        return real_claim(session, use_case, candidates, run_id, **kwargs)

    monkeypatch.setattr(batch_run.claims, "claim_items", another_run_claims_them_first)
    going_on = _run(defs, dagster_instance, "k-00", "k-01", going_on=True)

    assert going_on.success
    assert raced == [["k-02", "k-03"]]  # its next batch (two postings) went to the other run
    done = _done_by_run(sqlite_url)
    assert set(done) == set(keys) - {"k-02", "k-03"}  # it went on with the rest, once each
    assert set(done.values()) == {going_on.run_id}


def test_with_runs_going_on_the_sensor_starts_no_more_than_may_work_at_once(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS)
    settings = Settings.from_env().changed(batch_size_override=1)
    [group] = build_work_groups(build_use_cases(settings, [POSTING_SUMMARY]))
    sensor = build_discovery_sensor(group, continue_seconds=300, runs_per_host=2)

    def tick() -> SensorResult:
        context = build_sensor_context(
            instance=dagster_instance, resources={"app_db": AppDatabase(url=sqlite_url)}
        )
        result = sensor(context)
        assert isinstance(result, SensorResult)
        return result

    first = tick()  # six postings, batches of one: two runs (the embedded model counts as one host)
    assert len(first.run_requests) == 2
    assert {request.tags[CONTINUE_TAG] for request in first.run_requests} == {"300"}
    dagster_instance.add_dynamic_partitions("postings", KEYS)
    create_run_for_test(
        dagster_instance,
        job_name=group.job.name,
        status=DagsterRunStatus.STARTED,
        tags={ASSET_PARTITION_RANGE_START_TAG: "k-00", ASSET_PARTITION_RANGE_END_TAG: "k-00"},
    )
    assert len(tick().run_requests) == 1  # one run going: room for one more


def test_a_script_use_case_gets_as_many_runs_at_once_as_script_runs_says(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    """The CPU tagger's runs share the machine's cores, not a server: PIPELINE_SCRIPT_RUNS of them at
    once (one was the most before, so one core tagged while a faster server waited)."""
    from plugins.postings.use_cases.posting_skills import POSTING_SKILLS

    seed_postings(sqlite_url, tmp_path, POSTINGS)
    settings = Settings.from_env().changed(batch_size_override=1, script_runs=3)
    [group] = build_work_groups(build_use_cases(settings, [POSTING_SKILLS]))
    assert group.model is None  # the tagger's chain calls no model
    sensor = build_discovery_sensor(group, continue_seconds=300, script_runs=settings.script_runs)

    def requested() -> int:
        context = build_sensor_context(
            instance=dagster_instance, resources={"app_db": AppDatabase(url=sqlite_url)}
        )
        result = sensor(context)
        return len(result.run_requests) if isinstance(result, SensorResult) else 0

    assert requested() == 3  # six postings, batches of one: three runs, not one
    dagster_instance.add_dynamic_partitions("postings", KEYS)
    for key in KEYS[:2]:
        create_run_for_test(
            dagster_instance,
            job_name=group.job.name,
            status=DagsterRunStatus.STARTED,
            tags={ASSET_PARTITION_RANGE_START_TAG: key, ASSET_PARTITION_RANGE_END_TAG: key},
        )
    assert requested() == 1  # two going: room for one more


def test_with_no_room_for_a_run_a_tick_reads_no_pending_work_until_a_posting_arrives(
    sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 100,000 pending postings, planning (every pending posting and its partition) took most of the
    code server's CPU on ticks that could start no run. Those ticks now only count the runs going; a
    posting that arrives meanwhile still becomes a partition at the next tick."""
    from appdb import discovery
    from plugins.postings.use_cases.posting_skills import POSTING_SKILLS

    seed_postings(sqlite_url, tmp_path, POSTINGS)
    settings = Settings.from_env().changed(batch_size_override=1, script_runs=1)
    [group] = build_work_groups(build_use_cases(settings, [POSTING_SKILLS]))
    sensor = build_discovery_sensor(group, continue_seconds=300, script_runs=1)
    planned: list[int] = []
    real_find = discovery.find_pending_work

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        planned.append(1)
        return real_find(*args, **kwargs)

    monkeypatch.setattr(discovery, "find_pending_work", counted)
    cursor: list[str | None] = [None]

    def tick():  # noqa: ANN202 - as the daemon ticks: each with the cursor the last one left
        context = build_sensor_context(
            instance=dagster_instance, resources={"app_db": AppDatabase(url=sqlite_url)}, cursor=cursor[0]
        )
        result = sensor(context)
        cursor[0] = result.cursor if isinstance(result, SensorResult) else context.cursor
        return result

    assert len(tick().run_requests) == 1
    assert sorted(dagster_instance.get_dynamic_partitions("postings")) == KEYS
    create_run_for_test(
        dagster_instance,
        job_name=group.job.name,
        status=DagsterRunStatus.STARTED,
        tags={ASSET_PARTITION_RANGE_START_TAG: "k-00", ASSET_PARTITION_RANGE_END_TAG: "k-00"},
    )
    planned.clear()
    skipped = tick()
    assert isinstance(skipped, SkipReason) and "1 runs going (at most 1 at once)" in skipped.skip_message
    assert planned == []  # no pending work read: the run going takes it

    seed_postings(sqlite_url, tmp_path, [{"key": "k-06", "title": "Job 6", "description": "Do task 6."}])
    arrived = tick()
    assert planned  # a posting arrived: planned again
    assert "k-06" in dagster_instance.get_dynamic_partitions("postings")
    assert not getattr(arrived, "run_requests", None)  # still no room for a run


def test_a_run_of_two_use_cases_goes_on_with_each_for_its_share_instead_of_a_run_per_batch(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    """A model's group of two use cases (the summary and skills by the model) got a run per batch:
    40 run starts for 10,000 postings. Now each step goes on for its share (PIPELINE_RUN_STEP_CONTINUE_
    SECONDS) and the sensor starts no more runs than may work at once."""
    FakeOllama(httpserver)
    seed_postings(sqlite_url, tmp_path, POSTINGS)
    settings = _settings(sqlite_url, httpserver.url_for("/").rstrip("/"))
    use_cases = [POSTING_SUMMARY, TAGLINE]
    defs = build_definitions(settings, use_cases=use_cases, llm=build_llm_resource(settings))
    [group] = build_work_groups(build_use_cases(settings, use_cases))
    sensor = build_discovery_sensor(group, continue_seconds=600, step_continue_seconds=60)
    context = build_sensor_context(
        instance=dagster_instance, resources={"app_db": AppDatabase(url=sqlite_url)}
    )
    result = sensor(context)
    assert isinstance(result, SensorResult)
    [request] = result.run_requests  # six postings in batches of two: one run, not three
    assert request.tags[CONTINUE_TAG] == "60"

    run = defs.resolve_job_def(group.job.name).execute_in_process(
        instance=dagster_instance, tags=request.tags, raise_on_error=False
    )
    assert run.success
    with session_scope(sqlite_url) as session:
        made = session.execute(
            select(UseCaseOutput.use_case, UseCaseOutput.subject_key, UseCaseOutput.run_id)
        )
        by_use_case: dict[str, dict[str, str]] = {}
        for use_case, key, run_id in made:
            by_use_case.setdefault(use_case, {})[key] = run_id
    for name in ("posting_summary", "posting_tagline"):  # every posting, in this one run
        assert by_use_case[name] == dict.fromkeys(KEYS, run.run_id)
