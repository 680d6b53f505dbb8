"""Keeps the skills taxonomy loaded: a run of `skills_taxonomy` when none is loaded or the file changed.

The taxonomy is a reference input of `skill_entities` (see `appdb.discovery.pending_work_query`):
loading a changed file makes the resolved skills stale, and their sensor picks them up.
"""

import json

from dagster import (
    AssetKey,
    DefaultSensorStatus,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    define_asset_job,
    sensor,
)

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
    return SensorResult(run_requests=[RunRequest(tags={REASON_TAG: "taxonomy changed"})], cursor=fingerprint)
