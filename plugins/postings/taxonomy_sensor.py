"""Keeps the skills taxonomy loaded: a run of `skills_taxonomy` when none is loaded or the file changed.

The taxonomy is a reference input of `skill_entities` (see `appdb.discovery.pending_work_query`):
loading a changed file makes the resolved skills stale, and their sensor picks them up.

One load per version of the file: each request carries the file's fingerprint as its `run_key`, and
the sensor asks for nothing while a load runs or after a load of that version was requested (a failed
load is retried when the file changes, by `pipeline run`, or from the UI), so a slow first load (ESCO's
label vectors) no longer piles up a run a minute.
"""

import hashlib
import json

from dagster import (
    AssetKey,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    sensor,
)
from dagster._core.storage.tags import RUN_KEY_TAG

from assets.run_tags import REASON_TAG
from plugins.postings.store.taxonomy import loaded_taxonomy_hash
from plugins.postings.taxonomy_resource import TaxonomyResource
from resources.app_database import AppDatabase

TAXONOMY_ASSET = "skills_taxonomy"

skills_taxonomy_job = define_asset_job(
    "skills_taxonomy_job",
    selection=[AssetKey(TAXONOMY_ASSET)],
    description="Load the configured skills taxonomy into the app database (a no-op when unchanged).",
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
    if running:
        return SkipReason(
            f"a load of the taxonomy is under way (run {running[0].run_id[:8]}); waiting for it"
        )
    run_key = taxonomy_run_key(fingerprint)
    requested = context.instance.get_runs(RunsFilter(tags={RUN_KEY_TAG: run_key}), limit=1)
    if requested:
        status = requested[0].status.value.lower()
        return SensorResult(
            skip_reason=f"this version of {path} was loaded once already (run {requested[0].run_id[:8]}, "
            f"{status}); the next load comes when the file changes",
            cursor=fingerprint,
        )
    request = RunRequest(run_key=run_key, tags={REASON_TAG: "taxonomy changed"})
    return SensorResult(run_requests=[request], cursor=fingerprint)


IN_PROGRESS = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


def taxonomy_run_key(fingerprint: str) -> str:
    """The run key of a file version's load (path, size, modification time), short enough for a tag."""
    return "taxonomy-" + hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
