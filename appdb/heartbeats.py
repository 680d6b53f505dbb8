"""Run heartbeats: which runs are alive, which died, and whether work is moving at all.

A run that can hold the `llm` pool or claims writes a row before it waits on the pool and renews
`beat_at` every few seconds until it ends (`resources/run_heartbeat.py`). A claim lease says "this
item is taken" for up to ten minutes; a heartbeat says "this process is alive" within seconds, so a
dead run is found long before its leases run out, including a run that died while *waiting* for the
pool and held no claims at all. Reaping is `mark_dead` (one reaper wins) then `claims.release_claims_of_runs`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from appdb.dialects import CHUNK, insert_for
from appdb.models import Interaction, RunHeartbeat, UseCaseOutput, WorkItem, utcnow

DEAD_ROWS_KEPT_DAYS = 7  # reaped runs stay visible (`pipeline status`) this long


@dataclass(frozen=True)
class Heartbeat:
    """One run's last sign of life."""

    run_id: str
    job: str
    source: str | None
    host: str
    pid: int
    state: str
    started_at: datetime
    beat_at: datetime
    ended_reason: str | None

    def age_seconds(self, now: datetime | None = None) -> float:
        return ((now or utcnow()) - self.beat_at).total_seconds()


def _heartbeat(row: RunHeartbeat) -> Heartbeat:
    return Heartbeat(
        row.run_id,
        row.job,
        row.source,
        row.host,
        row.pid,
        row.state,
        row.started_at,
        row.beat_at,
        row.ended_reason,
    )


def start_heartbeat(
    session: Session, run_id: str, *, job: str, source: str | None, host: str, pid: int
) -> None:
    """The run's first beat (a run already reaped as dead stays dead)."""
    now = utcnow()
    session.execute(
        insert_for(session)(RunHeartbeat)
        .values(
            run_id=run_id,
            job=job,
            source=source,
            host=host[:255],
            pid=pid,
            state="alive",
            started_at=now,
            beat_at=now,
        )
        .on_conflict_do_nothing()
    )


def beat(session: Session, run_id: str) -> bool:
    """Renew the heartbeat; False when the run was declared dead meanwhile (or never started one)."""
    result = session.execute(
        update(RunHeartbeat)
        .where(RunHeartbeat.run_id == run_id, RunHeartbeat.state == "alive")
        .values(beat_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def end_heartbeat(session: Session, run_id: str) -> None:
    """The run ended in its own process: nothing to reap. The row stays (state `ended`), so a run with
    no row at all is one that never began to beat (`record_silent_death`)."""
    session.execute(
        update(RunHeartbeat)
        .where(RunHeartbeat.run_id == run_id, RunHeartbeat.state == "alive")
        .values(state="ended", beat_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def record_silent_death(session: Session, run_id: str, job: str, reason: str) -> bool:
    """A run that died before its first beat: recorded dead; True for the one caller that recorded it."""
    now = utcnow()
    result = session.execute(
        insert_for(session)(RunHeartbeat)
        .values(
            run_id=run_id,
            job=job,
            source=None,
            host="",
            pid=0,
            state="dead",
            started_at=now,
            beat_at=now,
            ended_reason=reason,
        )
        .on_conflict_do_nothing()
    )
    return result.rowcount == 1


def alive_heartbeats(session: Session) -> list[Heartbeat]:
    """Every run still called alive, the oldest beat first (the reaper decides which died)."""
    rows = session.scalars(
        select(RunHeartbeat).where(RunHeartbeat.state == "alive").order_by(RunHeartbeat.beat_at)
    )
    return [_heartbeat(row) for row in rows]


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
    query = select(RunHeartbeat).where(RunHeartbeat.state == "dead", RunHeartbeat.beat_at >= since)
    if jobs:
        query = query.where(RunHeartbeat.job.in_(list(jobs)))
    return [_heartbeat(row) for row in session.scalars(query.order_by(RunHeartbeat.beat_at.desc()).limit(3))]


def heartbeats_of(session: Session, run_ids: Collection[str] | None = None) -> dict[str, Heartbeat]:
    """The heartbeats of these runs (all, without `run_ids`), alive or reaped."""
    query = select(RunHeartbeat)
    if run_ids is not None:
        if not run_ids:
            return {}
        query = query.where(RunHeartbeat.run_id.in_(list(run_ids)[:CHUNK]))
    return {row.run_id: _heartbeat(row) for row in session.scalars(query)}


def prune_dead(session: Session, days: int = DEAD_ROWS_KEPT_DAYS) -> int:
    """Forget ended and reaped runs older than `days`."""
    cutoff = utcnow() - timedelta(days=days)
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
