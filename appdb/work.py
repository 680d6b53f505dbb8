"""All work-state SQL in one place: discovery, claims, completion, failure.

The pull model: nothing is queued. `find_pending_work` asks, for one use case, which
postings lack a current output. `work_items` only remembers what happened to an item
(who holds it, how often it failed, when it may be tried again).

Lifecycle of a work item::

    (no row) --claim--> claimed --complete--> done
                          |  \\--fail (attempts < max)--> pending (next_attempt_at = backoff)
                          |   \\-fail (attempts = max)--> failed (parked, no longer discovered)
                          \\--release (outage) / lease expires--> pending (no attempt spent)

Claims are atomic: on PostgreSQL the claimable rows are picked with
`FOR UPDATE SKIP LOCKED`; on SQLite a conditional UPDATE runs under the database's
write lock. Both return exactly the keys this run now holds.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, text, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from appdb.models import Interaction, Posting, UseCaseOutput, WorkItem, utcnow

DEFAULT_LEASE_SECONDS = 600
DEFAULT_MAX_ATTEMPTS = 3
BACKOFF_BASE_SECONDS = 30
BACKOFF_MAX_SECONDS = 3600
_CHUNK = 500


@dataclass(frozen=True)
class WorkSpec:
    """What discovery needs to know about a use case (kept free of Dagster and declarations)."""

    use_case: str
    version: str
    upstream_versions: Mapping[str, str]
    discovery_where: str | None = None


def _insert_for(session: Session):  # noqa: ANN202 - dialect-specific Insert constructor
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


# --- discovery ---------------------------------------------------------------------------------


def pending_work_query(spec: WorkSpec, *, now: Any = None, include_current: bool = False) -> Select:
    """Postings of this use case that lack a current output and are not held, parked or backing off.

    Current means: made by this version from this posting content, and no newer than
    each upstream output it read. A posting whose upstream outputs are missing or stale
    waits for them.
    """
    now = now or utcnow()
    own = aliased(UseCaseOutput, name="own_output")
    work = aliased(WorkItem, name="work")
    query = (
        select(Posting.key)
        .outerjoin(own, and_(own.use_case == spec.use_case, own.posting_key == Posting.key))
        .outerjoin(work, and_(work.use_case == spec.use_case, work.posting_key == Posting.key))
    )
    stale: list[ColumnElement[bool]] = [
        own.posting_key.is_(None),
        own.use_case_version != spec.version,
        own.posting_hash != Posting.content_hash,
    ]
    for name, version in sorted(spec.upstream_versions.items()):
        upstream = aliased(UseCaseOutput, name=f"upstream_{name}")
        query = query.join(
            upstream,
            and_(
                upstream.use_case == name,
                upstream.posting_key == Posting.key,
                upstream.use_case_version == version,
                upstream.posting_hash == Posting.content_hash,
            ),
        )
        stale.append(own.updated_at < upstream.updated_at)
    not_held = or_(work.status != "claimed", work.lease_expires_at < now)
    if include_current:  # forced: everything not held by a live claim, parked and backing-off items too
        query = query.where(or_(work.posting_key.is_(None), not_held))
    else:
        query = query.where(or_(*stale)).where(
            or_(
                work.posting_key.is_(None),
                and_(
                    work.status != "failed",
                    not_held,
                    or_(work.next_attempt_at.is_(None), work.next_attempt_at <= now),
                ),
            )
        )
    if spec.discovery_where:
        query = query.where(text(f"({spec.discovery_where})"))
    return query.order_by(Posting.id)


def find_pending_work(
    session: Session, spec: WorkSpec, *, within: Sequence[str] | None = None, include_current: bool = False
) -> list[str]:
    """Keys of the postings this use case should process now, oldest posting first."""
    if within is None:
        return list(session.scalars(pending_work_query(spec, include_current=include_current)))
    found: set[str] = set()
    for start in range(0, len(within), _CHUNK):
        chunk = list(within[start : start + _CHUNK])
        query = pending_work_query(spec, include_current=include_current).where(Posting.key.in_(chunk))
        found.update(session.scalars(query))
    return [key for key in within if key in found]


def change_marker(session: Session) -> str:
    """A cheap fingerprint of everything discovery reads; equal markers mean nothing changed.

    It includes the next retry or lease expiry still ahead, so the marker also changes
    when a waiting item comes due.
    """
    now = utcnow()
    row = session.execute(
        select(
            select(func.count(Posting.id)).scalar_subquery(),
            select(func.max(Posting.updated_at)).scalar_subquery(),
            select(func.max(UseCaseOutput.updated_at)).scalar_subquery(),
            select(func.max(WorkItem.updated_at)).scalar_subquery(),
            select(func.min(WorkItem.next_attempt_at))
            .where(WorkItem.next_attempt_at > now)
            .scalar_subquery(),
            select(func.min(WorkItem.lease_expires_at))
            .where(WorkItem.lease_expires_at > now)
            .scalar_subquery(),
        )
    ).one()
    return "|".join(str(value) for value in row)


# --- claims ------------------------------------------------------------------------------------


def claim_items(
    session: Session,
    use_case: str,
    keys: Sequence[str],
    run_id: str,
    *,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    include_parked: bool = False,
) -> list[str]:
    """Claim the given items for `run_id`; returns the keys now held (others are held elsewhere).

    Commit right after, so other runs see the claim.
    """
    if not keys:
        return []
    now = utcnow()
    insert = _insert_for(session)
    for start in range(0, len(keys), _CHUNK):
        rows = [
            {
                "use_case": use_case,
                "posting_key": key,
                "status": "pending",
                "attempts": 0,
                "created_at": now,
                "updated_at": now,
            }
            for key in keys[start : start + _CHUNK]
        ]
        session.execute(insert(WorkItem).values(rows).on_conflict_do_nothing())
    held: list[str] = []
    for start in range(0, len(keys), _CHUNK):
        chunk = list(keys[start : start + _CHUNK])
        claimable = and_(
            WorkItem.use_case == use_case,
            WorkItem.posting_key.in_(chunk),
            or_(WorkItem.status != "claimed", WorkItem.lease_expires_at < now),
        )
        if not include_parked:
            claimable = and_(
                claimable,
                WorkItem.status != "failed",
                or_(WorkItem.next_attempt_at.is_(None), WorkItem.next_attempt_at <= now),
            )
        if _is_postgres(session):
            picked = (
                select(WorkItem.use_case, WorkItem.posting_key)
                .where(claimable)
                .with_for_update(skip_locked=True)
            )
            condition = tuple_(WorkItem.use_case, WorkItem.posting_key).in_(picked)
        else:
            condition = claimable
        statement = (
            update(WorkItem)
            .where(condition)
            .values(
                status="claimed",
                claimed_by=run_id,
                lease_expires_at=now + timedelta(seconds=lease_seconds),
                updated_at=now,
            )
            .returning(WorkItem.posting_key)
            .execution_options(synchronize_session=False)
        )
        held.extend(session.scalars(statement))
    order = {key: index for index, key in enumerate(keys)}
    return sorted(held, key=order.__getitem__)


def _held_by(use_case: str, key: str, run_id: str) -> ColumnElement[bool]:
    return and_(
        WorkItem.use_case == use_case,
        WorkItem.posting_key == key,
        WorkItem.status == "claimed",
        WorkItem.claimed_by == run_id,
    )


def complete_item(session: Session, use_case: str, key: str, run_id: str, output: dict[str, Any]) -> bool:
    """Store the output, but only while `run_id` still holds the claim; returns whether it did."""
    now = utcnow()
    marked = session.execute(
        update(WorkItem)
        .where(_held_by(use_case, key, run_id))
        .values(
            status="done",
            attempts=0,
            claimed_by=None,
            lease_expires_at=None,
            next_attempt_at=None,
            last_error=None,
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    if marked.rowcount != 1:
        return False
    values = {
        "use_case": use_case,
        "posting_key": key,
        "run_id": run_id,
        "created_at": now,
        "updated_at": now,
        **output,
    }
    insert = _insert_for(session)(UseCaseOutput).values(values)
    changing = {
        name: insert.excluded[name]
        for name in values
        if name not in ("use_case", "posting_key", "created_at")
    }
    session.execute(insert.on_conflict_do_update(index_elements=["use_case", "posting_key"], set_=changing))
    return True


def fail_item(
    session: Session,
    use_case: str,
    key: str,
    run_id: str,
    error: str,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> str | None:
    """Count a failed attempt; park the item as `failed` after `max_attempts`.

    Returns the new status, or None if this run no longer held the claim.
    """
    now = utcnow()
    attempts = session.scalar(
        select(WorkItem.attempts).where(_held_by(use_case, key, run_id)).with_for_update()
    )
    if attempts is None:
        return None
    attempts += 1
    parked = attempts >= max_attempts
    status = "failed" if parked else "pending"
    result = session.execute(
        update(WorkItem)
        .where(_held_by(use_case, key, run_id))  # only while the claim is still ours
        .values(
            attempts=attempts,
            last_error=error,
            status=status,
            claimed_by=None,
            lease_expires_at=None,
            next_attempt_at=None if parked else now + timedelta(seconds=backoff_seconds(attempts)),
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    return status if result.rowcount == 1 else None


def backoff_seconds(attempts: int) -> float:
    """Exponential backoff with full jitter between half and all of the step."""
    step = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempts - 1))
    return step * random.uniform(0.5, 1.0)


def renew_claims(
    session: Session,
    use_case: str,
    keys: Sequence[str],
    run_id: str,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
) -> int:
    """Extend the lease on the items this run still holds (a long batch must not lose them)."""
    return _update_held(
        session, use_case, keys, run_id, lease_expires_at=utcnow() + timedelta(seconds=lease_seconds)
    )


def release_items(session: Session, use_case: str, keys: Sequence[str], run_id: str) -> int:
    """Give claims back without spending an attempt (the backend was down, not the item bad)."""
    return _update_held(
        session,
        use_case,
        keys,
        run_id,
        status="pending",
        claimed_by=None,
        lease_expires_at=None,
        updated_at=utcnow(),
    )


def _update_held(session: Session, use_case: str, keys: Sequence[str], run_id: str, **values: Any) -> int:
    """Update those of `keys` that `run_id` still holds; returns how many it held."""
    changed = 0
    for start in range(0, len(keys), _CHUNK):
        chunk = list(keys[start : start + _CHUNK])
        result = session.execute(
            update(WorkItem)
            .where(
                WorkItem.use_case == use_case,
                WorkItem.posting_key.in_(chunk),
                WorkItem.status == "claimed",
                WorkItem.claimed_by == run_id,
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        changed += result.rowcount
    return changed


def release_expired_claims(session: Session) -> int:
    """Free claims whose lease ran out (their run died); returns how many were freed."""
    now = utcnow()
    result = session.execute(
        update(WorkItem)
        .where(WorkItem.status == "claimed", WorkItem.lease_expires_at < now)
        .values(status="pending", claimed_by=None, lease_expires_at=None, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount


def record_interaction(session: Session, **fields: Any) -> int:
    """Store one LLM call exactly as sent and answered; returns its id."""
    interaction = Interaction(**fields)
    session.add(interaction)
    session.flush()
    return interaction.id
