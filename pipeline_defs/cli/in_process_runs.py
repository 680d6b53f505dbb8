"""Run pending work now, in this process, on the persistent Dagster instance.

The same plan the sensors make (`sensors.discovery_sensor.plan_runs`), executed right away:
the runs appear in the Dagster UI like any other, tagged with source `cli`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dagster import DagsterInstance, Definitions, JobDefinition

from appdb import pauses
from appdb.models import utcnow
from assets.factory import WorkGroup, build_work_groups, llm_resource_key
from assets.partitions import add_partitions
from assets.run_tags import SOURCE_TAG
from pipeline_defs.cli.database_blips import DatabaseBlips, is_connection_error_name
from pipeline_defs.cli.run_watch import RunWatch
from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home, ensure_pools
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from resources.app_database import AppDatabase
from resources.llm_hosts import HOST_PAUSE_PREFIX, LLMHost
from resources.run_heartbeat import DEFAULT_LEASE_SECONDS, end_run_heartbeat
from sensors.discovery_sensor import ACTIVE_STATUSES, plan_runs
from sensors.host_pinning import pin_requests, usable_hosts

REPLANS_AFTER_REAPING = 3
# (group, planned subjects per use case, the subjects' plural) -> a context around the group's runs
GroupTracker = Callable[[str, Mapping[str, int], str], AbstractContextManager[None]]
# Without --verbose Dagster's console shows nothing: a failed step's stack trace (60-100 lines, twice:
# the step's and the run's) buried the one line that says what happened. The command prints that line
# (`RunReport.failures`, or the circuit breaker's); the trace stays in the run's event log (the UI).
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class RunReport:
    group: str
    use_cases: list[str]
    runs: list[str] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)
    pending_before: int = 0
    seconds: float = 0.0
    paused: dict[str, str] = field(default_factory=dict)
    stopped: str = ""  # why the remaining batches were not run (the circuit breaker tripped)
    failures: list[str] = field(default_factory=list)  # per failed run: its run id and first error line
    retried_runs: list[str] = field(default_factory=list)  # failed on the database's connection, redone
    blip: str = ""  # the connection error that stopped this pass (the group is planned again)
    # runs that failed because their host went down, their claims given back unspent: the group is
    # planned again on the other hosts (`hosts_lost`: one line each, why and until when)
    rerouted_runs: list[str] = field(default_factory=list)
    hosts_lost: list[str] = field(default_factory=list)


def single_use_case_groups(groups: Sequence[WorkGroup], names: Sequence[str]) -> list[WorkGroup]:
    """Groups of one: run only the named use cases, each with its own job (upstream first)."""
    selected = []
    for group in groups:
        for member in group.members:
            if member.use_case.name in names:
                selected.append(
                    WorkGroup(member.use_case.name, group.model, (member,), member.job, member.batch_size)
                )
    return selected


def load_reference_data(
    defs: Definitions,
    instance: DagsterInstance,
    jobs: Sequence[str],
    source: str = "cli",
    blips: DatabaseBlips | None = None,
) -> bool:
    """Run these reference-data jobs (the declared plugins', `catalog.reference_jobs`: postings' taxonomy,
    a no-op when its file is unchanged), in order; True when all of them succeeded. With `blips`, a
    load that failed on the database's connection is tried again once it answers."""
    return not failed_reference_jobs(defs, instance, jobs, source, blips)


def failed_reference_jobs(
    defs: Definitions,
    instance: DagsterInstance,
    jobs: Sequence[str],
    source: str = "cli",
    blips: DatabaseBlips | None = None,
) -> list[str]:
    """`load_reference_data`, with the names of the jobs that failed."""
    return [job for job in jobs if not _load(defs, instance, job, source, blips)]


def _load(
    defs: Definitions, instance: DagsterInstance, job: str, source: str, blips: DatabaseBlips | None
) -> bool:
    while True:
        result = defs.resolve_job_def(job).execute_in_process(
            instance=instance,
            tags={SOURCE_TAG: source},
            run_config=QUIET_LOGS,
            raise_on_error=False,
        )
        blip = _connection_failure(result) if blips is not None and not result.success else ""
        if not blip:
            return result.success
        blips.wait_for_database(blip)


