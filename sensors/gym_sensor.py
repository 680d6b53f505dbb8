"""The gym sensor: re-evaluate the gold checks whenever the corpus or the outputs changed.

Reviewers' verdicts (`pipeline review ...`) and new outputs both move the gold figures;
the sensor notices either by a fingerprint of what the evaluation reads (its cursor)
and requests one run of `gym_evaluation_job`, so the UI's check history plots the
figures over time without anyone launching anything.
"""

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from appdb import review
from assets.run_tags import SOURCE_TAG
from resources.app_database import AppDatabase

GYM_SENSOR = "gym_evaluation_sensor"


def build_gym_sensor(job: UnresolvedAssetJobDefinition):  # noqa: ANN201 - a SensorDefinition
    @sensor(
        name=GYM_SENSOR,
        job=job,
        minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Runs the gold evaluation checks when corrections or outputs changed.",
    )
    def _gym_sensor(context: SensorEvaluationContext, app_db: AppDatabase) -> SensorResult | SkipReason:
        with app_db.session() as session:
            marker = review.gym_marker(session)
        if marker == context.cursor:
            return SkipReason("no new corrections or outputs since the last evaluation")
        return SensorResult(
            run_requests=[RunRequest(run_key=marker, tags={SOURCE_TAG: "sensor"})], cursor=marker
        )

    return _gym_sensor
