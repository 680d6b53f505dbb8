"""The liveness sensor: one per code location, the daemon's side of the one liveness mechanism
(`sensors/run_liveness.py`; `pipeline run` runs the same in a thread).

Every tick (at most every heartbeat interval, PIPELINE_HEARTBEAT_SECONDS) it fails the runs whose
heartbeat stopped or whose process is gone, giving their claims and pool slots back; gives back claims
whose lease ran out; and, for each work group with work pending and nothing stored for longer than a
lease, says what holds it. The discovery sensors only plan and request runs.
"""

from collections.abc import Sequence

from dagster import DefaultSensorStatus, SensorDefinition, SensorEvaluationContext, SkipReason, sensor

from appdb import discovery
from assets.factory import WorkGroup
from resources.app_database import AppDatabase
from resources.run_heartbeat import dead_after_seconds
from sensors.run_liveness import reap_dead_runs, reap_dead_steps, stuck_work, sweep_expired_leases

LIVENESS_SENSOR = "run_liveness_sensor"


def group_lease_seconds(group: WorkGroup) -> int:
    """The longest claim lease among the group's use cases: the stuck detector's patience."""
    return max(member.use_case.retry.lease_seconds for member in group.members)


def check_liveness(context: SensorEvaluationContext, app_db: AppDatabase, groups: Sequence[WorkGroup]) -> str:
    """One tick: reap, sweep, detect; returns what it did in one line (the tick's skip reason)."""
    done = []
    jobs = [group.job.name for group in groups]
    for dead in reap_dead_runs(context.instance, app_db, dead_after_seconds(app_db.heartbeat_seconds), jobs):
        context.log.warning(
            f"run {dead.run_id} ({dead.job}) is dead, its heartbeat stopped "
            f"{dead.heartbeat_age_seconds:.0f}s ago: marked failed (was {dead.dagster_status_was}), "
            f"its pool slots freed, {dead.claims_released} claims given back"
        )
        done.append(f"run {dead.run_id[:8]} reaped ({dead.claims_released} claims back)")
    for step in reap_dead_steps(app_db, dead_after_seconds(app_db.heartbeat_seconds)):
        context.log.warning(
            f"step {step.step} of run {step.run_id} is dead ({step.reason}): {step.claims_released} claims "
            "given back; the run goes on (the broker delivers the step to another worker)"
        )
        done.append(f"step {step.step} of run {step.run_id[:8]} reaped ({step.claims_released} claims back)")
    freed, failed = sweep_expired_leases(context.instance, app_db)
    if freed:
        context.log.warning(
            f"freed {freed} claims whose lease expired (their runs died: {', '.join(failed)})"
        )
        done.append(f"{freed} expired claims freed")
    for group in groups:
        stuck = stuck_work(
            lambda: context.instance,
            app_db,
            group.use_case_names,
            lambda group=group: _pending(app_db, group),
            group_lease_seconds(group),
            uses_pool=group.model is not None,
            jobs=[group.job.name],
            in_daemon=True,
        )
        if stuck:
            context.log.warning(f"stuck: {stuck}")
            done.append(f"stuck: {stuck}")
    return "; ".join(done) or "every run alive, no claim expired, no work stuck"


def _pending(app_db: AppDatabase, group: WorkGroup) -> int:
    with app_db.session() as session:
        return len(
            {key for member in group.members for key in discovery.find_pending_work(session, member.spec)}
        )


def build_liveness_sensor(groups: Sequence[WorkGroup], heartbeat_seconds: float) -> SensorDefinition:
    @sensor(
        name=LIVENESS_SENSOR,
        minimum_interval_seconds=max(1, round(heartbeat_seconds)),
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            "Frees the work of dead runs (heartbeat stopped or process gone) within a minute, gives back "
            "expired claims, and names what holds work that has not moved for longer than a lease."
        ),
    )
    def _liveness(context: SensorEvaluationContext, app_db: AppDatabase) -> SkipReason:
        return SkipReason(check_liveness(context, app_db, groups))

    return _liveness
