"""The discovery sensor: batches of at most batch_size, a cursor, nothing when there is no work."""

from __future__ import annotations

import json
from pathlib import Path

from dagster import DagsterRunStatus, SensorResult, SkipReason, build_sensor_context
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PRIORITY_TAG,
)
from dagster._core.test_utils import create_run_for_test
from sqlalchemy import select

from appdb import claims, retry_policy
from appdb.database import session_scope
from assets.factory import WorkGroup, build_work_groups
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.store.tables import Posting
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.app_database import AppDatabase
from sensors.discovery_sensor import build_discovery_sensor
from sensors.liveness_sensor import build_liveness_sensor
from tests.support.postings import seed_postings

POSTINGS = [{"key": f"k-{i:02d}", "title": f"Job {i}", "description": f"Do task {i}."} for i in range(7)]


def _summary(batch_size: int = 3) -> WorkGroup:
    """The work group of the summary use case alone."""
    settings = Settings.from_env().changed(batch_size_override=batch_size)
    [group] = build_work_groups(build_use_cases(settings, [POSTING_SUMMARY]))
    return group


def _tick(summary: WorkGroup, url: str, instance, cursor: str | None = None):  # noqa: ANN001, ANN202
    context = build_sensor_context(
        instance=instance, cursor=cursor, resources={"app_db": AppDatabase(url=url)}
    )
    return build_discovery_sensor(summary)(context), context


def _running_run(instance, group: WorkGroup, first: str, last: str):  # noqa: ANN001, ANN202
    """A started run of the group's job over the partition range first..last."""
    return create_run_for_test(
        instance,
        job_name=group.job.name,
        status=DagsterRunStatus.STARTED,
        tags={ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last},
    )


def test_requests_batches_of_at_most_batch_size_in_partition_order(
    app_db_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(app_db_url, tmp_path, POSTINGS)
    summary = _summary()
    result, _ = _tick(summary, app_db_url, dagster_instance)
    assert isinstance(result, SensorResult)
    ranges = [
        (r.tags[ASSET_PARTITION_RANGE_START_TAG], r.tags[ASSET_PARTITION_RANGE_END_TAG])
        for r in result.run_requests
    ]
    assert ranges == [("k-00", "k-02"), ("k-03", "k-05"), ("k-06", "k-06")]
    assert {r.tags[PRIORITY_TAG] for r in result.run_requests} == {str(POSTING_SUMMARY.priority)}
    assert not result.dynamic_partitions_requests  # added by the tick itself, in bulk
    assert list(dagster_instance.get_dynamic_partitions("postings")) == [p["key"] for p in POSTINGS]
    assert json.loads(result.cursor)["pending"] == 7


def test_postings_in_queued_or_running_runs_are_not_requested_again(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS)
    summary = _summary()
    dagster_instance.add_dynamic_partitions("postings", [p["key"] for p in POSTINGS])
    _running_run(dagster_instance, summary, "k-00", "k-03")
    result, _ = _tick(summary, sqlite_url, dagster_instance)
    assert [
        (r.tags[ASSET_PARTITION_RANGE_START_TAG], r.tags[ASSET_PARTITION_RANGE_END_TAG])
        for r in result.run_requests
    ] == [("k-04", "k-06")]
    assert list(dagster_instance.get_dynamic_partitions("postings")) == [p["key"] for p in POSTINGS]


def test_no_work_means_no_run_requests_and_an_unchanged_database_skips_the_query(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[:2])
    summary = _summary()
    with session_scope(sqlite_url) as session:
        claims.claim_items(session, POSTING_SUMMARY.name, ["k-00", "k-01"], "run-x")
        for key in ("k-00", "k-01"):
            digest = session.scalar(select(Posting.content_hash).where(Posting.key == key))
            claims.complete_item(
                session,
                POSTING_SUMMARY.name,
                key,
                "run-x",
                {
                    "value": {"summary": "s"},
                    "model": POSTING_SUMMARY.model,
                    "backend": "b",
                    "use_case_version": POSTING_SUMMARY.version,
                    "input_hash": "h",
                    "subject_hash": digest,
                },
            )
    first, context = _tick(summary, sqlite_url, dagster_instance)
    assert isinstance(first, SkipReason) and "every posting has a current output" in first.skip_message
    cursor = context.cursor
    assert json.loads(cursor)["pending"] == 0
    second, _ = _tick(summary, sqlite_url, dagster_instance, cursor=cursor)
    assert "no change since the last tick" in second.skip_message

    seed_postings(sqlite_url, tmp_path, [{"key": "k-new", "title": "New", "description": "New work."}])
    third, _ = _tick(summary, sqlite_url, dagster_instance, cursor=cursor)
    assert [r.tags[ASSET_PARTITION_RANGE_START_TAG] for r in third.run_requests] == ["k-new"]


def test_the_liveness_sensor_fails_a_run_whose_claims_expired_and_discovery_requests_its_postings(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS)
    summary = _summary()
    dagster_instance.add_dynamic_partitions("postings", [p["key"] for p in POSTINGS])
    dead = _running_run(dagster_instance, summary, "k-00", "k-02")
    alive = _running_run(dagster_instance, summary, "k-03", "k-05")
    with session_scope(sqlite_url) as session:
        # the dead run's worker was killed: its lease ran out; the live one renews its own
        claims.claim_items(
            session,
            "posting_summary",
            ["k-00", "k-01", "k-02"],
            dead.run_id,
            policy=retry_policy.RetryPolicy(lease_seconds=-1),
        )
        claims.claim_items(session, "posting_summary", ["k-03", "k-04", "k-05"], alive.run_id)
    liveness = build_liveness_sensor([summary], heartbeat_seconds=10)
    skipped = liveness(
        build_sensor_context(instance=dagster_instance, resources={"app_db": AppDatabase(url=sqlite_url)})
    )
    assert "3 expired claims freed" in skipped.skip_message
    result, _ = _tick(summary, sqlite_url, dagster_instance)
    assert dagster_instance.get_run_by_id(dead.run_id).status == DagsterRunStatus.FAILURE
    assert dagster_instance.get_run_by_id(alive.run_id).status == DagsterRunStatus.STARTED
    assert [
        (r.tags[ASSET_PARTITION_RANGE_START_TAG], r.tags[ASSET_PARTITION_RANGE_END_TAG])
        for r in result.run_requests
    ] == [("k-00", "k-02"), ("k-06", "k-06")]


def test_runs_follow_dagsters_partition_order_when_partitions_were_added_out_of_key_order(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    """A run covers every partition between its first and last key in the order Dagster added them
    (say some were added from the UI first); new partitions come after the known ones."""
    seed_postings(sqlite_url, tmp_path, POSTINGS)
    summary = _summary()
    dagster_instance.add_dynamic_partitions("postings", ["k-06", "k-00", "k-03"])
    _running_run(dagster_instance, summary, "k-06", "k-00")
    result, _ = _tick(summary, sqlite_url, dagster_instance)

    order = list(dagster_instance.get_dynamic_partitions("postings"))
    assert order == ["k-06", "k-00", "k-03", "k-01", "k-02", "k-04", "k-05"]  # the new ones after
    covered = []
    for request in result.run_requests:
        first = order.index(request.tags[ASSET_PARTITION_RANGE_START_TAG])
        last = order.index(request.tags[ASSET_PARTITION_RANGE_END_TAG])
        assert last - first < 3  # at most batch_size partitions per run
        covered += order[first : last + 1]
    assert covered == ["k-03", "k-01", "k-02", "k-04", "k-05"]  # k-06 and k-00 are in the running run
    assert json.loads(result.cursor)["pending"] == 7
