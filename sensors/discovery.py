"""Work discovery: each work group's sensor pulls its own work from the application database.

A work group is the use cases that share a model (or one script use case); see
`pipeline_defs/factory.py`. Every tick the sensor frees dead claims (and marks the
Dagster runs that held them failed, so their postings stop counting as in flight), runs each member's
discovery query, registers the new postings as partitions, leaves out postings
already covered by a queued or running run of the group, and requests runs of at most
`batch_size` postings each: one run per contiguous range of posting partitions, which
materializes every member for that batch with the model loaded once. A paused use
case (the circuit breaker tripped) contributes no work until its resume time. The
cursor remembers a fingerprint of the database; an idle tick where nothing changed
skips the queries.

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
from pipeline_defs.settings import Settings
from resources.app_database import AppDatabase

if TYPE_CHECKING:
    from pipeline_defs.factory import WorkGroup

WORK_GROUP_TAG = "pipeline/work_group"
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
    pending_by_use_case: dict[str, int]
    paused: dict[str, str]  # use case -> "reason (until ...)"

    def run_requests(self, group: "WorkGroup", source: str | None = None) -> list[RunRequest]:
        requests = []
        for batch in self.batches:
            tags = {
                ASSET_PARTITION_RANGE_START_TAG: batch[0],
                ASSET_PARTITION_RANGE_END_TAG: batch[-1],
                WORK_GROUP_TAG: group.name,
                PRIORITY_TAG: str(group.priority),
            }
            if source:
                tags["pipeline/source"] = source
            requests.append(RunRequest(tags=tags))
        return requests


def plan_runs(session: Session, instance: DagsterInstance, group: "WorkGroup") -> RunPlan:
    """Which postings need this group's use cases now, and how they split into runs."""
    pauses = work.active_pauses(session)
    paused = {
        name: f"{pauses[name].reason} (until {pauses[name].resume_at:%Y-%m-%d %H:%M:%S} UTC)"
        for name in group.use_case_names
        if name in pauses
    }
    pending_by_use_case: dict[str, int] = {}
    pending_set: set[str] = set()
    for member in group.members:
        if member.use_case.name in paused:
            continue
        keys = work.find_pending_work(session, member.spec)
        pending_by_use_case[member.use_case.name] = len(keys)
        pending_set.update(keys)
    if not pending_set:  # nothing to place: skip listing the partitions (0.3 s at 100,000 postings)
        return RunPlan(
            pending=[],
            new_partitions=[],
            in_flight=0,
            batches=[],
            pending_by_use_case=pending_by_use_case,
            paused=paused,
        )
    known = instance.get_dynamic_partitions(POSTING_PARTITIONS.name)
    known_set = set(known)
    new = sorted(key for key in pending_set if key not in known_set)
    order = {key: index for index, key in enumerate([*known, *new])}
    pending = sorted(pending_set, key=order.__getitem__)
    covered = _keys_in_active_runs(instance, group.job.name, known, order)
    todo = [key for key in pending if key not in covered]
    size = group.batch_size
    batches = [todo[start : start + size] for start in range(0, len(todo), size)]
    return RunPlan(
        pending=pending,
        new_partitions=new,
        in_flight=len(pending) - len(todo),
        batches=batches,
        pending_by_use_case=pending_by_use_case,
        paused=paused,
    )


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


def fail_dead_runs(instance: DagsterInstance, run_ids: Sequence[str]) -> list[str]:
    """Mark failed the Dagster runs that let their claims expire, and return their ids.

    Their worker died (killed, out of memory, host lost): the default run launcher cannot
    tell, so the run would stay STARTED, and its postings would count as in flight forever.
    """
    failed = []
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status in ACTIVE_STATUSES:
            instance.report_run_failed(
                run,
                message=(
                    "the run stopped renewing its claims (lease expired): its worker died; "
                    "its postings are pending again and the sensor requests them anew"
                ),
            )
            failed.append(run_id)
    return failed


def build_discovery_sensor(group: "WorkGroup", interval_seconds: int | None = None) -> SensorDefinition:
    """The group's sensor; it ticks every `interval_seconds` (PIPELINE_SENSOR_INTERVAL_SECONDS)."""
    members = ", ".join(group.use_case_names)
    interval = interval_seconds or Settings.from_env().sensor_interval_seconds

    @sensor(
        name=f"{group.name}_discovery",
        job=group.job,
        minimum_interval_seconds=interval,
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            f"Finds postings lacking a current {members}; requests runs of up to {group.batch_size} "
            f"postings{f' with {group.model} loaded once per run' if group.model else ''}."
        ),
    )
    def _discovery(context: SensorEvaluationContext, app_db: AppDatabase) -> SensorResult | SkipReason:
        with app_db.session() as session:
            dead_runs = work.expired_claim_holders(session)
            freed = work.release_expired_claims(session)
        if freed:
            context.log.warning(f"{group.name}: freed {freed} claims whose lease expired (their run died)")
            fail_dead_runs(context.instance, dead_runs)
        with app_db.session() as session:
            versions = ",".join(member.use_case.version for member in group.members)
            marker = f"{versions}|{work.change_marker(session)}"
            previous = json.loads(context.cursor) if context.cursor else {}
            if previous.get("marker") == marker and previous.get("pending") == 0:
                return SkipReason(f"{group.name}: no change since the last tick, and no work then")
            plan = plan_runs(session, context.instance, group)
        for name, why in plan.paused.items():
            context.log.warning(f"{name} is paused, no runs requested for it: {why}")
        cursor = json.dumps({"marker": marker, "pending": len(plan.pending)})
        requests = plan.run_requests(group)
        per_use_case = ", ".join(f"{name} {count}" for name, count in plan.pending_by_use_case.items())
        context.log.info(
            f"{group.name}: {len(plan.pending)} postings pending ({per_use_case}), {plan.in_flight} already "
            f"in queued or running runs, {len(plan.new_partitions)} new partitions; "
            f"requesting {len(requests)} runs"
        )
        if not requests and not plan.new_partitions:
            context.update_cursor(cursor)
            if plan.paused and not plan.pending:
                return SkipReason(f"{group.name}: paused: {'; '.join(plan.paused.values())}")
            if not plan.pending:
                return SkipReason(f"{group.name}: no work: every posting has a current output")
            return SkipReason(f"{group.name}: {len(plan.pending)} pending, all in queued or running runs")
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=(
                [POSTING_PARTITIONS.build_add_request(plan.new_partitions)] if plan.new_partitions else []
            ),
            cursor=cursor,
        )

    return _discovery


__all__ = ["RunPlan", "build_discovery_sensor", "fail_dead_runs", "plan_runs"]
