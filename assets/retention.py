"""Retirement of finished postings' partitions: Dagster advises at most ~100,000 dynamic partitions per
asset, and every posting is one. A retired posting keeps its outputs, interactions and work state in the
application database (`pipeline trace` still shows everything); only its Dagster partition goes, with
its place in the partition lists of the UI. If a retired posting needs work again (a new use-case
version), discovery registers it as a partition anew.

`pipeline retire --finished-before DATE` does it by hand; the `retire_finished_postings` schedule
(stopped until switched on in the UI) does it nightly for postings finished PIPELINE_RETIRE_AFTER_DAYS ago.
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
    job,
    op,
)
from sqlalchemy.orm import Session

from appdb import discovery, retention
from assets.partitions import POSTING_PARTITIONS
from resources.app_database import AppDatabase

RETIRE_CHUNK = 1000


def retirable(session: Session, specs: Sequence[discovery.WorkSpec], before: datetime) -> list[str]:
    """Postings whose every output is current and was written before `before` (naive UTC)."""
    keys = retention.finished_postings(session, [spec.use_case for spec in specs], before)
    pending: set[str] = set()
    for spec in specs:
        pending.update(discovery.find_pending_work(session, spec, within=keys))
    return [key for key in keys if key not in pending]


def retire_partitions(instance: DagsterInstance, keys: Sequence[str]) -> int:
    """Delete the posting partitions among `keys`; returns how many there were."""
    known = set(instance.get_dynamic_partitions(POSTING_PARTITIONS.name))
    doomed = [key for key in keys if key in known]
    for key in doomed:
        instance.delete_dynamic_partition(POSTING_PARTITIONS.name, key)
    return len(doomed)


def build_retirement(
    specs: Sequence[discovery.WorkSpec], after_days: int
) -> tuple[JobDefinition, ScheduleDefinition]:
    """The job that retires postings finished `after_days` ago, and its nightly schedule (stopped)."""

    @op(required_resource_keys={"app_db"})
    def retire_finished(context: OpExecutionContext) -> None:
        app_db: AppDatabase = context.resources.app_db
        before = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=after_days)
        with app_db.session() as session:
            keys = retirable(session, specs, before)
        retired = retire_partitions(context.instance, keys)
        context.log.info(f"retired {retired} posting partitions finished before {before:%Y-%m-%d %H:%M} UTC")

    @job(name="retire_finished_postings_job", description="Delete the partitions of finished postings.")
    def retire_job() -> None:
        retire_finished()

    schedule = ScheduleDefinition(
        name="retire_finished_postings",
        job=retire_job,
        cron_schedule="30 3 * * *",
        default_status=DefaultScheduleStatus.STOPPED,
        description=(
            f"Nightly: delete the Dagster partitions of postings finished over {after_days} days ago "
            "(PIPELINE_RETIRE_AFTER_DAYS); their outputs and traces stay in the application database."
        ),
    )
    return retire_job, schedule
