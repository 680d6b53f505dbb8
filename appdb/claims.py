"""Claims: who holds an item, how often it failed, when it may be tried again.

Lifecycle of a work item::

    (no row) --claim--> claimed --complete--> done
                          |  \\--fail (attempts < max)--> pending (next_attempt_at = backoff)
                          |   \\-fail (attempts = max)--> failed (parked, no longer discovered)
                          |                                  \\--requeue_failed (pipeline retry)--> pending
                          \\--release (outage) / lease expires--> pending (no attempt spent)

Claims are atomic: on PostgreSQL the claimable rows are picked with `FOR UPDATE SKIP LOCKED`; on
SQLite a conditional UPDATE runs under the database's write lock. Both return exactly the keys this
run now holds. How many attempts, how long the backoff and the lease: `appdb.retry_policy`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, or_, select, true, tuple_, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.orm import Session

from appdb.clock import database_now
from appdb.dialects import CHUNK, insert_for, is_postgres, rows_by_columns
from appdb.discovery import WorkSpec, pending_work_query
from appdb.heartbeats import held_by_live_run, step_process_alive
from appdb.models import UseCaseOutput, WorkItem, utcnow
from appdb.redaction import redact
from appdb.retry_policy import DEFAULT_RETRY_POLICY, RetryPolicy


def claim_items(
    session: Session,
    use_case: str,
    keys: Sequence[str],
    run_id: str,
    *,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    include_parked: bool = False,
    spec: WorkSpec | None = None,
) -> list[str]:
    """Claim the given items for `run_id`; returns the keys now held (others are held elsewhere).

    With `spec`, discovery is asked again as the claim is taken, so an item another run
    finished since this run's discovery is not claimed (and generated) a second time.
    A claim passes from another run only once that run is declared dead (`heartbeats.held_by_live_run`;
    a holder without a heartbeat, of an older version, once its lease ran out). Leases and backoffs are
    on the database's clock (`appdb.clock`). Commit right after, so other runs see the claim.
    """
    if not keys:
        return []
    now = utcnow()
    rows = [
        {
            "use_case": use_case,
            "subject_key": key,
            "status": "pending",
            "attempts": 0,
            "created_at": now,
            "updated_at": now,
        }
        for key in keys
    ]
    # rows given to execute (an executemany, sent as multi-row statements by the driver), not in the
    # statement: an INSERT of 250 VALUES tuples was compiled anew at every claim
    session.execute(insert_for(session)(WorkItem).on_conflict_do_nothing(), rows)

    def still_pending(discovery: WorkSpec, candidates: Sequence[str]) -> Select:
        query = pending_work_query(discovery, include_current=include_parked)
        return query.where(discovery.subjects.model.key.in_(list(candidates)))

    held: list[str] = []
    for start in range(0, len(keys), CHUNK):
        chunk = list(keys[start : start + CHUNK])
        claimable = and_(
            WorkItem.use_case == use_case,
            WorkItem.subject_key.in_(chunk),
            or_(
                WorkItem.status != "claimed",
                and_(WorkItem.lease_expires_at < database_now(), ~held_by_live_run(WorkItem.claimed_by)),
            ),
        )
        if not include_parked:
            claimable = and_(
                claimable,
                WorkItem.status != "failed",
                or_(WorkItem.next_attempt_at.is_(None), WorkItem.next_attempt_at <= database_now()),
            )
        if is_postgres(session) and spec is not None:
            # Lock first, then ask discovery in a new statement: it sees every run that finished one of
            # these items before the lock was ours (within one statement it would use an older snapshot).
            locked = session.scalars(
                select(WorkItem.subject_key).where(claimable).with_for_update(skip_locked=True)
            ).all()
            condition = and_(
                WorkItem.use_case == use_case, WorkItem.subject_key.in_(still_pending(spec, locked))
            )
        elif is_postgres(session):
            picked = (
                select(WorkItem.use_case, WorkItem.subject_key)
                .where(claimable)
                .with_for_update(skip_locked=True)
            )
            condition = tuple_(WorkItem.use_case, WorkItem.subject_key).in_(picked)
        elif spec is not None:  # SQLite: the insert above took the write lock, so this sees the latest state
            condition = and_(claimable, WorkItem.subject_key.in_(still_pending(spec, chunk)))
        else:
            condition = claimable
        statement = (
            update(WorkItem)
            .where(condition)
            .values(
                status="claimed",
                claimed_by=run_id,
                lease_expires_at=database_now(policy.lease_seconds),
                updated_at=now,
            )
            .returning(WorkItem.subject_key)
            .execution_options(synchronize_session=False)
        )
        held.extend(session.scalars(statement))
    order = {key: index for index, key in enumerate(keys)}
    return sorted(held, key=order.__getitem__)


def _held_by(use_case: str, key: str, run_id: str) -> ColumnElement[bool]:
    return and_(
        WorkItem.use_case == use_case,
        WorkItem.subject_key == key,
        WorkItem.status == "claimed",
        WorkItem.claimed_by == run_id,
    )


def _step_fence(use_case: str, run_id: str, step_process: str | None) -> ColumnElement[bool]:
    """A step executing away from its run's process holds the run's claims only while its own row is
    alive (`heartbeats.step_process_alive`): the step delivered again in the same run claims under the
    same run id, and the lost process must then call and store nothing."""
    return true() if step_process is None else step_process_alive(run_id, use_case, step_process)


def still_held(
    session: Session, use_case: str, key: str, run_id: str, *, step_process: str | None = None
) -> bool:
    """Whether `run_id` still holds the claim on `key`: asked before each model call, so a run declared
    dead (its claims given to another) calls the model for none of them, not only stores none.
    `step_process`: the instance id of a step's process away from its run (`_step_fence`)."""
    condition = and_(_held_by(use_case, key, run_id), _step_fence(use_case, run_id, step_process))
    return session.scalar(select(WorkItem.subject_key).where(condition)) is not None


