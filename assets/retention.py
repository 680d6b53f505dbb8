"""Retirement of finished subjects' partitions: Dagster advises at most ~100,000 dynamic partitions per
asset, and every subject is one. A retired subject keeps its outputs, interactions and work state in the
application database (`pipeline trace` still shows everything); only its Dagster partition goes, with
its place in the partition lists of the UI. If a retired subject needs work again (a new use-case
version), discovery registers it as a partition anew.

Each kind retires on its own, over its own use cases: `pipeline retire --finished-before DATE` does it
by hand; the `retire_finished_<kind>` schedule (stopped until switched on in the UI) does it nightly for
subjects finished PIPELINE_RETIRE_AFTER_DAYS ago.
"""

# No `from __future__ import annotations`: Dagster reads the op's context annotation at runtime.
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from dagster import (
    DagsterInstance,
    DefaultScheduleStatus,
    JobDefinition,
    OpExecutionContext,
    ScheduleDefinition,
    in_process_executor,
    job,
    op,
)
from sqlalchemy.orm import Session

from appdb import discovery, retention
from assets.partitions import delete_partitions, partitions_for
from resources.app_database import AppDatabase

RETIRE_CHUNK = 1000


def retirable(session: Session, specs: Sequence[discovery.WorkSpec], before: datetime) -> list[str]:
    """Subjects whose every output (of `specs`, the use cases of one kind) is current and was written
    before `before` (naive UTC)."""
    kinds = {spec.subject_kind for spec in specs}
    if len(kinds) > 1:
        raise ValueError(f"retirement goes kind by kind, not over {sorted(kinds)} at once")
    keys = retention.finished_subjects(session, [spec.use_case for spec in specs], before)
    pending: set[str] = set()
    for spec in specs:
        pending.update(discovery.find_pending_work(session, spec, within=keys))
    return [key for key in keys if key not in pending]


def retire_partitions(instance: DagsterInstance, kind: str, keys: Sequence[str]) -> int:
    """Delete the partitions of `kind` among `keys`; returns how many there were."""
    return delete_partitions(instance, partitions_for(kind).name, keys)


def build_retirement(
    kind: str, noun: str, specs: Sequence[discovery.WorkSpec], after_days: int
) -> tuple[JobDefinition, ScheduleDefinition]:
    """The job that retires the `kind` subjects finished `after_days` ago (their every use case in
    `specs` done), and its nightly schedule (stopped)."""

    @op(name=f"retire_finished_{kind}", required_resource_keys={"app_db"})
    def retire_finished(context: OpExecutionContext) -> None:
        app_db: AppDatabase = context.resources.app_db
        before = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=after_days)
        with app_db.session() as session:
            keys = retirable(session, specs, before)
        retired = retire_partitions(context.instance, kind, keys)
        context.log.info(f"retired {retired} {noun} partitions finished before {before:%Y-%m-%d %H:%M} UTC")

    @job(
        name=f"retire_finished_{kind}_job",
        description=f"Delete the partitions of finished {noun}s.",
        executor_def=in_process_executor,  # one op: no second process for it
    )
    def retire_job() -> None:
        retire_finished()

    schedule = ScheduleDefinition(
        name=f"retire_finished_{kind}",
        job=retire_job,
        cron_schedule="30 3 * * *",
        default_status=DefaultScheduleStatus.STOPPED,
        description=(
            f"Nightly: delete the Dagster partitions of {noun}s finished over {after_days} days ago "
            "(PIPELINE_RETIRE_AFTER_DAYS); their outputs and traces stay in the application database."
        ),
    )
    return retire_job, schedule
