"""Liveness: fail the runs whose heartbeat stopped, free expired claims, and say what blocks stuck work.

The one liveness mechanism, used by the liveness sensor (`sensors/liveness_sensor.py`) and by a thread
of `pipeline run` (`pipeline_defs/cli/run_watch.py`):

- Every run that can hold the `llm` pool or claims beats in the application database
  (`resources/run_heartbeat.py`). `reap_dead_runs` takes the runs that are dead: whose beat is older
  than `dead_after_seconds` on the database's clock, or whose process is provably gone (in this PID
  namespace on this boot: `local_process`; a killed worker is seen at the next look, not a minute
  later), and for each: marks it dead (one reaper wins), gives its claims back
  without spending attempts, reports the Dagster run failed and frees its pool slots and pending pool
  claims, whatever Dagster already marked it. Freeing the pool matters for a run that died while
  *waiting* on it: it holds no claims, and a freed slot would otherwise be assigned to it forever.
- `sweep_expired_leases` gives back claims whose lease ran out (a run that never beat at all) and
  fails the Dagster runs that held them.
- `stuck_work` is the detector: work pending and nothing stored for longer than a lease; it names what
  holds the pool and the claims, with their heartbeats' age, so an operator sees why.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from appdb import claims, heartbeats, process_identity
from appdb.clock import now_on_database
from assets.factory import LLM_POOL
from resources.app_database import AppDatabase

SILENT_GRACE_SECONDS = 30  # beyond the heartbeat timeout: how long a started run may take to beat first
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReapedRun:
    run_id: str
    job: str
    heartbeat_age_seconds: float
    claims_released: int
    dagster_status_was: str | None


def reap_dead_runs(
    instance: DagsterInstance,
    app_db: AppDatabase,
    dead_after_seconds: float,
    job_names: Collection[str] = (),
) -> list[ReapedRun]:
    """Fail every run whose heartbeat is older than `dead_after_seconds` or whose process on this host is
    gone, and every run that died before its first beat (`_reap_silent_runs`); return what was reaped.

    A run Dagster already reports finished is reaped too when its heartbeat did not end: it died (a run
    that ends normally ends its heartbeat), and its claims must come back now, not when their lease
    runs out."""
    with app_db.session() as session:
        beats = heartbeats.alive_heartbeats(session)
    reaped = []
    for beat in beats:
        age = beat.age_seconds()  # on the database's clock
        process = local_process(beat)
        if process == GONE:
            reason = f"its process (pid {beat.pid} on {beat.host}) is gone"
        elif age > max(dead_after_seconds, LIVE_PROCESS_PATIENCE_SECONDS if process == ALIVE else 0):
            reason = f"heartbeat stopped {age:.0f}s ago (pid {beat.pid} on {beat.host})"
        else:
            continue
        run = instance.get_run_by_id(beat.run_id)
        with app_db.session() as session:
            if not heartbeats.mark_dead(session, beat.run_id, reason):
                continue  # another reaper got it first
            released = claims.release_claims_of_runs(session, [beat.run_id])
        if run is not None and run.is_finished and not released:
            continue  # it ended before its heartbeat did and holds nothing: nothing to say
        status = fail_run(
            instance, beat.run_id, f"the run's process died: {reason}; {released} claims given back"
        )
        reaped.append(ReapedRun(beat.run_id, beat.job, age, released, status))
    reaped += _reap_silent_runs(instance, app_db, dead_after_seconds + SILENT_GRACE_SECONDS, job_names)
    if reaped:
        with app_db.session() as session:
            heartbeats.prune_dead(session)
    return reaped


@dataclass(frozen=True)
class ReapedStep:
    run_id: str
    step: str
    reason: str
    claims_released: int


def reap_dead_steps(app_db: AppDatabase, dead_after_seconds: float) -> list[ReapedStep]:
    """Steps executing away from their run's process (Celery workers) whose process stopped beating or is
    gone: declared dead, their use case's claims of the run given back without spending attempts. The
    run is left alone: its own process is alive (its heartbeat says so) and waits for the step, which
    the broker delivers again to another worker (acknowledged late), and which claims the work again."""
    with app_db.session() as session:
        beats = heartbeats.alive_step_heartbeats(session)
    reaped = []
    for beat in beats:
        age = beat.age_seconds()
        process = local_process(beat)
        if process == GONE:
            reason = f"its process (pid {beat.pid} on {beat.host}) is gone"
        elif age > max(dead_after_seconds, LIVE_PROCESS_PATIENCE_SECONDS if process == ALIVE else 0):
            reason = f"heartbeat stopped {age:.0f}s ago (pid {beat.pid} on {beat.host})"
        else:
            continue
        with app_db.session() as session:
            released = heartbeats.mark_step_dead(session, beat, reason)
        if released is not None:
            reaped.append(ReapedStep(beat.run_id, beat.step, reason, released))
    return reaped


PROCESS_CHECK_AFTER_SECONDS = 2.0  # a beat this young is trusted: its process wrote it a moment ago
# A run whose process is provably alive is not dead because its heartbeat is late: on a loaded machine
# (or behind a long SQLite write lock) the beat thread can stall past the minute, and reaping a working
# run gave its claims to another run while it went on calling the model (the same posting answered
# twice). Only a silence this long (the default claim lease) reaps a live process: it is hung.
LIVE_PROCESS_PATIENCE_SECONDS = 600.0
ALIVE, GONE, UNKNOWN = "alive", "gone", "unknown"
ZOMBIE_STATES = ("Z", "X")


def local_process(beat: heartbeats.Heartbeat | heartbeats.StepBeat) -> str:
    """Whether the run's process is ALIVE (this very process, or provably the same process in this PID
    namespace on this boot), GONE (in this PID namespace on this boot, and its pid no longer exists, is a
    zombie, or names a process started at another moment: a reused pid), or UNKNOWN (anywhere else: another
    host or container, another boot, no /proc, an older version's row; or a beat too young to judge).
    Host names are not trusted: containers and `unshare --pid` share them."""
    me = process_identity.this_process()
    if beat.process.instance_id is not None and beat.process.instance_id == me.instance_id:
        return ALIVE
    if (
        beat.pid <= 0
        or beat.age_seconds() < PROCESS_CHECK_AFTER_SECONDS
        or not process_identity.same_pid_space(beat.process)
    ):
        return UNKNOWN
    try:
        os.kill(beat.pid, 0)
    except ProcessLookupError:
        return GONE
    except PermissionError:  # another user's process: /proc still tells whether it is the same one
        pass
    found = process_identity.state_and_start(beat.pid)
    if found is None:  # hidden from this user (a /proc mounted with hidepid): the age decides
        return UNKNOWN
    state, started = found
    if state in ZOMBIE_STATES:  # killed, not yet waited for by its parent
        return GONE
    return ALIVE if started == beat.process.started else GONE


def sweep_expired_leases(instance: DagsterInstance, app_db: AppDatabase) -> tuple[int, list[str]]:
    """Give back the claims whose lease ran out and fail the Dagster runs that held them (their worker
    died before it could beat, or beat against another database); (claims freed, runs failed). Runs
    whose heartbeat is alive keep theirs: the reaper frees them when the heartbeat stops."""
    with app_db.session() as session:
        holders = claims.expired_claim_holders(session)
        # A run whose heartbeat is alive is the reaper's to judge: one model call may outlast the lease
        # (a slow server, a loaded machine), and sweeping it failed a run that was still working.
        alive = [
            run_id
            for run_id, beat in heartbeats.heartbeats_of(session, holders).items()
            if beat.state == "alive"
        ]
        freed = claims.release_expired_claims(session, keep=alive)
    dead = [run_id for run_id in holders if run_id not in alive]
    return freed, fail_dead_runs(instance, dead) if freed else []


def fail_dead_runs(instance: DagsterInstance, run_ids: Sequence[str]) -> list[str]:
    """Mark failed the Dagster runs that let their claims expire, and return their ids.

    Their worker died (killed, out of memory, host lost): the default run launcher cannot
    tell, so the run would stay STARTED, and its subjects would count as in flight forever.
    """
    failed = []
    for run_id in run_ids:
        run = instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            fail_run(
                instance,
                run_id,
                "the run stopped renewing its claims (lease expired): its worker died; "
                "its work is pending again and the sensor requests it anew",
            )
            failed.append(run_id)
    return failed


def _reap_silent_runs(
    instance: DagsterInstance, app_db: AppDatabase, grace_seconds: float, job_names: Collection[str]
) -> list[ReapedRun]:
    """Runs started longer than `grace_seconds` ago that never beat: killed while their process was
    still loading the code. Candidates are the runs holding or waiting for pool slots, and the started
    runs of `job_names` (their postings count as in flight while they look started)."""
    candidates = set(instance.event_log_storage.get_concurrency_run_ids())
    for job in job_names:
        candidates.update(
            run.run_id
            for run in instance.get_runs(RunsFilter(job_name=job, statuses=[DagsterRunStatus.STARTED]))
        )
    if not candidates:
        return []
    with app_db.session() as session:
        silent = candidates - set(heartbeats.heartbeats_of(session, candidates))
    reaped = []
    now = time.time()
    for run_id in sorted(silent):
        record = instance.get_run_record_by_id(run_id)
        if (
            record is None
            or record.dagster_run.status != DagsterRunStatus.STARTED
            or record.start_time is None
        ):
            continue
        if now - record.start_time < grace_seconds:
            continue
        job = record.dagster_run.job_name
        reason = f"started {now - record.start_time:.0f}s ago and never sent a heartbeat"
        with app_db.session() as session:
            if not heartbeats.record_silent_death(session, run_id, job, reason):
                continue
            released = claims.release_claims_of_runs(session, [run_id])
        status = fail_run(instance, run_id, f"the run's process died: {reason}; {released} claims given back")
        reaped.append(ReapedRun(run_id, job, now - record.start_time, released, status))
    return reaped


def fail_run(instance: DagsterInstance, run_id: str, message: str, *, canceled: bool = False) -> str | None:
    """Mark a Dagster run that will never end by itself failed (or canceled), and free its `llm` pool
    slots and pending pool claims; returns its status before (None: Dagster does not know it)."""
    run = instance.get_run_by_id(run_id)
    before = run.status.value if run is not None else None
    if run is not None and not run.is_finished:
        if canceled:
            instance.report_run_canceled(run, message=message)
        else:
            instance.report_run_failed(run, message=message)
    # Public on every event log storage since Dagster 1.5 (no `DagsterInstance` wrapper of its own);
    # it removes the run's claimed slots *and* its waiting claims, then reassigns the freed slots.
    instance.event_log_storage.free_concurrency_slots_for_run(run_id)
    return before


@dataclass(frozen=True)
class PoolHolder:
    run_id: str
    waiting: bool  # a pending claim, not a slot
    dagster_status: str | None
    heartbeat: heartbeats.Heartbeat | None


def pool_holders(instance: DagsterInstance, app_db: AppDatabase, pool: str = LLM_POOL) -> list[PoolHolder]:
    """The runs holding (or waiting for) slots of `pool`, with their Dagster status and heartbeat."""
    info = instance.event_log_storage.get_concurrency_info(pool)
    entries = [(slot.run_id, False) for slot in info.claimed_slots] + [
        (step.run_id, True) for step in info.pending_steps if step.assigned_timestamp is None
    ]
    if not entries:
        return []
    with app_db.session() as session:
        beats = heartbeats.heartbeats_of(session, {run_id for run_id, _ in entries})
    holders = []
    for run_id, waiting in dict.fromkeys(entries):
        run = instance.get_run_by_id(run_id)
        holders.append(PoolHolder(run_id, waiting, run.status.value if run else None, beats.get(run_id)))
    return holders


def describe_age(beat: heartbeats.Heartbeat | None) -> str:
    if beat is None:
        return "no heartbeat"
    age = beat.age_seconds()
    text = f"{age / 60:.0f} min" if age >= 120 else f"{age:.0f} s"
    return f"heartbeat {text} old" + (" (declared dead)" if beat.state == "dead" else "")


def stuck_work(
    instance_for: Callable[[], DagsterInstance | None],
    app_db: AppDatabase,
    use_cases: Sequence[str],
    pending: int | Callable[[], int],
    lease_seconds: float,
    *,
    uses_pool: bool = True,
    jobs: Collection[str] = (),
    in_daemon: bool = False,
) -> str | None:
    """None while work moves; else one line: how long nothing moved, and what holds the pool and claims.

    `instance_for` gives Dagster's instance (None: not known here) and `pending` the work waiting (or a
    function that counts it); both are asked only when nothing moved for longer than a lease. With
    nothing holding the work, the line names the run of `jobs` that died last, and asks about the
    daemon only where it is not the daemon asking (`in_daemon`: the liveness sensor)."""
    with app_db.session() as session:
        since = heartbeats.last_progress(session, use_cases)
        now = now_on_database(session)
    if since is None or (now - since).total_seconds() <= lease_seconds:
        return None
    pending = pending() if callable(pending) else pending
    if not pending:
        return None
    with app_db.session() as session:
        held = heartbeats.claims_by_run(session, use_cases)
        beats = heartbeats.heartbeats_of(session, held)
    minutes = (now - since).total_seconds() / 60
    instance = instance_for()
    blockers = []
    if instance is not None and uses_pool:
        for holder in pool_holders(instance, app_db):
            what = "waiting for" if holder.waiting else "held by"
            blockers.append(
                f"pool {LLM_POOL} {what} run {holder.run_id[:8]} "
                f"({holder.dagster_status or 'unknown to Dagster'}, {describe_age(holder.heartbeat)})"
            )
    for run_id, (count, expires) in held.items():
        lease = f", lease ends {expires:%H:%M:%S} UTC" if expires else ""
        blockers.append(f"{count} claims held by run {run_id[:8]} ({describe_age(beats.get(run_id))}{lease})")
    if instance is not None:
        queued = instance.get_runs_count(RunsFilter(statuses=[DagsterRunStatus.QUEUED]))
        if queued:
            blockers.append(f"{queued} runs queued")
    if not blockers:
        with app_db.session() as session:
            died = heartbeats.died_since(session, since, jobs)
        if died:
            last = died[0]
            blockers.append(
                f"the last run to hold work, {last.run_id[:8]} ({last.job}), died at {last.beat_at:%H:%M:%S} "
                f"UTC ({last.ended_reason or 'reaped'}) and its work went back"
            )
        blockers.append(
            "no run holds the pool or claims and none was requested: is the discovery sensor stopped in "
            "the UI, or its use case paused"
            if in_daemon
            else "no run holds the pool or claims: is the daemon running (`pipeline ui`), or run "
            "`pipeline run`"
        )
    return (
        f"{', '.join(use_cases)}: {pending} pending and nothing stored for {minutes:.0f} min "
        f"(longer than a lease, {lease_seconds:.0f} s): " + "; ".join(blockers)
    )
