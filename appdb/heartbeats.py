"""Run heartbeats: which runs are alive, which died, and whether work is moving at all.

A run that can hold the `llm` pool or claims writes a row before it waits on the pool and renews
`beat_at` every few seconds until it ends (`resources/run_heartbeat.py`); each beat also renews the
leases of the claims it holds, and no other run takes them while the row is alive
(`held_by_live_run`). A heartbeat says "this process is alive" within seconds, so a dead run is found
long before its leases run out, including a run that died while *waiting* for the pool and held no
claims at all. The row names its process by more than a pid (`appdb/process_identity.py`), and every
time in it is the database's (`appdb/clock.py`): a host's clock is never asked. Reaping is `mark_dead`
(one reaper wins) then `claims.release_claims_of_runs`; the rules are in `sensors/run_liveness.py`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Select, and_, delete, exists, func, select, update
from sqlalchemy.orm import Session

from appdb.clock import database_now
from appdb.dialects import CHUNK, insert_for
from appdb.models import Interaction, RunHeartbeat, StepHeartbeat, UseCaseOutput, WorkItem
from appdb.process_identity import ProcessIdentity, this_process

DEAD_ROWS_KEPT_DAYS = 7  # reaped runs stay visible (`pipeline status`) this long


@dataclass(frozen=True)
class Heartbeat:
    """One run's last sign of life, read at `seen_at` on the database's clock (every time here is)."""

    run_id: str
    job: str
    source: str | None
    process: ProcessIdentity
    state: str
    started_at: datetime
    beat_at: datetime
    ended_reason: str | None
    seen_at: datetime

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def pid(self) -> int:
        return self.process.pid

    def age_seconds(self) -> float:
        """How long ago the run last beat, on the database's clock (no host's clock is asked)."""
        return (self.seen_at - self.beat_at).total_seconds()


def _heartbeats(session: Session, query: Select) -> list[Heartbeat]:
    """The rows of `query` (a select of RunHeartbeat and `database_now()`) as heartbeats."""
    return [
        Heartbeat(
            row.run_id,
            row.job,
            row.source,
            ProcessIdentity(
                row.instance_id, row.host, row.pid, row.boot_id, row.pid_namespace, row.process_started
            ),
            row.state,
            row.started_at,
            row.beat_at,
            row.ended_reason,
            seen_at,
        )
        for row, seen_at in session.execute(query)
    ]


def _read_heartbeats() -> Select:
    return select(RunHeartbeat, database_now())


def start_heartbeat(
    session: Session,
    run_id: str,
    *,
    job: str,
    source: str | None,
    host: str | None = None,
    pid: int | None = None,
    process: ProcessIdentity | None = None,
) -> None:
    """The run's first beat (a run already reaped as dead stays dead), by this process unless `process`
    says which (or `host` and `pid`: a process elsewhere, judged by its heartbeat's age alone)."""
    if process is None:
        process = this_process() if host is None else ProcessIdentity.elsewhere(host, pid or 0)
    session.execute(
        insert_for(session)(RunHeartbeat)
        .values(
            run_id=run_id,
            job=job,
            source=source,
            host=process.host[:255],
            pid=process.pid,
            instance_id=process.instance_id,
            boot_id=process.boot_id,
            pid_namespace=process.pid_namespace,
            process_started=process.started,
            state="alive",
            started_at=database_now(),
            beat_at=database_now(),
        )
        .on_conflict_do_nothing()
    )


def beat(session: Session, run_id: str, *, lease_seconds: float | None = None) -> bool:
    """Renew the heartbeat; False when the run was declared dead meanwhile (or never started one).

    With `lease_seconds`, the claims the run holds whose lease ends within half of it get a full lease
    again: a live run keeps its claims however long its calls take (a batch whose calls outlasted the
    lease lost them to a second run, which answered the same postings again)."""
    result = session.execute(
        update(RunHeartbeat)
        .where(RunHeartbeat.run_id == run_id, RunHeartbeat.state == "alive")
        .values(beat_at=database_now())
        .execution_options(synchronize_session=False)
    )
    alive = result.rowcount == 1
    if alive and lease_seconds:
        session.execute(
            update(WorkItem)
            .where(
                WorkItem.status == "claimed",
                WorkItem.claimed_by == run_id,
                WorkItem.lease_expires_at <= database_now(lease_seconds / 2),
            )
            .values(lease_expires_at=database_now(lease_seconds))
            .execution_options(synchronize_session=False)
        )
    return alive


def held_by_live_run(claimed_by: ColumnElement[str | None]) -> ColumnElement[bool]:
    """Whether the run named by `claimed_by` has a live heartbeat: its claims pass to no other run until
    it is declared dead (`mark_dead`, by the rules of `sensors/run_liveness.py`), whatever their lease
    says. A holder without a heartbeat row (an older version) is judged by the lease alone."""
    return exists().where(RunHeartbeat.run_id == claimed_by, RunHeartbeat.state == "alive")


def end_heartbeat(session: Session, run_id: str) -> int:
    """The run ended in its own process: nothing to reap. The row stays (state `ended`), so a run with
    no row at all is one that never began to beat (`record_silent_death`). Claims it still holds (its
    step failed before giving them back, the database away at that moment) go back, no attempt spent;
    returns how many."""
    result = session.execute(
        update(RunHeartbeat)
        .where(RunHeartbeat.run_id == run_id, RunHeartbeat.state == "alive")
        .values(state="ended", beat_at=database_now())
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return 0
    _close_steps_of(session, run_id, "ended", "its run ended")
    released = session.execute(
        update(WorkItem)
        .where(WorkItem.status == "claimed", WorkItem.claimed_by == run_id)
        .values(status="pending", claimed_by=None, lease_expires_at=None, updated_at=database_now())
        .execution_options(synchronize_session=False)
    )
    return released.rowcount


def record_silent_death(session: Session, run_id: str, job: str, reason: str) -> bool:
    """A run that died before its first beat: recorded dead; True for the one caller that recorded it."""
    result = session.execute(
        insert_for(session)(RunHeartbeat)
        .values(
            run_id=run_id,
            job=job,
            source=None,
            host="",
            pid=0,
            state="dead",
            started_at=database_now(),
            beat_at=database_now(),
            ended_reason=reason,
        )
        .on_conflict_do_nothing()
    )
    return result.rowcount == 1


def alive_heartbeats(session: Session) -> list[Heartbeat]:
    """Every run still called alive, the oldest beat first (the reaper decides which died)."""
    return _heartbeats(
        session, _read_heartbeats().where(RunHeartbeat.state == "alive").order_by(RunHeartbeat.beat_at)
    )


def mark_dead(session: Session, run_id: str, reason: str) -> bool:
    """Declare the run dead; True for the one caller that did it (the sensor and `pipeline run` may race)."""
    result = session.execute(
        update(RunHeartbeat)
        .where(RunHeartbeat.run_id == run_id, RunHeartbeat.state == "alive")
        .values(state="dead", ended_reason=reason)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return False
    _close_steps_of(session, run_id, "dead", f"its run is dead: {reason}")
    return True


def died_since(session: Session, since: datetime, jobs: Collection[str] = ()) -> list[Heartbeat]:
    """Runs declared dead whose last beat is at or after `since` (of these jobs, when given), newest
    first: what the stuck-work detector names when nothing holds the work any more."""
    query = _read_heartbeats().where(RunHeartbeat.state == "dead", RunHeartbeat.beat_at >= since)
    if jobs:
        query = query.where(RunHeartbeat.job.in_(list(jobs)))
    return _heartbeats(session, query.order_by(RunHeartbeat.beat_at.desc()).limit(3))


def heartbeats_of(session: Session, run_ids: Collection[str] | None = None) -> dict[str, Heartbeat]:
    """The heartbeats of these runs (all, without `run_ids`), alive or reaped."""
    query = _read_heartbeats()
    if run_ids is not None:
        if not run_ids:
            return {}
        query = query.where(RunHeartbeat.run_id.in_(list(run_ids)[:CHUNK]))
    return {beat.run_id: beat for beat in _heartbeats(session, query)}


def prune_dead(session: Session, days: int = DEAD_ROWS_KEPT_DAYS) -> int:
    """Forget ended and reaped runs older than `days`."""
    cutoff = database_now(-days * 86400)
    result = session.execute(
        delete(RunHeartbeat).where(RunHeartbeat.state != "alive", RunHeartbeat.beat_at < cutoff)
    )
    session.execute(
        delete(StepHeartbeat).where(StepHeartbeat.state != "alive", StepHeartbeat.beat_at < cutoff)
    )
    return result.rowcount


def claims_by_run(session: Session, use_cases: Sequence[str]) -> dict[str, tuple[int, datetime | None]]:
    """Run id -> (claims it holds on these use cases, its latest lease expiry)."""
    rows = session.execute(
        select(WorkItem.claimed_by, func.count(), func.max(WorkItem.lease_expires_at))
        .where(WorkItem.status == "claimed", WorkItem.use_case.in_(list(use_cases)))
        .group_by(WorkItem.claimed_by)
    )
    return {run_id: (count, expires) for run_id, count, expires in rows if run_id}


def last_progress(session: Session, use_cases: Sequence[str]) -> datetime | None:
    """When these use cases last moved: their newest output or LLM call, else their first claim."""
    names = list(use_cases)
    moments = [
        session.scalar(select(func.max(UseCaseOutput.updated_at)).where(UseCaseOutput.use_case.in_(names))),
        session.scalar(select(func.max(Interaction.started_at)).where(Interaction.use_case.in_(names))),
    ]
    known = [moment for moment in moments if moment is not None]
    if known:
        return max(known)
    return session.scalar(select(func.min(WorkItem.created_at)).where(WorkItem.use_case.in_(names)))


# Steps away from their run's process (the Celery executor): a row per (run, step, process), beaten by
# the worker process executing the step. The run's own process beats `run_heartbeats` meanwhile, so a
# step waiting in the broker's queue leaves its run alive, and a lost worker's step is dead by its own row.


@dataclass(frozen=True)
class StepBeat:
    """One step's process, read at `seen_at` on the database's clock (judged like a run's heartbeat)."""

    run_id: str
    step: str
    process: ProcessIdentity
    state: str
    beat_at: datetime
    ended_reason: str | None
    seen_at: datetime

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def pid(self) -> int:
        return self.process.pid

    def age_seconds(self) -> float:
        return (self.seen_at - self.beat_at).total_seconds()


def _step_beats(session: Session, query: Select) -> list[StepBeat]:
    return [
        StepBeat(
            row.run_id,
            row.step,
            ProcessIdentity(
                row.instance_id, row.host, row.pid, row.boot_id, row.pid_namespace, row.process_started
            ),
            row.state,
            row.beat_at,
            row.ended_reason,
            seen_at,
        )
        for row, seen_at in session.execute(query)
    ]


def start_step_heartbeat(
    session: Session, run_id: str, step: str, process: ProcessIdentity | None = None
) -> bool:
    """The first beat of this process executing `step` of `run_id`; False when the run is no longer
    alive (declared dead or ended: the step must do nothing) or this very row was declared dead."""
    process = process or this_process()
    run_alive = session.scalar(select(RunHeartbeat.state).where(RunHeartbeat.run_id == run_id)) in (
        "alive",
        None,
    )  # no run row: a run whose own process does not beat (an older version)
    if not run_alive:
        return False
    session.execute(
        insert_for(session)(StepHeartbeat)
        .values(
            run_id=run_id,
            step=step[:200],
            instance_id=process.instance_id,
            host=process.host[:255],
            pid=process.pid,
            boot_id=process.boot_id,
            pid_namespace=process.pid_namespace,
            process_started=process.started,
            state="alive",
            started_at=database_now(),
            beat_at=database_now(),
        )
        .on_conflict_do_nothing()
    )
    return session.scalar(select(step_process_alive(run_id, step, process.instance_id or ""))) or False


def step_process_alive(run_id: str, step: str, instance_id: str) -> ColumnElement[bool]:
    """Whether this process's row for the step is alive: the fence of a step's process, beside the claim
    (the step delivered again in the same run holds the same run's claims; a lost process that comes
    back must call and store nothing)."""
    return exists().where(
        StepHeartbeat.run_id == run_id,
        StepHeartbeat.step == step,
        StepHeartbeat.instance_id == instance_id,
        StepHeartbeat.state == "alive",
    )


def _claims_of_step(run_id: str, step: str) -> ColumnElement[bool]:
    return and_(WorkItem.status == "claimed", WorkItem.claimed_by == run_id, WorkItem.use_case == step)


def beat_step(
    session: Session, run_id: str, step: str, instance_id: str, *, lease_seconds: float | None = None
) -> bool:
    """Renew the step's row (and the leases of its use case's claims, as `beat` does for a run); False
    when it was declared dead or ended meanwhile."""
    result = session.execute(
        update(StepHeartbeat)
        .where(
            StepHeartbeat.run_id == run_id,
            StepHeartbeat.step == step,
            StepHeartbeat.instance_id == instance_id,
            StepHeartbeat.state == "alive",
        )
        .values(beat_at=database_now())
        .execution_options(synchronize_session=False)
    )
    alive = result.rowcount == 1
    if alive and lease_seconds:
        session.execute(
            update(WorkItem)
            .where(
                _claims_of_step(run_id, step), WorkItem.lease_expires_at <= database_now(lease_seconds / 2)
            )
            .values(lease_expires_at=database_now(lease_seconds))
            .execution_options(synchronize_session=False)
        )
    return alive


def _release_step_claims(session: Session, run_id: str, step: str) -> int:
    """The step's use case's claims of the run back to pending, no attempt spent."""
    return session.execute(
        update(WorkItem)
        .where(_claims_of_step(run_id, step))
        .values(status="pending", claimed_by=None, lease_expires_at=None, updated_at=database_now())
        .execution_options(synchronize_session=False)
    ).rowcount


def end_step_heartbeat(session: Session, run_id: str, step: str, instance_id: str) -> int:
    """The step ended in its process: its row `ended`, and the claims it still holds back (none when the
    row was declared dead meanwhile: the claims are another process's now); returns how many."""
    result = session.execute(
        update(StepHeartbeat)
        .where(
            StepHeartbeat.run_id == run_id,
            StepHeartbeat.step == step,
            StepHeartbeat.instance_id == instance_id,
            StepHeartbeat.state == "alive",
        )
        .values(state="ended", beat_at=database_now())
        .execution_options(synchronize_session=False)
    )
    return _release_step_claims(session, run_id, step) if result.rowcount == 1 else 0


def alive_step_heartbeats(
    session: Session, run_id: str | None = None, step: str | None = None
) -> list[StepBeat]:
    """The step processes still called alive (of one run's step, when given), the oldest beat first."""
    query = select(StepHeartbeat, database_now()).where(StepHeartbeat.state == "alive")
    if run_id is not None:
        query = query.where(StepHeartbeat.run_id == run_id)
    if step is not None:
        query = query.where(StepHeartbeat.step == step)
    return _step_beats(session, query.order_by(StepHeartbeat.beat_at))


def mark_step_dead(session: Session, beat: StepBeat, reason: str) -> int | None:
    """Declare the step's process dead and give its use case's claims of the run back (no attempt spent);
    how many, or None when another reaper got it first. Its run is not touched: its process is alive and
    the broker delivers the step again."""
    result = session.execute(
        update(StepHeartbeat)
        .where(
            StepHeartbeat.run_id == beat.run_id,
            StepHeartbeat.step == beat.step,
            StepHeartbeat.instance_id == beat.process.instance_id,
            StepHeartbeat.state == "alive",
        )
        .values(state="dead", ended_reason=reason)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return None
    # a delivery of the same step taking over waits for this (`claims` of the run's step are one
    # process's at a time), so these are the dead process's
    return _release_step_claims(session, beat.run_id, beat.step)


def _close_steps_of(session: Session, run_id: str, state: str, reason: str) -> None:
    session.execute(
        update(StepHeartbeat)
        .where(StepHeartbeat.run_id == run_id, StepHeartbeat.state == "alive")
        .values(state=state, ended_reason=reason)
        .execution_options(synchronize_session=False)
    )