def complete_item(
    session: Session,
    use_case: str,
    key: str,
    run_id: str,
    output: dict[str, Any],
    *,
    step_process: str | None = None,
) -> bool:
    """Store the output, but only while `run_id` still holds the claim; returns whether it did."""
    return key in complete_items(session, use_case, run_id, {key: output}, step_process=step_process)


def complete_items(
    session: Session,
    use_case: str,
    run_id: str,
    outputs: Mapping[str, dict[str, Any]],
    *,
    step_process: str | None = None,
) -> set[str]:
    """Store each subject's output while `run_id` still holds its claim; the keys it stored.

    A statement for the claims and one for the outputs per few hundred subjects, not two per subject:
    a run stores a group of answers in one transaction, and per-subject statements were most of a
    script use case's CPU (a py-spy profile of skill resolution at 10,000 postings)."""
    now = utcnow()
    keys, held = list(outputs), set()
    for start in range(0, len(keys), CHUNK):
        held.update(
            session.scalars(
                update(WorkItem)
                .where(
                    WorkItem.use_case == use_case,
                    WorkItem.subject_key.in_(keys[start : start + CHUNK]),
                    WorkItem.status == "claimed",
                    WorkItem.claimed_by == run_id,
                    _step_fence(use_case, run_id, step_process),
                )
                .values(
                    status="done",
                    attempts=0,
                    claimed_by=None,
                    lease_expires_at=None,
                    next_attempt_at=None,
                    last_error=None,
                    updated_at=now,
                )
                .returning(WorkItem.subject_key)
                .execution_options(synchronize_session=False)
            )
        )
    rows = [
        {
            "use_case": use_case,
            "subject_key": key,
            "run_id": run_id,
            "created_at": now,
            "updated_at": now,
            **output,
        }
        for key, output in outputs.items()
        if key in held
    ]
    dialect = session.get_bind().dialect.name
    for columns, same in rows_by_columns(rows).items():
        session.execute(_output_upsert(dialect, columns), same)
    return held


