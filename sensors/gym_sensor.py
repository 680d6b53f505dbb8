"""The gym sensor: re-evaluate the gold checks whenever the corpus or the outputs changed.

Reviewers' verdicts (`pipeline review ...`) and new outputs both move the gold figures;
the sensor notices either by a fingerprint of what the evaluation reads (its cursor)
and requests one run of `gym_evaluation_job`, so the UI's check history plots the
figures over time without anyone launching anything.

While enrichment runs go, outputs change every second: an evaluation then measures a corpus half
written and takes CPU the runs need (8-28 s of a 2-core machine's time per evaluation, measured in the
daemon benchmark). So it waits for the work groups' runs to end, but at most `MAX_DEFER_SECONDS` since
the last evaluation, so a long backlog still plots its figures.
"""

import json
import time
from collections.abc import Sequence

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from appdb import review
from assets.run_tags import SOURCE_TAG
from resources.app_database import AppDatabase
from sensors.discovery_sensor import any_run_active

GYM_SENSOR = "gym_evaluation_sensor"
MAX_DEFER_SECONDS = 600  # an evaluation at least every 10 minutes while enrichment runs go


def read_gym_cursor(cursor: str | None, now: float) -> tuple[str | None, float]:
    """(marker, time the deferral's clock started: the last evaluation requested). No cursor (a new
    deployment) starts the clock `now`; a cursor from before the deferral is a bare marker, taken as
    evaluated long ago."""
    if not cursor:
        return None, now
    try:
        data = json.loads(cursor)
    except ValueError:
        return cursor, 0.0
    if not isinstance(data, dict):
        return cursor, 0.0
    return data.get("marker"), float(data.get("at", 0.0))


def build_gym_sensor(job: UnresolvedAssetJobDefinition, work_jobs: Sequence[str] = ()):  # noqa: ANN201
    """The sensor for `job`; it defers while runs of `work_jobs` (the work groups' jobs) queue or go."""

    @sensor(
        name=GYM_SENSOR,
        job=job,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            "Runs the gold evaluation checks when corrections or outputs changed, once the enrichment "
            f"runs have ended (or every {MAX_DEFER_SECONDS // 60} minutes while they go)."
        ),
    )
    def _gym_sensor(context: SensorEvaluationContext, app_db: AppDatabase) -> SensorResult | SkipReason:
        with app_db.session() as session:
            marker = review.gym_marker(session)
        now = time.time()
        last_marker, last_at = read_gym_cursor(context.cursor, now)
        if marker == last_marker:
            return SkipReason("no new corrections or outputs since the last evaluation")
        waited = now - last_at
        if waited < MAX_DEFER_SECONDS and any_run_active(context.instance, work_jobs):
            context.update_cursor(json.dumps({"marker": last_marker, "at": last_at}))  # the clock kept
            return SkipReason(
                "outputs changed; the evaluation waits for the enrichment runs to end "
                f"(at most {MAX_DEFER_SECONDS - waited:.0f}s more)"
            )
        return SensorResult(
            run_requests=[RunRequest(run_key=marker, tags={SOURCE_TAG: "sensor"})],
            cursor=json.dumps({"marker": marker, "at": now}),
        )

    return _gym_sensor
