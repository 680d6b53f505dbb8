"""Keeps the skills taxonomy loaded: a run of `skills_taxonomy` when none is loaded or the file changed.

The taxonomy is a reference input of `skill_entities` (see `appdb.discovery.pending_work_query`):
loading a changed file makes the resolved skills stale, and their sensor picks them up.

One load per version of the file: each request carries the file's fingerprint (tag
`pipeline/taxonomy_version`, and in its `run_key`), and the sensor asks for nothing while a load runs or
once a load of that version succeeded, so a slow first load (ESCO's label vectors) no longer piles up a
run a minute. A failed load (a bad file, a process killed mid-load) is tried again at the next tick,
then a minute later, at most `LOAD_ATTEMPTS` times per version; then it waits for the file to change,
`pipeline run`, or a launch from the UI. Without the retries a daemon killed while loading left the taxonomy
unloaded, and skill resolution waiting, for good.
"""

import hashlib
import json
import time

from dagster import (
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    in_process_executor,
    sensor,
)

from appdb import heartbeats
from assets.run_tags import REASON_TAG
from plugins.postings.store.taxonomy import loaded_taxonomy_hash
from plugins.postings.taxonomy_resource import TaxonomyResource
from resources.app_database import AppDatabase
from resources.run_heartbeat import dead_after_seconds
from sensors.run_liveness import SILENT_GRACE_SECONDS, fail_run

TAXONOMY_ASSET = "skills_taxonomy"

skills_taxonomy_job = define_asset_job(
    "skills_taxonomy_job",
    selection=[AssetKey(TAXONOMY_ASSET)],
    description="Load the configured skills taxonomy into the app database (a no-op when unchanged).",
    executor_def=in_process_executor,  # one step: no second process loading the code location for it
)


@sensor(
    name="skills_taxonomy_sensor",
    job=skills_taxonomy_job,
    minimum_interval_seconds=60,
    default_status=DefaultSensorStatus.RUNNING,
    description="Loads the skills taxonomy when none is loaded yet or the configured file changed.",
)
def skills_taxonomy_sensor(
    context: SensorEvaluationContext, app_db: AppDatabase, taxonomy: TaxonomyResource
) -> SensorResult | SkipReason:
    path = taxonomy.taxonomy_path()
    if not path.is_file():
        return SkipReason(f"taxonomy file {path} does not exist; set PIPELINE_TAXONOMY_PATH")
    stat = path.stat()
    fingerprint = json.dumps([str(path), stat.st_size, stat.st_mtime_ns])
    with app_db.session() as session:
        loaded = loaded_taxonomy_hash(session) is not None
    if loaded and context.cursor == fingerprint:
        return SkipReason(f"taxonomy {path} unchanged and loaded")
    running = context.instance.get_runs(
        RunsFilter(job_name=skills_taxonomy_job.name, statuses=IN_PROGRESS), limit=1
    )
    if running and not _load_died(context.instance, app_db, running[0].run_id):
        return SkipReason(
            f"a load of the taxonomy is under way (run {running[0].run_id[:8]}); waiting for it"
        )
    if running:  # its process died (a host loss): Dagster's default launcher never sees it, so say so
        fail_run(context.instance, running[0].run_id, "the taxonomy load's process died (no heartbeat)")
    version = taxonomy_run_key(fingerprint)
    earlier = context.instance.get_run_records(
        RunsFilter(tags={TAXONOMY_VERSION_TAG: version}), limit=LOAD_ATTEMPTS + 1
    )
    done = [record for record in earlier if record.dagster_run.status == DagsterRunStatus.SUCCESS]
    if done:
        return SensorResult(
            skip_reason=f"this version of {path} was loaded once already "
            f"(run {done[0].dagster_run.run_id[:8]}); the next load comes when the file changes",
            cursor=fingerprint,
        )
    failed = [record for record in earlier if record.dagster_run.status in ENDED_WITHOUT_SUCCESS]
    if len(failed) >= LOAD_ATTEMPTS:
        return SensorResult(
            skip_reason=f"loading this version of {path} failed {len(failed)} times (last: run "
            f"{failed[0].dagster_run.run_id[:8]}); the next load comes when the file changes, by "
            "`pipeline run`, or from the UI",
            cursor=fingerprint,
        )
    if len(failed) > 1:  # the first retry is at once; a clock read twice could make "0 s" a wait
        ended = failed[0].end_time or failed[0].create_timestamp.timestamp()
        wait = RETRY_AFTER_SECONDS * (len(failed) - 1) - (time.time() - ended)
        if wait > 0:
            return SkipReason(
                f"the last load of {path} failed (run {failed[0].dagster_run.run_id[:8]}); "
                f"trying again in {wait:.0f} s"
            )
    request = RunRequest(
        run_key=f"{version}-{len(failed)}",
        tags={
            REASON_TAG: "taxonomy changed" if not failed else "taxonomy load retried",
            TAXONOMY_VERSION_TAG: version,
        },
    )
    return SensorResult(run_requests=[request], cursor=fingerprint)


def _load_died(instance: DagsterInstance, app_db: AppDatabase, run_id: str) -> bool:
    """A started load whose heartbeat stopped, or that never beat long after it started: killed with
    its process. (A queued or starting run is Dagster's run monitoring's to time out.)"""
    record = instance.get_run_record_by_id(run_id)
    if record is None or record.dagster_run.status != DagsterRunStatus.STARTED:
        return False
    with app_db.session() as session:
        beat = heartbeats.heartbeats_of(session, [run_id]).get(run_id)
    dead_after = dead_after_seconds(app_db.heartbeat_seconds)
    if beat is None:
        started = record.start_time or record.create_timestamp.timestamp()
        return time.time() - started > dead_after + SILENT_GRACE_SECONDS
    return beat.state != "alive" or beat.age_seconds() > dead_after


TAXONOMY_VERSION_TAG = "pipeline/taxonomy_version"
LOAD_ATTEMPTS = 3
RETRY_AFTER_SECONDS = 60.0
ENDED_WITHOUT_SUCCESS = (DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED)
IN_PROGRESS = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


def taxonomy_run_key(fingerprint: str) -> str:
    """The run key of a file version's load (path, size, modification time), short enough for a tag."""
    return "taxonomy-" + hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
