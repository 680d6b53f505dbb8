"""Work discovery: each work group's sensor pulls its own work from the application database.

A work group is the use cases that share a model (or one script use case); see `assets/factory.py`.
Every tick the sensor runs each member's discovery query, registers the new subjects as partitions,
leaves out subjects already covered by a queued or running run of the group, and requests runs of at
most `batch_size` subjects each: one run per contiguous range of partitions, which materializes every
member for that batch with the model loaded once. A paused use case (the circuit breaker tripped)
contributes no work until its resume time. The cursor remembers a fingerprint of the database; an idle
tick where nothing changed skips the queries. Freeing dead runs' work is the liveness sensor's job
(`sensors/liveness_sensor.py`), not discovery's.

`plan_runs` is shared with the `pipeline run` command, so both find the same work.
"""

import json
import time
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
from sqlalchemy.orm import Session

from appdb import discovery, events, pauses
from assets.factory import WorkGroup
from assets.partitions import add_partitions, partition_positions, partitions_for
from assets.run_tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    CONTINUE_TAG,
    DAGSTER_PARTITION_TAG,
    PRIORITY_TAG,
    SOURCE_TAG,
    WORK_GROUP_TAG,
    partition_range_tags,
)
from resources.app_database import AppDatabase
from resources.llm_hosts import LLMHost
from sensors.host_pinning import pin_requests, usable_hosts

DEFAULT_INTERVAL_SECONDS = 30
SPREAD_FLOOR = 25  # subjects: below this a run's start costs more than it spreads
ACTIVE_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
UNDER_WAY_STATUSES = [DagsterRunStatus.STARTING, DagsterRunStatus.STARTED]  # out of the queue
# an upstream run that started this recently, claims or not, is about to make a follower's inputs
FRESH_UPSTREAM_SECONDS = 30.0


@dataclass(frozen=True)
class RunPlan:
    pending: list[str]
    new_partitions: list[str]
    in_flight: int
    batches: list[list[str]]
    pending_by_use_case: dict[str, int]
    paused: dict[str, str]  # use case -> "reason (until ...)"

    @property
    def to_request(self) -> int:
        """Subjects the batches hold: pending, less those already in queued or running runs."""
        return len(self.pending) - self.in_flight

    def run_requests(self, group: WorkGroup, source: str | None = None) -> list[RunRequest]:
        requests = []
        for batch in self.batches:
            tags = {
                **partition_range_tags(batch[0], batch[-1]),
                WORK_GROUP_TAG: group.name,
                PRIORITY_TAG: str(group.priority),
            }
            if source:
                tags[SOURCE_TAG] = source
            requests.append(RunRequest(tags=tags))
        return requests


def plan_runs(session: Session, instance: DagsterInstance, group: WorkGroup, spread: int = 1) -> RunPlan:
    """Which subjects need this group's use cases now, and how they split into runs.

    Runs hold at most `batch_size` subjects; with `spread` hosts to serve them, into a multiple of that
    many runs of equal size (`run_size`): 300 subjects with three hosts are three runs of 100 and 900
    are six of 150, not runs of 250 that leave two hosts idle while one does the rest."""
    active = pauses.active_pauses(session)
    paused = {
        name: f"{active[name].reason} (until {active[name].resume_at:%Y-%m-%d %H:%M:%S} UTC)"
        for name in group.use_case_names
        if name in active
    }
    pending_by_use_case: dict[str, int] = {}
    pending_set: set[str] = set()
    for member in group.members:
        if member.use_case.name in paused:
            continue
        keys = discovery.find_pending_work(session, member.spec)
        pending_by_use_case[member.use_case.name] = len(keys)
        pending_set.update(keys)
    if not pending_set:  # nothing to place: no partition lookups
        return RunPlan(
            pending=[],
            new_partitions=[],
            in_flight=0,
            batches=[],
            pending_by_use_case=pending_by_use_case,
            paused=paused,
        )
    positions = partition_positions(instance, pending_set, group.subject_kind)
    new = sorted(key for key in pending_set if key not in positions)
    # New partitions are added after every known one, in this order.
    after_known = max(positions.values(), default=0) + 1
    order = {**positions, **{key: after_known + index for index, key in enumerate(new)}}
    pending = sorted(pending_set, key=order.__getitem__)
    covered = _keys_in_active_runs(instance, group.job.name, positions, group.subject_kind)
    todo = [key for key in pending if key not in covered]
    size = run_size(len(todo), group.batch_size, spread)
    batches = [todo[start : start + size] for start in range(0, len(todo), size)]
    return RunPlan(
        pending=pending,
        new_partitions=new,
        in_flight=len(pending) - len(todo),
        batches=batches,
        pending_by_use_case=pending_by_use_case,
        paused=paused,
    )


