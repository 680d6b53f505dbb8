"""Work discovery: each use case's sensor pulls its own work from the application database.

Every tick it frees dead claims, runs the use case's discovery query, registers the
new postings as partitions, leaves out postings already covered by a queued or
running run, and requests runs of at most `batch_size` postings each: one run per
contiguous range of posting partitions, so a batch is one run with the model
loaded once. The cursor remembers a fingerprint of the database; an idle tick where
nothing changed skips the query.

`plan_runs` is shared with the `pipeline run` command, so both find the same work.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PRIORITY_TAG,
)
from sqlalchemy.orm import Session

from appdb import work
from assets.partitions import POSTING_PARTITIONS
from pipeline_defs.declaration import UseCase
from resources.app_database import AppDatabase

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

USE_CASE_TAG = "pipeline/use_case"
ACTIVE_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]


@dataclass(frozen=True)
class RunPlan:
    pending: list[str]
    new_partitions: list[str]
    in_flight: int
    batches: list[list[str]]

    def run_requests(self, use_case: UseCase, source: str | None = None) -> list[RunRequest]:
        requests = []
        for batch in self.batches:
            tags = {
                ASSET_PARTITION_RANGE_START_TAG: batch[0],
                ASSET_PARTITION_RANGE_END_TAG: batch[-1],
                USE_CASE_TAG: use_case.name,
                PRIORITY_TAG: str(use_case.priority),
            }
            if source:
                tags["pipeline/source"] = source
            requests.append(RunRequest(tags=tags))
        return requests


def plan_runs(
    session: Session,
    instance: DagsterInstance,
    use_case: UseCase,
    spec: work.WorkSpec,
    job_name: str,
    batch_size: int,
) -> RunPlan:
    """Which postings need this use case now, and how they split into runs."""
    pending = work.find_pending_work(session, spec)
    known = instance.get_dynamic_partitions(POSTING_PARTITIONS.name)
    known_set = set(known)
    new = [key for key in pending if key not in known_set]
    order = {key: index for index, key in enumerate([*known, *new])}
    covered = _keys_in_active_runs(instance, job_name, known, order)
    todo = sorted((key for key in pending if key not in covered), key=order.__getitem__)
    batches = [todo[start : start + batch_size] for start in range(0, len(todo), batch_size)]
    return RunPlan(pending=pending, new_partitions=new, in_flight=len(pending) - len(todo), batches=batches)


def _keys_in_active_runs(
    instance: DagsterInstance, job_name: str, known: Sequence[str], order: dict[str, int]
) -> set[str]:
    covered: set[str] = set()
    for run in instance.get_runs(RunsFilter(job_name=job_name, statuses=ACTIVE_STATUSES)):
        start = order.get(
            run.tags.get(ASSET_PARTITION_RANGE_START_TAG, run.tags.get("dagster/partition", ""))
        )
        end = order.get(run.tags.get(ASSET_PARTITION_RANGE_END_TAG, run.tags.get("dagster/partition", "")))
        if start is not None and end is not None:
            covered.update(known[start : end + 1])
    return covered


def build_discovery_sensor(
    use_case: UseCase, spec: work.WorkSpec, job: "UnresolvedAssetJobDefinition", batch_size: int
) -> SensorDefinition:
    @sensor(
        name=f"{use_case.name}_discovery",
        job=job,
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Finds postings lacking a current {use_case.name}; requests runs of up to {batch_size}.",
    )
    def _discovery(context: SensorEvaluationContext, app_db: AppDatabase) -> SensorResult | SkipReason:
        with app_db.session() as session:
            freed = work.release_expired_claims(session)
        if freed:
            context.log.warning(f"{use_case.name}: freed {freed} claims whose lease expired (their run died)")
        with app_db.session() as session:
            marker = f"{use_case.version}|{work.change_marker(session)}"
            previous = json.loads(context.cursor) if context.cursor else {}
            if previous.get("marker") == marker and previous.get("pending") == 0:
                return SkipReason(f"{use_case.name}: no change since the last tick, and no work then")
            plan = plan_runs(session, context.instance, use_case, spec, job.name, batch_size)
        cursor = json.dumps({"marker": marker, "pending": len(plan.pending)})
        requests = plan.run_requests(use_case)
        context.log.info(
            f"{use_case.name}: {len(plan.pending)} postings pending, {plan.in_flight} already in queued or "
            f"running runs, {len(plan.new_partitions)} new partitions; requesting {len(requests)} runs"
        )
        if not requests and not plan.new_partitions:
            context.update_cursor(cursor)
            if not plan.pending:
                return SkipReason(f"{use_case.name}: no work: every posting has a current output")
            return SkipReason(f"{use_case.name}: {len(plan.pending)} pending, all in queued or running runs")
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=(
                [POSTING_PARTITIONS.build_add_request(plan.new_partitions)] if plan.new_partitions else []
            ),
            cursor=cursor,
        )

    return _discovery


__all__ = ["RunPlan", "build_discovery_sensor", "plan_runs"]
