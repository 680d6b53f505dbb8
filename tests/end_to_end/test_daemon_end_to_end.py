"""Continuous operation with the real `dagster dev`: the daemon's sensors find and process new
postings with nobody calling anything, a backfill launched through GraphQL runs in
batches, and lineage and materialization metadata can be read back through GraphQL.

The server (webserver + daemon + code server, see tests/live_pipeline.py) is shared by
this module and the browser test, and so are the first postings it processed (`enriched_postings`).
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import Interaction
from tests.support.live_pipeline import LivePipeline, make_postings, max_runs

pytestmark = pytest.mark.live_dagster

GROUP_JOB = "gemma3_270m_batch_job"
GROUP_SENSOR = "gemma3_270m_discovery"
ENTITIES_SENSOR = "skill_entities_discovery"
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"

LAUNCH_BACKFILL = """
mutation Backfill($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on UnauthorizedError { message }
  }
}
"""
BACKFILL_STATUS = """
query Backfill($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    ... on PartitionBackfill { status numPartitions error { message } }
  }
}
"""
LINEAGE = """
query Lineage($keys: [AssetKeyInput!]) {
  assetNodes(assetKeys: $keys) {
    assetKey { path }
    dependencyKeys { path }
    dependedByKeys { path }
  }
}
"""
MATERIALIZATION = """
query Materialization($key: AssetKeyInput!, $partition: String!) {
  assetOrError(assetKey: $key) {
    ... on Asset {
      assetMaterializations(partitions: [$partition], limit: 1) {
        partition
        runId
        metadataEntries {
          label
          ... on TextMetadataEntry { text }
          ... on IntMetadataEntry { intValue }
          ... on FloatMetadataEntry { floatValue }
          ... on MarkdownMetadataEntry { mdStr }
        }
      }
    }
  }
}
"""
POOL = """
{
  instance {
    concurrencyLimit(concurrencyKey: "llm") { limit activeSlotCount activeRunIds pendingStepCount }
  }
}
"""
SENSORS = """
{
  sensorsOrError(repositorySelector: {repositoryLocationName: "posting_enrichment",
                                      repositoryName: "__repository__"}) {
    ... on Sensors { results { name sensorState { status } } }
  }
}
"""


def _partitions_of(run: dict, order: list[str]) -> list[str]:
    start, end = order.index(run["tags"][RANGE_START]), order.index(run["tags"][RANGE_END])
    return order[start : end + 1]


def test_discovery_sensors_are_on_when_the_server_starts(live_pipeline: LivePipeline) -> None:
    states = {
        sensor["name"]: sensor["sensorState"]["status"]
        for sensor in live_pipeline.graphql(SENSORS)["sensorsOrError"]["results"]
    }
    assert states[GROUP_SENSOR] == "RUNNING"
    assert states[ENTITIES_SENSOR] == "RUNNING"
    assert states["skills_taxonomy_sensor"] == "RUNNING"


def test_runs_are_forked_from_a_process_that_loaded_the_code_location_once(
    live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    """The code server's runs come from its forkserver, which imported the code location before the
    first run (pipeline_defs/runtime/run_processes.py): a spawned run imported it again, ~2.5 CPU s a run."""
    processes = live_pipeline.processes()
    forked = {
        pid
        for pid, (_, command) in processes.items()
        if "multiprocessing.forkserver" in command and "pipeline_defs.definitions" in command
    }
    # a run going on now was forked without exec and shows the forkserver's command line too
    forkservers = {pid for pid in forked if processes[pid][0] not in forked}
    assert len(forkservers) == 1, processes  # started by the runs above, and kept
    assert all(processes[pid][0] in forkservers for pid in forked - forkservers), processes


def test_new_postings_are_processed_unaided_in_batches_pinned_to_the_host_and_filling_its_slots(
    live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    live, model_server = live_pipeline, live_pipeline.fake_ollama
    more = make_postings("flow-b", 2 * live.batch_size)
    more_keys = [row["key"] for row in more]
    model_server.hold()  # the runs that reach the model stay inside their calls for a moment
    try:
        live.ingest(more, "flow-b")
        live.wait_until(
            lambda: model_server.in_flight >= 2, 120, lambda: "the model server's slots stay idle"
        )
        held_runs = [
            run
            for run in live.runs()
            if run["jobName"] == GROUP_JOB and run["tags"].get(RANGE_START) in more_keys
        ]
        pool = live.graphql(POOL)["instance"]["concurrencyLimit"]
    finally:
        model_server.release()
    live.wait_until_enriched(more_keys)  # nothing but the running daemon makes this happen

    # both batches were requested at once, each pinned to the one host; the run queue's per-host
    # limit (not the `llm` pool, as wide as the queue on a model server) bounds them, and the
    # server gets several requests at once (its parallel slots, OLLAMA_NUM_PARALLEL, default 4)
    assert len(held_runs) == 2, [run["tags"] for run in held_runs]
    assert {run["tags"].get("pipeline/llm_host") for run in held_runs} == {model_server.url}
    assert pool["limit"] == 3 + 2, pool
    assert 2 <= model_server.max_in_flight <= 2 * 4

    outputs = live.outputs(enriched_postings + more_keys)
    assert outputs[("posting_summary", "flow-b-002")].value["summary"] == (
        "A company hires a Data Analyst flow-b 2 for the work described."
    )
    entities = outputs[("skill_entities", "flow-a-001")].value["entities"]
    assert [entity["mention"] for entity in entities] == ["Excel"]
    assert entities[0]["concept_uri"], entities  # Excel is in the demo taxonomy

    order = sorted(enriched_postings + more_keys)
    by_sensor = [
        run
        for run in live.runs()
        if run["jobName"] == GROUP_JOB
        and run["tags"].get("dagster/sensor_name") == GROUP_SENSOR
        and run["tags"][RANGE_START] in order
    ]
    assert all(run["status"] == "SUCCESS" for run in by_sensor), [run["status"] for run in by_sensor]
    batches = [_partitions_of(run, order) for run in by_sensor]
    # every posting went through a sensor-launched run of at most batch_size postings
    assert sorted(key for batch in batches for key in batch) == order
    assert max(len(batch) for batch in batches) <= live.batch_size


def test_backfill_through_graphql_runs_in_batches(
    live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    live, keys = live_pipeline, enriched_postings
    result = live.graphql(
        LAUNCH_BACKFILL,
        {
            "params": {
                "assetSelection": [{"path": ["posting_summary"]}],
                "partitionNames": keys,
                "runConfigData": {"ops": {"posting_summary": {"config": {"force": True}}}},
            }
        },
    )["launchPartitionBackfill"]
    assert result["__typename"] == "LaunchBackfillSuccess", result
    backfill_id = result["backfillId"]

    def status() -> dict:
        return live.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]

    live.wait_until(
        lambda: status()["status"] in ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED"),
        240,
        lambda: f"backfill {backfill_id} is {status()}",
    )
    assert status()["status"] in ("COMPLETED", "COMPLETED_SUCCESS"), status()
    runs = [run for run in live.runs() if run["tags"].get("dagster/backfill") == backfill_id]
    assert 1 <= len(runs) <= max_runs(len(keys), live.batch_size), [run["tags"] for run in runs]
    assert all(run["status"] == "SUCCESS" for run in runs)
    batches = [_partitions_of(run, keys) for run in runs]
    assert sorted(key for batch in batches for key in batch) == keys
    assert max(len(batch) for batch in batches) <= live.batch_size
    # force: true redid every summary, in those runs, recorded as backfill work
    outputs = live.outputs(keys)
    with session_scope(live.app_db_url) as session:
        redone = session.execute(
            select(Interaction.subject_key, Interaction.source).where(
                Interaction.id.in_([outputs[("posting_summary", key)].interaction_id for key in keys]),
                Interaction.run_id.in_([run["runId"] for run in runs]),
            )
        ).all()
    assert sorted(redone) == [(key, "backfill") for key in keys]


def test_lineage_and_metadata_through_graphql(
    live_pipeline: LivePipeline, enriched_postings: list[str]
) -> None:
    live, key = live_pipeline, enriched_postings[0]

    nodes = live.graphql(
        LINEAGE,
        {"keys": [{"path": [name]} for name in ("posting_summary", "posting_skills", "skill_entities")]},
    )["assetNodes"]
    lineage = {
        node["assetKey"]["path"][0]: (
            sorted(key["path"][0] for key in node["dependencyKeys"]),
            sorted(key["path"][0] for key in node["dependedByKeys"]),
        )
        for node in nodes
    }
    # downstream of every use case: the enriched postings table users build on (docs/outputs.md)
    assert lineage["posting_summary"] == (["postings"], ["enriched_postings"])
    assert lineage["posting_skills"] == (["postings"], ["enriched_postings", "skill_entities"])
    assert lineage["skill_entities"] == (
        ["posting_skills", "postings", "skills_taxonomy"],
        ["enriched_postings"],
    )

    variables = {"key": {"path": ["posting_summary"]}, "partition": key}
    materialization = live.graphql(MATERIALIZATION, variables)["assetOrError"]["assetMaterializations"][0]
    metadata = {
        entry["label"]: next(
            (entry[field] for field in ("text", "intValue", "floatValue", "mdStr") if field in entry), None
        )
        for entry in materialization["metadataEntries"]
    }
    assert metadata["model"] == "gemma3:270m"
    assert metadata["prompt_tokens"] == 412 and metadata["completion_tokens"] == 31
    assert "Data Analyst flow-a 1" in metadata["preview"]