def run_size(subjects: int, batch_size: int, hosts: int = 1) -> int:
    """Subjects per run: at most `batch_size`; with several hosts, as many runs as a multiple of the
    hosts, of equal size (not below `SPREAD_FLOOR`), so no host is left alone with the last one."""
    if hosts <= 1 or subjects == 0:
        return batch_size
    runs = -(-subjects // batch_size)
    runs = -(-runs // hosts) * hosts
    return min(batch_size, max(SPREAD_FLOOR, -(-subjects // runs)))


def _keys_in_active_runs(
    instance: DagsterInstance, job_name: str, positions: dict[str, int], kind: str
) -> set[str]:
    """The known pending subjects inside the partition range of a queued or running run of the job."""
    ranges = []
    for run in instance.get_runs(RunsFilter(job_name=job_name, statuses=ACTIVE_STATUSES)):
        single = run.tags.get(DAGSTER_PARTITION_TAG, "")
        ranges.append(
            (
                run.tags.get(ASSET_PARTITION_RANGE_START_TAG, single),
                run.tags.get(ASSET_PARTITION_RANGE_END_TAG, single),
            )
        )
    if not ranges:
        return set()
    bounds = partition_positions(instance, {key for pair in ranges for key in pair if key}, kind)
    by_position = sorted((position, key) for key, position in positions.items())
    ordered = [position for position, _ in by_position]
    covered: set[str] = set()
    for first, last in ranges:
        if first in bounds and last in bounds:
            low, high = bisect_left(ordered, bounds[first]), bisect_right(ordered, bounds[last])
            covered.update(key for _, key in by_position[low:high])
    return covered


def feeding_jobs(group: WorkGroup, groups: Sequence[WorkGroup]) -> list[str]:
    """The jobs of the other groups whose use cases write what this group's members read."""
    wanted = {name for member in group.members for name in member.use_case.upstream}
    return [other.job.name for other in groups if other is not group and wanted & set(other.use_case_names)]


def feeding_specs(group: WorkGroup) -> list[discovery.WorkSpec]:
    """The work specs of the use cases outside this group that its members read."""
    own = set(group.use_case_names)
    specs = {
        name: spec
        for member in group.members
        for name, spec in member.spec.upstream_specs.items()
        if name not in own
    }
    return list(specs.values())


def any_run_active(instance: DagsterInstance, jobs: Sequence[str]) -> bool:
    """Whether any of `jobs` has a queued or running run (one row read per job at most)."""
    return any(instance.get_runs(RunsFilter(job_name=job, statuses=ACTIVE_STATUSES), limit=1) for job in jobs)


def more_input_coming(
    instance: DagsterInstance,
    app_db: AppDatabase,
    jobs: Sequence[str],
    specs: Sequence[discovery.WorkSpec],
    own_job: str,
) -> bool:
    """Whether a part-filled batch should wait: runs of `jobs` still run, their use cases (`specs`)
    still have postings to write, and either some of those are not taken up by a run yet or this
    group's own run (`own_job`) still goes.

    An LLM run writes the outputs others read first (`assets/factory.py`), so once its last such step
    ends the rest is ready, though the run still calls the model for its other members. Once every
    posting left upstream is held by a running run (the last inputs are under way), the group starts
    on what is ready whenever it has no run going: its last run then holds only what those last runs
    write, not up to a whole batch that starts after them and ends seconds after the last LLM call."""
    if not any_run_active(instance, jobs):
        return False
    with app_db.session() as session:
        last_inputs_under_way, left_to_write = discovery.upstream_work(session, specs)
        if not left_to_write:
            return False
        if not last_inputs_under_way or any(discovery.work_unclaimed(session, spec) for spec in specs):
            return True  # some not taken up by a run yet
    return any_run_active(instance, [own_job])


@dataclass(frozen=True)
class DiscoveryScope:
    """What one group's sensor looks at: the group, the hosts its LLM runs go to, (a script group)
    the jobs and use cases of other groups that write what it reads, and how long its runs keep
    claiming more work after their own batch (0: they do not; `continue_seconds`) with how many of
    them at once (`runs_per_host` per host for a model's group, `script_runs` for a script's), and the
    backend serving each of its use cases now (`backends`: a pause another backend set ends)."""

    group: WorkGroup
    hosts: Sequence[LLMHost]
    feeders: Sequence[str]
    feeder_specs: Sequence[discovery.WorkSpec]
    continue_seconds: int = 0
    runs_per_host: int = 1
    script_runs: int = 1
    backends: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        group: WorkGroup,
        hosts: Sequence[LLMHost],
        groups: Sequence[WorkGroup],
        continue_seconds: int = 0,
        runs_per_host: int = 1,
        script_runs: int = 1,
        step_continue_seconds: int = 0,
        backends: Mapping[str, str] | None = None,
    ) -> "DiscoveryScope":
        feeders = feeding_jobs(group, groups) if group.model is None else []
        return cls(
            group,
            hosts if group.model else (),  # a script group calls no model server
            feeders,
            feeding_specs(group) if feeders else [],
            # in a run of several use cases the steps go one after another: each goes on for a share
            # only, so the next one's turn comes within it
            continue_seconds if len(group.members) == 1 else min(continue_seconds, step_continue_seconds),
            runs_per_host,
            script_runs,
            {name: backends[name] for name in group.use_case_names if name in backends} if backends else {},
        )

    @property
    def follows(self) -> bool:
        """Whether the group's runs follow their upstream's outputs as they are written (a script
        group reading other groups' outputs, its runs going on): then a run may start ahead of them."""
        return bool(self.feeders and self.continue_seconds)

    def runs_at_once(self, open_hosts: int) -> int:
        """Runs of the group that may work at once while runs go on claiming: the queue's limit per
        host (a model's group; the embedded model counts as one host), `script_runs` for a script's group
        (PIPELINE_SCRIPT_RUNS: a script's runs share the machine's cores, not a server)."""
        return self.runs_per_host * max(1, open_hosts) if self.group.model else self.script_runs


def discover(context: SensorEvaluationContext, app_db: AppDatabase, scope: DiscoveryScope) -> Any:
    """One tick of a group's sensor: plan, hold back part-filled batches while upstream runs still
    write, pin to hosts, request; a `SkipReason` that says why when nothing is requested."""
    group = scope.group
    noun = group.subject.plural
    with app_db.session() as session:
        if scope.backends:
            pauses.end_pauses_of_other_backends(session, scope.backends)
        versions = ",".join(member.use_case.version for member in group.members)
        marker = f"{versions}|{discovery.change_marker(session, group.subject.table)}"
        previous = json.loads(context.cursor) if context.cursor else {}
        if previous.get("marker") == marker and previous.get("pending") == 0 and not previous.get("upstream"):
            return SkipReason(f"{group.name}: no change since the last tick, and no work then")
        paused_now = pauses.active_pauses(session)
        open_hosts = usable_hosts(scope.hosts, group.model, paused_now) if scope.hosts else []
        # only runs that go on skip a tick: only they need the subjects' own marker
        subjects = discovery.subjects_marker(session, group.subject.table) if scope.continue_seconds else None
        if subjects is not None and previous.get("subjects") == subjects:
            # no new subject, so no new partition: with no room for a run, there is nothing to plan
            full = _runs_at_most(context, scope, len(open_hosts))
            if full:
                return SkipReason(full)
        plan = plan_runs(session, context.instance, group, spread=len(open_hosts))
        # a follower with nothing of its own to do looks again while its upstream has work to make
        being_made, upstream = (
            discovery.upstream_work(session, scope.feeder_specs)
            if scope.follows and not plan.pending
            else (False, False)
        )
    for name, why in plan.paused.items():
        context.log.warning(f"{name} is paused, no runs requested for it: {why}")
    cursor = json.dumps(
        {"marker": marker, "pending": len(plan.pending), "upstream": upstream, "subjects": subjects}
    )
    if upstream:
        requests, waiting = _ahead_of_upstream(context, scope, being_made)
    elif scope.continue_seconds:
        requests, waiting = _while_runs_go_on(context, scope, plan, len(open_hosts))
    else:
        requests, waiting = _full_batches_while_upstream_writes(context, app_db, scope, plan)
    if scope.hosts and not open_hosts:
        context.log.warning(f"{group.name}: every host serving {group.model} is paused or lists other models")
        requests = []
    requests = pin_requests(requests, open_hosts, context.instance, ACTIVE_STATUSES)
    per_use_case = ", ".join(f"{name} {count}" for name, count in plan.pending_by_use_case.items())
    context.log.info(
        f"{group.name}: {len(plan.pending)} {noun} pending ({per_use_case}), {plan.in_flight} already "
        f"in queued or running runs, {len(plan.new_partitions)} new partitions; "
        f"requesting {len(requests)} runs"
    )
    if not requests and not plan.new_partitions:
        context.update_cursor(cursor)
        return SkipReason(_why_nothing_requested(group, plan, waiting))
    with app_db.session() as session:  # the event log keeps discovery counts across runs
        events.record_event(
            session,
            "discovery",
            use_case=group.name,
            source="sensor",
            count=len(plan.pending),
            detail={"by_use_case": plan.pending_by_use_case, "runs_requested": len(requests)},
        )
    # added here, in bulk, not as the result's `dynamic_partitions_requests` (key by key in the daemon)
    add_partitions(context.instance, partitions_for(group.subject_kind).name, plan.new_partitions)
    return SensorResult(run_requests=requests, cursor=cursor)


def _full_batches_while_upstream_writes(
    context: SensorEvaluationContext, app_db: AppDatabase, scope: DiscoveryScope, plan: RunPlan
) -> tuple[list[RunRequest], str]:
    """The run requests to make now, and why the rest waits ("" when nothing waits): while upstream runs
    still write, only full batches go (the rest joins a later batch)."""
    group = scope.group
    requests = plan.run_requests(group)
    full = sum(len(batch) >= group.batch_size for batch in plan.batches)
    if not requests or full == len(requests):
        return requests, ""
    if not more_input_coming(context.instance, app_db, scope.feeders, scope.feeder_specs, group.job.name):
        return requests, ""
    ready = plan.to_request
    waiting = (
        f"{group.name}: {ready} {group.subject.plural} ready; {ready - full * group.batch_size} of them, "
        f"fewer than a batch ({group.batch_size}), wait while upstream runs ({', '.join(scope.feeders)}) "
        "still write more: for a full batch, the last of their inputs, or the end of its running run"
    )
    context.log.info(waiting)
    return requests[:full], waiting


def _while_runs_go_on(
    context: SensorEvaluationContext, scope: DiscoveryScope, plan: RunPlan, open_hosts: int
) -> tuple[list[RunRequest], str]:
    """The run requests to make now when runs go on claiming (`CONTINUE_TAG`), and why the rest waits:
    no more runs than may work at once, counting the group's queued and running runs, which take the
    rest as they finish their batches (a downstream group's run follows its upstream's outputs as they
    come, so a part-filled batch starts at once)."""
    group = scope.group
    requests = [
        request.with_replaced_attrs(tags={**request.tags, CONTINUE_TAG: str(scope.continue_seconds)})
        for request in plan.run_requests(group)
    ]
    active = _active_runs(context, group)
    room = max(0, scope.runs_at_once(open_hosts) - active)
    if len(requests) <= room:
        return requests, ""
    waiting = (
        f"{group.name}: {plan.to_request} {group.subject.plural} not in a run yet; {active} runs going "
        f"(at most {scope.runs_at_once(open_hosts)} at once) take them as they finish their batches"
    )
    context.log.info(waiting)
    return requests[:room], waiting


def _active_runs(context: SensorEvaluationContext, group: WorkGroup) -> int:
    """The group's queued and running runs."""
    return len(context.instance.get_runs(RunsFilter(job_name=group.job.name, statuses=ACTIVE_STATUSES)))


def _runs_at_most(context: SensorEvaluationContext, scope: DiscoveryScope, open_hosts: int) -> str:
    """Why no run may start now ("" when one may): the group's queued and running runs are as many as
    may work at once, and they take the rest as they finish their batches. Asked before planning: a
    plan reads every pending subject and its partition (at 100,000 pending, most of the code server's
    CPU), which a tick with no room would throw away."""
    group = scope.group
    active = _active_runs(context, group)
    most = scope.runs_at_once(open_hosts)
    if active < most:
        return ""
    return f"{group.name}: {active} runs going (at most {most} at once) take the pending work as they go on"


def _ahead_of_upstream(
    context: SensorEvaluationContext, scope: DiscoveryScope, being_made: bool
) -> tuple[list[RunRequest], str]:
    """Nothing of its own to do yet, but an upstream run is making its inputs (it has started, or
    `being_made`: a live claim): one run of the group over that run's partitions, so that its process
    starts and its resources load while the first inputs are made; it then claims them as written
    (`assets/batch_run.py`, `next_batch`). None while a run of the group goes; none while no upstream
    run goes (a paused upstream starts nothing).

    An upstream run that started in the last `FRESH_UPSTREAM_SECONDS` is enough, claims or not: a run's
    start wakes the sensors (`appdb.discovery.arrival_marker`), so this tick comes within a second of
    it. One that is still queued, or started longer ago and has claimed nothing (waiting for the
    model's pool, or loading a model), is not: the run would wait past `CONTINUE_IDLE_SECONDS` to end,
    and start again."""
    group, instance = scope.group, context.instance
    if instance.get_runs(RunsFilter(job_name=group.job.name, statuses=ACTIVE_STATUSES), limit=1):
        return [], f"{group.name}: its run waits for the inputs its upstream runs are making"
    if being_made:
        feeding = [
            run
            for job in scope.feeders
            for run in instance.get_runs(RunsFilter(job_name=job, statuses=ACTIVE_STATUSES), limit=1)
        ]
    else:
        since = time.time() - FRESH_UPSTREAM_SECONDS
        feeding = [
            record.dagster_run
            for job in scope.feeders
            for record in instance.get_run_records(RunsFilter(job_name=job, statuses=UNDER_WAY_STATUSES))
            if record.start_time is None or record.start_time >= since  # STARTING: no start time yet
        ][:1]
    if not feeding:
        queued = not being_made and any(
            instance.get_runs(RunsFilter(job_name=job, statuses=ACTIVE_STATUSES), limit=1)
            for job in scope.feeders
        )
        why = (
            "no upstream run goes" if not queued else "its upstream runs are queued or have taken none up yet"
        )
        return [], f"{group.name}: no work yet; its upstream has work, but {why}"
    tags = feeding[0].tags
    single = tags.get(DAGSTER_PARTITION_TAG, "")
    first = tags.get(ASSET_PARTITION_RANGE_START_TAG, single)
    last = tags.get(ASSET_PARTITION_RANGE_END_TAG, single)
    if not first or not last:  # an upstream run without partitions (the UI's): wait for its outputs
        return [], f"{group.name}: no work yet; its upstream run names no partitions to follow"
    context.log.info(f"{group.name}: starting a run ahead of the inputs {feeding[0].job_name} is making")
    request = RunRequest(
        tags={
            **partition_range_tags(first, last),
            WORK_GROUP_TAG: group.name,
            PRIORITY_TAG: str(group.priority),
            CONTINUE_TAG: str(scope.continue_seconds),
        }
    )
    return [request], ""


def _why_nothing_requested(group: WorkGroup, plan: RunPlan, waiting: str) -> str:
    if waiting:
        return waiting
    if plan.paused and not plan.pending:
        return f"{group.name}: paused: {'; '.join(plan.paused.values())}"
    if not plan.pending:
        every = f"every {group.subject.noun}"
        return f"{group.name}: no work: {every} has a current output or is held by a running run"
    return f"{group.name}: {len(plan.pending)} pending, all in queued or running runs"


def build_discovery_sensor(
    group: WorkGroup,
    interval_seconds: int = DEFAULT_INTERVAL_SECONDS,
    hosts: Sequence[LLMHost] = (),
    groups: Sequence[WorkGroup] = (),
    continue_seconds: int = 0,
    runs_per_host: int = 1,
    script_runs: int = 1,
    step_continue_seconds: int = 0,
    backends: Mapping[str, str] | None = None,
) -> SensorDefinition:
    """The group's sensor; it ticks at most every `interval_seconds` (PIPELINE_SENSOR_INTERVAL_SECONDS): at
    the daemon's 5 s look, or sooner when subjects arrive (`pipeline_defs/runtime/daemon.py`). With
    `hosts` (a server backend) each LLM run is pinned to one of them (`sensors/host_pinning.py`).

    A script group (no model) whose inputs are still being written by runs of other `groups` waits
    until it has a full batch or those inputs are all written: otherwise it starts a run for every few
    subjects the upstream runs finish (each run a process loading the code and the resolver: 11 runs
    where 2 would do, measured with three hosts, on the CPU the other runs need).

    With `continue_seconds` (PIPELINE_RUN_CONTINUE_SECONDS) each run keeps claiming its use case's
    pending subjects after its own batch for up to that long (in a group of several use cases, each
    step for up to `step_continue_seconds`, PIPELINE_RUN_STEP_CONTINUE_SECONDS), and a downstream
    group's run follows its upstream's outputs as they come; the sensor then requests no more runs
    than may work at once (`DiscoveryScope.runs_at_once`): fewer, longer runs."""
    scope = DiscoveryScope.of(
        group, hosts, groups, continue_seconds, runs_per_host, script_runs, step_continue_seconds, backends
    )
    members = ", ".join(group.use_case_names)

    @sensor(
        name=f"{group.name}_discovery",
        job=group.job,
        minimum_interval_seconds=interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description=(
            f"Finds {group.subject.plural} lacking a current {members}; requests runs of up to "
            f"{group.batch_size} {group.subject.plural}"
            f"{f' with {group.model} loaded once per run' if group.model else ''}."
        ),
    )
    def _discovery(context: SensorEvaluationContext, app_db: AppDatabase) -> SensorResult | SkipReason:
        return discover(context, app_db, scope)

    return _discovery


__all__ = [
    "DiscoveryScope",
    "RunPlan",
    "build_discovery_sensor",
    "discover",
    "feeding_jobs",
    "feeding_specs",
    "partition_positions",
    "plan_runs",
]
