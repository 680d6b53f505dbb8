"""All work-state SQL in one place: discovery, claims, completion, failure.

The pull model: nothing is queued. `find_pending_work` asks, for one use case, which
postings lack a current output. `work_items` only remembers what happened to an item
(who holds it, how often it failed, when it may be tried again).

Lifecycle of a work item::

    (no row) --claim--> claimed --complete--> done
                          |  \\--fail (attempts < max)--> pending (next_attempt_at = backoff)
                          |   \\-fail (attempts = max)--> failed (parked, no longer discovered)
                          |                                  \\--requeue_failed (pipeline retry)--> pending
                          \\--release (outage) / lease expires--> pending (no attempt spent)

Claims are atomic: on PostgreSQL the claimable rows are picked with
`FOR UPDATE SKIP LOCKED`; on SQLite a conditional UPDATE runs under the database's
write lock. Both return exactly the keys this run now holds.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, delete, func, insert, or_, select, text, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from appdb.models import Interaction, Posting, ReferenceData, UseCaseOutput, UseCasePause, WorkItem, utcnow

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
    reference_inputs: tuple[str, ...] = ()
    model: str | None = None  # outputs made by another model are stale (None: any model)
    upstream_models: Mapping[str, str] = field(default_factory=dict)
    upstream_specs: Mapping[str, WorkSpec] = field(default_factory=dict)  # to check upstreams' own inputs


def _insert_for(session: Session):  # noqa: ANN202 - dialect-specific Insert constructor
    return postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


# --- discovery ---------------------------------------------------------------------------------


def pending_work_query(spec: WorkSpec, *, now: Any = None, include_current: bool = False) -> Select:
    """Postings of this use case that lack a current output and are not held, parked or backing off.

    Current means: made by this version (and model) from this posting content, and no
    older than each upstream output it read. A posting whose upstream outputs are missing or stale
    waits for them; an upstream output older than its own inputs (`upstream_specs`) is
    stale too, so a fan-in synthesizer never runs on an expert about to be redone.
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
    if spec.model is not None:
        stale.append(own.model != spec.model)
    for name, version in sorted(spec.upstream_versions.items()):
        upstream = aliased(UseCaseOutput, name=f"upstream_{name}")
        query = query.join(
            upstream,
            and_(
                upstream.use_case == name,
                upstream.posting_key == Posting.key,
                upstream.use_case_version == version,
                upstream.posting_hash == Posting.content_hash,
                *([upstream.model == spec.upstream_models[name]] if name in spec.upstream_models else []),
            ),
        )
        query = _join_inputs_current(query, upstream, spec.upstream_specs.get(name), f"upstream_{name}")
        stale.append(own.updated_at < upstream.updated_at)
    for name in spec.reference_inputs:  # e.g. the taxonomy: none loaded yet means wait for it
        reference = aliased(ReferenceData, name=f"reference_{name}")
        query = query.join(reference, reference.name == name)
        stale.append(own.updated_at < reference.updated_at)
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


def _join_inputs_current(query: Select, output: Any, spec: WorkSpec | None, prefix: str) -> Select:
    """Keep only postings where `output` is no older than the current outputs it was made from."""
    if spec is None:
        return query
    for name, version in sorted(spec.upstream_versions.items()):
        source = aliased(UseCaseOutput, name=f"{prefix}__{name}")
        query = query.join(
            source,
            and_(
                source.use_case == name,
                source.posting_key == Posting.key,
                source.use_case_version == version,
                source.posting_hash == Posting.content_hash,
                source.updated_at <= output.updated_at,
            ),
        )
        query = _join_inputs_current(query, source, spec.upstream_specs.get(name), f"{prefix}__{name}")
    for name in spec.reference_inputs:
        reference = aliased(ReferenceData, name=f"{prefix}__reference_{name}")
        query = query.join(reference, and_(reference.name == name, reference.updated_at <= output.updated_at))
    return query


def find_pending_work(
    session: Session, spec: WorkSpec, *, within: Sequence[str] | None = None, include_current: bool = False
) -> list[str]:
    """Keys of the postings this use case should process now, oldest posting first."""
    if within is None:
        return _keys_joining_as_written(session, pending_work_query(spec, include_current=include_current))
    found: set[str] = set()
    for start in range(0, len(within), _CHUNK):
        chunk = list(within[start : start + _CHUNK])
        query = pending_work_query(spec, include_current=include_current).where(Posting.key.in_(chunk))
        found.update(_keys_joining_as_written(session, query))
    return [key for key in within if key in found]


