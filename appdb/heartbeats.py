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

from sqlalchemy import ColumnElement, Select, delete, exists, func, select, update
from sqlalchemy.orm import Session

from appdb.clock import database_now
from appdb.dialects import CHUNK, insert_for
from appdb.models import Interaction, RunHeartbeat, UseCaseOutput, WorkItem
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
    return result.rowcount == 1


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