def run_pending(
    defs: Definitions,
    groups: Sequence[WorkGroup],
    instance: DagsterInstance,
    app_db: AppDatabase,
    *,
    source: str = "cli",
    verbose: bool = False,
    on_run: Callable[[str, int, int], None] | None = None,
    watch: RunWatch | None = None,
    track: GroupTracker | None = None,
    blips: DatabaseBlips | None = None,
    hosts: Sequence[LLMHost] = (),
) -> list[RunReport]:
    """Discover and process every pending posting of the given work groups, in order.

    Runs whose heartbeat stopped are failed and their pool slots freed before and while this works
    (`RunWatch`); a group is done only when no run that stopped beating still holds its work (waited
    for, reaped, planned again); after a run tripped the circuit breaker nothing more is started. With
    `blips`, an application database that stops answering is waited for (`database_blips`) and the
    group planned again, the runs that failed on it not counted as failed. With several `hosts` each
    run is pinned to one that serves the group's model and is not paused, as the discovery sensor pins
    them; a run whose host went down pauses that host only, and the group is planned again on the
    others (only when no host is left does it stop).
    """
    reports: list[RunReport] = []
    with contextlib.ExitStack() as stack:
        watch = watch or stack.enter_context(RunWatch(instance, app_db))
        for group in groups:
            replans = 0
            while True:
                reaped_before = len(watch.reaped)
                try:
                    report = _run_group(
                        defs, group, instance, app_db, watch, source, verbose, on_run, track, blips, hosts
                    )
                    if not report.stopped and not report.blip:
                        # a run that died moments ago may still hold some of the work
                        watch.wait_for_silent_holders(group.use_case_names, report.runs)
                except Exception as exc:
                    if blips is None:
                        raise
                    blips.wait_out(exc)  # a connection error: waited out, then the group planned again
                    continue
                reports.append(report)
                if report.blip:  # a run failed on the database's connection: plan the rest again
                    continue
                if blips is not None:
                    blips.made_progress()
                if report.hosts_lost and not report.stopped:
                    continue  # a lost host's claims came back: plan again on the hosts left (fewer each time)
                # A dead run's claims came back while this group ran: its postings were not in the plan.
                if report.stopped or len(watch.reaped) == reaped_before or replans >= REPLANS_AFTER_REAPING:
                    break
                replans += 1
            if report.stopped:
                break
    return reports


def _run_group(
    defs: Definitions,
    group: WorkGroup,
    instance: DagsterInstance,
    app_db: AppDatabase,
    watch: RunWatch,
    source: str,
    verbose: bool,
    on_run: Callable[[str, int, int], None] | None,
    track: GroupTracker | None = None,
    blips: DatabaseBlips | None = None,
    hosts: Sequence[LLMHost] = (),
) -> RunReport:
    started = time.perf_counter()
    with app_db.session() as session:
        pauses.end_pauses_of_other_backends(session, _serving_backends(defs, group))
        open_hosts = usable_hosts(hosts, group.model, pauses.active_pauses(session)) if group.model else []
        plan = plan_runs(session, instance, group, spread=max(1, len(open_hosts)))
    report = RunReport(group.name, group.use_case_names, pending_before=len(plan.pending))
    report.paused = plan.paused
    requests = plan.run_requests(group, source=source)
    if group.model and hosts and requests and not open_hosts:
        report.stopped = (
            f"every host serving {group.model} is paused or lists other models (`pipeline pauses`); "
            "the pending work waits (`pipeline resume` to retry sooner)"
        )
        return report
    add_partitions(instance, group.subject_kind, plan.new_partitions)
    requests = pin_requests(requests, open_hosts, instance, ACTIVE_STATUSES)
    job = defs.resolve_job_def(group.job.name)
    planned = {name: plan.pending_by_use_case.get(name) or len(plan.pending) for name in group.use_case_names}
    tracking = track(group.name, planned, group.subject.plural) if track and requests else None
    with tracking or contextlib.nullcontext():
        _run_requests(
            job, instance, app_db, group, watch, requests, report, verbose, on_run, blips, open_hosts
        )
    report.seconds = time.perf_counter() - started
    return report