def _keys_joining_as_written(session: Session, query: Select) -> list[str]:
    """Run a discovery query with PostgreSQL joining in the order written: postings first.

    PostgreSQL's planner takes a posting's key and its content hash as independent, so it
    estimates an upstream join at 1 row where there are 90,000, puts that join first and probes
    two indexes per row: 0.5-1.0 s at 100,000 postings (the slow end on freshly written tables).
    Joined in the written order every estimate starts from the postings and it hashes: 0.23 s.
    (`SET LOCAL`: only for this statement's transaction, and set back right after.)
    """
    if not _is_postgres(session):
        return list(session.scalars(query))
    session.execute(text("SET LOCAL join_collapse_limit = 1"))
    keys = list(session.scalars(query))
    session.execute(text("SET LOCAL join_collapse_limit TO DEFAULT"))
    return keys


def change_marker(session: Session) -> str:
    """A cheap fingerprint of everything discovery reads; equal markers mean nothing changed.

    It includes the next retry, lease expiry or pause end still ahead, so the marker
    also changes when a waiting item or a paused use case comes due.
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
            select(func.max(ReferenceData.updated_at)).scalar_subquery(),
            select(func.count(UseCasePause.use_case)).scalar_subquery(),
            select(func.max(UseCasePause.paused_at)).scalar_subquery(),
            select(func.min(UseCasePause.resume_at)).where(UseCasePause.resume_at > now).scalar_subquery(),
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
    spec: WorkSpec | None = None,
) -> list[str]:
    """Claim the given items for `run_id`; returns the keys now held (others are held elsewhere).

    With `spec`, discovery is asked again as the claim is taken, so an item another run
    finished since this run's discovery is not claimed (and generated) a second time.
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

    def still_pending(discovery: WorkSpec, candidates: Sequence[str]) -> Select:
        query = pending_work_query(discovery, now=now, include_current=include_parked)
        return query.where(Posting.key.in_(list(candidates)))

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
        if _is_postgres(session) and spec is not None:
            # Lock first, then ask discovery in a new statement: it sees every run that finished one of
            # these items before the lock was ours (within one statement it would use an older snapshot).
            locked = session.scalars(
                select(WorkItem.posting_key).where(claimable).with_for_update(skip_locked=True)
            ).all()
            condition = and_(
                WorkItem.use_case == use_case, WorkItem.posting_key.in_(still_pending(spec, locked))
            )
        elif _is_postgres(session):
            picked = (
                select(WorkItem.use_case, WorkItem.posting_key)
                .where(claimable)
                .with_for_update(skip_locked=True)
            )
            condition = tuple_(WorkItem.use_case, WorkItem.posting_key).in_(picked)
        elif spec is not None:  # SQLite: the insert above took the write lock, so this sees the latest state
            condition = and_(claimable, WorkItem.posting_key.in_(still_pending(spec, chunk)))
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
    session.execute(_output_upsert(session.get_bind().dialect.name, tuple(values)), values)
    return True


@functools.lru_cache(maxsize=32)
def _output_upsert(dialect: str, columns: tuple[str, ...]) -> Any:
    """The outputs upsert for these columns, built once (building it per posting cost more than it ran)."""
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(UseCaseOutput.__table__)
    changing = {
        name: insert.excluded[name]
        for name in columns
        if name not in ("use_case", "posting_key", "created_at")
    }
    return insert.on_conflict_do_update(index_elements=["use_case", "posting_key"], set_=changing)


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


def expired_claim_holders(session: Session) -> list[str]:
    """The runs holding claims whose lease ran out: a live run renews its lease, so these died."""
    return list(
        session.scalars(
            select(WorkItem.claimed_by)
            .where(WorkItem.status == "claimed", WorkItem.lease_expires_at < utcnow())
            .distinct()
        )
    )


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
    """Store one LLM call exactly as sent and answered; returns its id.

    Characters no text column can hold (NUL on PostgreSQL, unpaired surrogates anywhere) are
    stored as U+FFFD: an odd response is recorded as an item's outcome instead of crashing the run.
    """
    import re

    unstorable = re.compile("[\x00\ud800-\udfff]")
    fields = {
        name: unstorable.sub("\ufffd", value) if isinstance(value, str) else value
        for name, value in fields.items()
    }
    # A Core INSERT ... RETURNING: the ORM unit of work (object, flush) cost more than the insert itself.
    table = Interaction.__table__
    return session.execute(insert(table).returning(table.c.id), fields).scalar_one()