@functools.lru_cache(maxsize=32)
def _output_upsert(dialect: str, columns: tuple[str, ...]) -> Any:
    """The outputs upsert for these columns, built once (building it per subject cost more than it ran)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql  # only on PostgreSQL (see appdb.dialects.insert_for)

        insert = postgresql.insert(UseCaseOutput.__table__)
    else:
        insert = sqlite.insert(UseCaseOutput.__table__)
    changing = {
        name: insert.excluded[name]
        for name in columns
        if name not in ("use_case", "subject_key", "created_at")
    }
    return insert.on_conflict_do_update(index_elements=["use_case", "subject_key"], set_=changing)


def fail_item(
    session: Session,
    use_case: str,
    key: str,
    run_id: str,
    error: str,
    *,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> str | None:
    """Count a failed attempt; park the item as `failed` after the policy's `max_attempts`.

    Returns the new status, or None if this run no longer held the claim.
    """
    attempts = session.scalar(
        select(WorkItem.attempts).where(_held_by(use_case, key, run_id)).with_for_update()
    )
    if attempts is None:
        return None
    attempts += 1
    parked = attempts >= policy.max_attempts
    status = "failed" if parked else "pending"
    result = session.execute(
        update(WorkItem)
        .where(_held_by(use_case, key, run_id))  # only while the claim is still ours
        .values(
            attempts=attempts,
            last_error=redact(error),
            status=status,
            claimed_by=None,
            lease_expires_at=None,
            next_attempt_at=None if parked else database_now(policy.backoff_seconds(attempts)),
            updated_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    return status if result.rowcount == 1 else None


def renew_claims(
    session: Session,
    use_case: str,
    keys: Sequence[str],
    run_id: str,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> int:
    """Extend the lease on the items this run still holds (a long batch must not lose them)."""
    return _update_held(session, use_case, keys, run_id, lease_expires_at=database_now(policy.lease_seconds))


def _given_back() -> dict[str, Any]:
    """The values of a claim given back: pending again, held by no one, no attempt spent."""
    return {"status": "pending", "claimed_by": None, "lease_expires_at": None, "updated_at": utcnow()}


def release_items(session: Session, use_case: str, keys: Sequence[str], run_id: str) -> int:
    """Give claims back without spending an attempt (the backend was down, not the item bad)."""
    return _update_held(session, use_case, keys, run_id, **_given_back())


def release_claims_of_runs(session: Session, run_ids: Sequence[str]) -> int:
    """Give back every claim these (dead) runs hold, in any use case, without spending an attempt."""
    if not run_ids:
        return 0
    result = session.execute(
        update(WorkItem)
        .where(WorkItem.status == "claimed", WorkItem.claimed_by.in_(list(run_ids)))
        .values(**_given_back())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount


def _update_held(session: Session, use_case: str, keys: Sequence[str], run_id: str, **values: Any) -> int:
    """Update those of `keys` that `run_id` still holds; returns how many it held."""
    changed = 0
    for start in range(0, len(keys), CHUNK):
        chunk = list(keys[start : start + CHUNK])
        result = session.execute(
            update(WorkItem)
            .where(
                WorkItem.use_case == use_case,
                WorkItem.subject_key.in_(chunk),
                WorkItem.status == "claimed",
                WorkItem.claimed_by == run_id,
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        changed += result.rowcount
    return changed


def expired_claim_holders(session: Session) -> list[str]:
    """The runs holding claims whose lease ran out: a live run renews its lease, so these died."""
    return list(
        session.scalars(
            select(WorkItem.claimed_by)
            .where(WorkItem.status == "claimed", WorkItem.lease_expires_at < database_now())
            .distinct()
        )
    )


def release_expired_claims(session: Session, keep: Sequence[str] = ()) -> int:
    """Free claims whose lease ran out (their run died), but those of the runs in `keep` (known alive
    by their heartbeat: one model call can outlast a lease); returns how many were freed."""
    values = _given_back()
    query = update(WorkItem).where(WorkItem.status == "claimed", WorkItem.lease_expires_at < database_now())
    if keep:
        query = query.where(WorkItem.claimed_by.not_in(list(keep)))
    result = session.execute(query.values(**values).execution_options(synchronize_session=False))
    return result.rowcount


@dataclass(frozen=True)
class ParkedItem:
    """An item parked as failed after `max_attempts`, with what went wrong the last time."""

    use_case: str
    subject_key: str
    attempts: int
    last_error: str | None
    failed_at: datetime


def list_failures(session: Session, use_case: str | None = None) -> list[ParkedItem]:
    """Parked items (status `failed`), oldest failure first; discovery no longer offers them."""
    query = (
        select(
            WorkItem.use_case,
            WorkItem.subject_key,
            WorkItem.attempts,
            WorkItem.last_error,
            WorkItem.updated_at,
        )
        .where(WorkItem.status == "failed")
        .order_by(WorkItem.updated_at, WorkItem.use_case, WorkItem.subject_key)
    )
    if use_case is not None:
        query = query.where(WorkItem.use_case == use_case)
    return [ParkedItem(*row) for row in session.execute(query)]


def requeue_failed(
    session: Session, *, use_case: str | None = None, subject_keys: Sequence[str] | None = None
) -> int:
    """Give parked items a fresh set of attempts; returns how many were re-queued.

    With neither filter, every parked item; `use_case` and `subject_keys` narrow it down
    (both together: those subjects of that use case). `last_error` stays for history.
    """
    if subject_keys is not None and not subject_keys:
        return 0
    chunks = (
        [list(subject_keys[start : start + CHUNK]) for start in range(0, len(subject_keys), CHUNK)]
        if subject_keys is not None
        else [None]
    )
    now = utcnow()
    requeued = 0
    for chunk in chunks:
        statement = update(WorkItem).where(WorkItem.status == "failed")
        if use_case is not None:
            statement = statement.where(WorkItem.use_case == use_case)
        if chunk is not None:
            statement = statement.where(WorkItem.subject_key.in_(chunk))
        result = session.execute(
            statement.values(
                status="pending", attempts=0, next_attempt_at=None, updated_at=now
            ).execution_options(synchronize_session=False)
        )
        requeued += result.rowcount
    return requeued


def earlier_failures(session: Session, use_case: str, keys: Sequence[str]) -> dict[str, tuple[int, str]]:
    """(attempts spent, last error) of those of `keys` that failed before: a retry should not repeat it."""
    found: dict[str, tuple[int, str]] = {}
    for start in range(0, len(keys), CHUNK):
        rows = session.execute(
            select(WorkItem.subject_key, WorkItem.attempts, WorkItem.last_error).where(
                WorkItem.use_case == use_case,
                WorkItem.subject_key.in_(list(keys[start : start + CHUNK])),
                WorkItem.attempts > 0,
                WorkItem.last_error.is_not(None),
            )
        )
        found.update((key, (attempts, error)) for key, attempts, error in rows)
    return found