def _run_requests(
    job: JobDefinition,
    instance: DagsterInstance,
    app_db: AppDatabase,
    group: WorkGroup,
    watch: RunWatch,
    requests: Sequence,
    report: RunReport,
    verbose: bool,
    on_run: Callable[[str, int, int], None] | None,
    blips: DatabaseBlips | None = None,
    open_hosts: Sequence[LLMHost] = (),
) -> None:
    """Execute the group's run requests one after another; stop when the circuit breaker tripped, or
    (with `blips`) when a run failed on the database's connection: the database is waited for, and the
    caller plans the rest again; or when a host went down while others are left (the caller plans the
    group again on those)."""
    for index, request in enumerate(requests, start=1):
        if on_run:
            on_run(group.name, index, len(requests))
        run_id, run_started = str(uuid.uuid4()), utcnow()
        watch.current_run_id = run_id  # what a signal cancels
        try:
            result = job.execute_in_process(
                instance=instance,
                tags=request.tags,
                run_config=None if verbose else QUIET_LOGS,
                raise_on_error=False,
                run_id=run_id,
            )
        finally:
            watch.current_run_id = None
        report.runs.append(result.run_id)
        blip = _connection_failure(result) if blips is not None and not result.success else ""
        if blip:
            blips.wait_for_database(blip)
        # Ended here, not a beat later by its thread: the claims it still holds go back before the next
        # plan (a run that failed on the database could not give them back itself).
        if not end_run_heartbeat(run_id, timeout=0.0) and blips is not None:
            blips.wait_for_database(f"run {run_id[:8]}'s heartbeat could not be ended")
            end_run_heartbeat(run_id, timeout=blips.budget_seconds)
        if blip:
            report.retried_runs.append(result.run_id)
            report.blip = blip
            break
        if blips is not None:
            blips.made_progress()
        if not result.success:
            report.failed_runs.append(result.run_id)
            tripped = _pauses_since(app_db, group, run_started)
            lost = {pause.use_case for pause in tripped if pause.use_case.startswith(HOST_PAUSE_PREFIX)}
            if lost and len(tripped) == len(lost) and any(h.pause_key not in lost for h in open_hosts):
                report.rerouted_runs.append(result.run_id)
                report.hosts_lost += [_host_lost_line(pause, group) for pause in tripped]
                break  # the rest of the plan may be pinned to that host: plan again on the others
            report.failures.append(_failure_line(result))
            report.stopped = _breaker_message(tripped)
            if report.stopped:
                break


def _connection_failure(result: Any) -> str:
    """The first line of a failed run's error when a step failed on the database's connection, else ""."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error, names = event.step_failure_data.error, []
            while error is not None:
                names.append(error.cls_name or "")
                last, error = error, error.cause or error.context
            if is_connection_error_name(names):
                lines = last.message.strip().splitlines() or [""]
                return lines[0][:200]
    return ""


def _failure_line(result: Any) -> str:
    """One line for a failed run: its id and the first line of the error its first failed step raised."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            error = event.step_failure_data.error
            while error.cause is not None:  # Dagster's wrapper first, the exception raised last
                error = error.cause
            message = error.message.strip().splitlines() or [""]
            return f"run {result.run_id} failed in {event.step_key}: {message[0]}"
    return f"run {result.run_id} failed"


def _serving_backends(defs: Definitions, group: WorkGroup) -> dict[str, str]:
    """The backend each of the group's LLM use cases runs on in `defs`."""
    return {
        member.use_case.name: defs.resources[llm_resource_key(member.use_case)].backend_name
        for member in group.members
        if member.use_case.uses_llm and llm_resource_key(member.use_case) in defs.resources
    }


def _pauses_since(app_db: AppDatabase, group: WorkGroup, since: datetime) -> list[pauses.Pause]:
    """The circuit breaker's pauses of the group's use cases, or of a host, set since `since`."""
    with app_db.session() as session:
        tripped = [pause for pause in pauses.active_pauses(session).values() if pause.paused_at >= since]
    names = set(group.use_case_names)
    return [
        pause for pause in tripped if pause.use_case in names or pause.use_case.startswith(HOST_PAUSE_PREFIX)
    ]


def _host_lost_line(pause: pauses.Pause, group: WorkGroup) -> str:
    host = pause.use_case.removeprefix(HOST_PAUSE_PREFIX)
    return (
        f"host {host} is unavailable, paused until {pause.resume_at:%Y-%m-%d %H:%M:%S} UTC: its "
        f"{group.subject.plural} went to the other hosts, no attempt spent ({pause.reason})"
    )


def _breaker_message(tripped: Sequence[pauses.Pause]) -> str:
    """Why to stop: the pauses the breaker set; "" when none."""
    if not tripped:
        return ""
    first = tripped[0]
    return (
        f"the circuit breaker tripped: {', '.join(pause.use_case for pause in tripped)} paused until "
        f"{first.resume_at:%Y-%m-%d %H:%M:%S} UTC ({first.reason}); stopped, the pending work waits "
        "(`pipeline resume` to retry sooner)"
    )


def dagster_for(settings: Settings) -> tuple[DagsterInstance, Definitions, list[WorkGroup], AppDatabase]:
    """The project's Dagster instance, the code location, its work groups and the app database."""
    ensure_dagster_home(settings)
    built = build_use_cases(settings)
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups)
    app_db = AppDatabase(
        url=settings.database_url,
        heartbeat_seconds=settings.heartbeat_seconds,
        lease_seconds=settings.lease_seconds or DEFAULT_LEASE_SECONDS,
    )
    instance = DagsterInstance.get()
    ensure_pools(settings, instance)  # before any run: runs starting at once raced to create it
    return instance, defs, groups, app_db