# --- failures (parked items) -------------------------------------------------------------------


@dataclass(frozen=True)
class ParkedItem:
    """An item parked as failed after `max_attempts`, with what went wrong the last time."""

    use_case: str
    posting_key: str
    title: str | None
    attempts: int
    last_error: str | None
    failed_at: datetime


def list_failures(session: Session, use_case: str | None = None) -> list[ParkedItem]:
    """Parked items (status `failed`), oldest failure first; discovery no longer offers them."""
    query = (
        select(
            WorkItem.use_case,
            WorkItem.posting_key,
            Posting.title,
            WorkItem.attempts,
            WorkItem.last_error,
            WorkItem.updated_at,
        )
        .outerjoin(Posting, Posting.key == WorkItem.posting_key)
        .where(WorkItem.status == "failed")
        .order_by(WorkItem.updated_at, WorkItem.use_case, WorkItem.posting_key)
    )
    if use_case is not None:
        query = query.where(WorkItem.use_case == use_case)
    return [ParkedItem(*row) for row in session.execute(query)]


def requeue_failed(
    session: Session, *, use_case: str | None = None, posting_keys: Sequence[str] | None = None
) -> int:
    """Give parked items a fresh set of attempts; returns how many were re-queued.

    With neither filter, every parked item; `use_case` and `posting_keys` narrow it down
    (both together: those postings of that use case). `last_error` stays for history.
    """
    if posting_keys is not None and not posting_keys:
        return 0
    chunks = (
        [list(posting_keys[start : start + _CHUNK]) for start in range(0, len(posting_keys), _CHUNK)]
        if posting_keys is not None
        else [None]
    )
    now = utcnow()
    requeued = 0
    for chunk in chunks:
        statement = update(WorkItem).where(WorkItem.status == "failed")
        if use_case is not None:
            statement = statement.where(WorkItem.use_case == use_case)
        if chunk is not None:
            statement = statement.where(WorkItem.posting_key.in_(chunk))
        result = session.execute(
            statement.values(
                status="pending", attempts=0, next_attempt_at=None, updated_at=now
            ).execution_options(synchronize_session=False)
        )
        requeued += result.rowcount
    return requeued


# --- pauses (the circuit breaker's state) ------------------------------------------------------

PAUSE_BASE_SECONDS = 300
PAUSE_MAX_SECONDS = 3600


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
    base_seconds: int = PAUSE_BASE_SECONDS,
    max_seconds: int = PAUSE_MAX_SECONDS,
) -> datetime:
    """Pause these use cases after their backend failed; returns the latest resume time set.

    A use case that trips again soon after its last pause ended (within `max_seconds`,
    and no `clear_pause` since) doubles the pause, up to `max_seconds`. A trip while the
    pause is still running (a concurrent run hitting the same outage) keeps that pause
    and only updates the reason.
    """
    now = utcnow()
    insert = _insert_for(session)
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
            recently = previous.resume_at + timedelta(seconds=max_seconds) >= now
            trips = previous.consecutive_trips + 1 if recently else 1
            paused_at = now
            resume_at = now + timedelta(seconds=min(max_seconds, base_seconds * 2 ** (trips - 1)))
        session.execute(
            update(UseCasePause)
            .where(UseCasePause.use_case == name)
            .values(reason=reason, paused_at=paused_at, resume_at=resume_at, consecutive_trips=trips)
            .execution_options(synchronize_session=False)
        )
        latest = max(latest, resume_at)
    return latest


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


def resume_use_cases(session: Session, use_cases: Sequence[str] | None = None) -> int:
    """End active pauses now (all, or these use cases); returns how many were paused."""
    statement = delete(UseCasePause).where(UseCasePause.resume_at > utcnow())
    if use_cases is not None:
        statement = statement.where(UseCasePause.use_case.in_(list(use_cases)))
    return session.execute(statement.execution_options(synchronize_session=False)).rowcount


def clear_pause(session: Session, use_case: str) -> bool:
    """Forget the pause and its trip count (the backend served this use case again); True if there was one."""
    result = session.execute(
        delete(UseCasePause)
        .where(UseCasePause.use_case == use_case)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount > 0
