"""Pauses: the circuit breaker's state. A paused use case gets no runs until its resume time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from appdb.dialects import insert_for
from appdb.events import record_event
from appdb.models import UseCasePause, utcnow
from appdb.redaction import redact
from appdb.retry_policy import DEFAULT_RETRY_POLICY, RetryPolicy


@dataclass(frozen=True)
class Pause:
    """A use case the sensor requests no runs for until `resume_at`."""

    use_case: str
    reason: str
    paused_at: datetime
    resume_at: datetime
    consecutive_trips: int


def pause_use_cases(
    session: Session,
    use_cases: Sequence[str],
    reason: str,
    *,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> datetime:
    """Pause these use cases after their backend failed; returns the latest resume time set.

    A use case that trips again soon after its last pause ended (within the policy's
    `pause_max_seconds`, and no `clear_pause` since) doubles the pause, up to that maximum. A trip while the
    pause is still running (a concurrent run hitting the same outage) keeps that pause
    and only updates the reason.
    """
    now = utcnow()
    reason = redact(reason)  # shown by `pipeline pauses`, `status`, `events` and kept in the events table
    insert = insert_for(session)
    latest = now
    for name in sorted(set(use_cases)):
        # A placeholder row that is neither active nor tripped, so the logic below is one UPDATE.
        session.execute(
            insert(UseCasePause)
            .values(use_case=name, reason=reason, paused_at=now, resume_at=now, consecutive_trips=0)
            .on_conflict_do_nothing()
        )
        previous = session.execute(
            select(UseCasePause.paused_at, UseCasePause.resume_at, UseCasePause.consecutive_trips)
            .where(UseCasePause.use_case == name)
            .with_for_update()
        ).one()
        if previous.resume_at > now:  # still paused: another run hit the same outage
            trips, paused_at, resume_at = previous.consecutive_trips, previous.paused_at, previous.resume_at
        else:
            recently = previous.resume_at + timedelta(seconds=policy.pause_max_seconds) >= now
            trips = previous.consecutive_trips + 1 if recently else 1
            paused_at = now
            resume_at = now + timedelta(seconds=policy.pause_seconds(trips))
        session.execute(
            update(UseCasePause)
            .where(UseCasePause.use_case == name)
            .values(reason=reason, paused_at=paused_at, resume_at=resume_at, consecutive_trips=trips)
            .execution_options(synchronize_session=False)
        )
        latest = max(latest, resume_at)
        record_event(
            session,
            "pause",
            use_case=name,
            reason=reason,
            detail={"resume_at": f"{resume_at:%Y-%m-%d %H:%M:%S}"},
        )
    return latest


OUTAGE = " backend unavailable: "


def outage_reason(backend: str, detail: object) -> str:
    """A pause's reason when a backend failed: it names the backend, so a pause set by one backend does
    not hold a use case another one now serves (`end_pauses_of_other_backends`)."""
    return f"{backend}{OUTAGE}{detail}"


def end_pauses_of_other_backends(session: Session, backends: Mapping[str, str]) -> list[str]:
    """End the active pauses that another backend's outage set on these use cases (use case -> the
    backend serving it now): the embedded backend missing says nothing of the Ollama server the
    configuration names since. The use cases resumed."""
    ended = [
        pause.use_case
        for pause in active_pauses(session).values()
        if pause.use_case in backends
        and OUTAGE in pause.reason
        and pause.reason.split(OUTAGE, 1)[0] != backends[pause.use_case]
    ]
    if ended:
        resume_use_cases(session, ended, reason="its backend changed since the pause")
    return ended


def active_pauses(session: Session, now: datetime | None = None) -> dict[str, Pause]:
    """Use cases paused right now (resume time still ahead), by name."""
    now = now or utcnow()
    rows = session.scalars(
        select(UseCasePause).where(UseCasePause.resume_at > now).order_by(UseCasePause.use_case)
    )
    return {
        row.use_case: Pause(row.use_case, row.reason, row.paused_at, row.resume_at, row.consecutive_trips)
        for row in rows
    }


def resume_use_cases(
    session: Session, use_cases: Sequence[str] | None = None, reason: str = "resumed by hand"
) -> int:
    """End active pauses now (all, or these use cases); returns how many were paused."""
    active = UseCasePause.resume_at > utcnow()
    if use_cases is not None:
        active = active & UseCasePause.use_case.in_(list(use_cases))
    names = list(session.scalars(select(UseCasePause.use_case).where(active)))
    for name in names:
        record_event(session, "resume", use_case=name, reason=reason)
    statement = delete(UseCasePause).where(active)
    return session.execute(statement.execution_options(synchronize_session=False)).rowcount


def clear_pause(session: Session, use_case: str) -> bool:
    """Forget the pause and its trip count (the backend served this use case again); True if there was one."""
    result = session.execute(
        delete(UseCasePause)
        .where(UseCasePause.use_case == use_case)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount > 0:
        record_event(
            session, "resume", use_case=use_case, reason="the backend served again (trip count reset)"
        )
    return result.rowcount > 0
