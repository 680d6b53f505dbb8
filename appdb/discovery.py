"""Discovery: which subjects of a use case lack a current output (the pull model: nothing is queued).

`find_pending_work` asks, for one use case, which subjects lack a current output and are not held,
parked or backing off. `work_items` only remembers what happened to an item (see `appdb.claims`).
What "current" means is decided here once (`pending_work_query`'s conditions); `outdated_outputs` says
why an existing output is not current, for `pipeline reprocess --stale` and `pipeline trace`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, case, exists, func, or_, select, text
from sqlalchemy.orm import Session, aliased

from appdb import planner_statistics
from appdb.clock import database_now, now_on_database
from appdb.dialects import CHUNK, is_postgres
from appdb.heartbeats import held_by_live_run
from appdb.models import (
    Event,
    ReferenceData,
    RunHeartbeat,
    UseCaseOutput,
    UseCasePause,
    WorkItem,
)
from appdb.subject_tables import SubjectTable


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
    subjects: SubjectTable = field(kw_only=True)  # where the use case's subjects are stored

    @property
    def subject_kind(self) -> str:
        return self.subjects.kind


def pending_work_query(spec: WorkSpec, *, now: Any = None, include_current: bool = False) -> Select:
    """Subjects of this use case that lack a current output and are not held, parked or backing off.

    Current means: made by this version (and model) from this subject's content, and no
    older than each upstream output it read. A subject whose upstream outputs are missing or stale
    waits for them; an upstream output older than its own inputs (`upstream_specs`) is
    stale too, so a fan-in synthesizer never runs on an expert about to be redone.
    """
    if now is None:
        now = database_now()
    table = spec.subjects
    subjects = table.model
    own = aliased(UseCaseOutput, name="own_output")
    work = aliased(WorkItem, name="work")
    query = (
        select(subjects.key)
        .outerjoin(own, and_(own.use_case == spec.use_case, own.subject_key == subjects.key))
        .outerjoin(work, and_(work.use_case == spec.use_case, work.subject_key == subjects.key))
        .where(*table.of_kind())
    )
    query, stale = _with_stale_conditions(query, spec, own, subjects, inputs_ready=True)
    # held: claimed by a run with a live heartbeat, or (a holder without one) within the lease
    not_held = or_(
        work.status != "claimed", and_(work.lease_expires_at < now, ~held_by_live_run(work.claimed_by))
    )
    if include_current:  # forced: everything not held by a live claim, parked and backing-off items too
        query = query.where(or_(work.subject_key.is_(None), not_held))
    else:
        query = query.where(or_(*stale)).where(
            or_(
                work.subject_key.is_(None),
                and_(
                    work.status != "failed",
                    not_held,
                    or_(work.next_attempt_at.is_(None), work.next_attempt_at <= now),
                ),
            )
        )
    if spec.discovery_where:
        # `subject.<column>` names the use case's own subject, a row of its kind's table (whose own name
        # works too: the outer row)
        subject = aliased(subjects, name="subject")
        query = query.where(exists().where(subject.id == subjects.id, text(f"({spec.discovery_where})")))
    return query.order_by(subjects.id)


def _with_stale_conditions(
    query: Select, spec: WorkSpec, own: Any, subjects: Any, *, inputs_ready: bool
) -> tuple[Select, list[ColumnElement[bool]]]:
    """The one staleness rule: the conditions under which the output `own` is not current (any one
    suffices), and the joins they need. An output is current when it exists, was made by this version
    (and model) from the subject's current content, and is no older than the current upstream outputs
    and reference data it read.

    `inputs_ready` (discovery): keep only subjects whose upstream outputs are current and whose reference
    data is loaded (inner joins), so work waits for its inputs; else (`outdated_outputs`) every subject,
    an upstream output or reference data that is missing making nothing stale (outer joins)."""
    join = query.join if inputs_ready else query.outerjoin
    stale: list[ColumnElement[bool]] = [
        own.subject_key.is_(None),
        own.use_case_version != spec.version,
        own.subject_hash != subjects.content_hash,
    ]
    if spec.model is not None:
        stale.append(own.model != spec.model)
    for name, version in sorted(spec.upstream_versions.items()):
        upstream = aliased(UseCaseOutput, name=f"upstream_{name}")
        query = join(
            upstream,
            and_(
                upstream.use_case == name,
                upstream.subject_key == subjects.key,
                upstream.use_case_version == version,
                upstream.subject_hash == subjects.content_hash,
                *([upstream.model == spec.upstream_models[name]] if name in spec.upstream_models else []),
            ),
        )
        if inputs_ready:
            query = _join_inputs_current(
                query, upstream, spec.upstream_specs.get(name), f"upstream_{name}", subjects
            )
        stale.append(own.updated_at < upstream.updated_at)
        join = query.join if inputs_ready else query.outerjoin
    for name in spec.reference_inputs:  # e.g. the taxonomy: none loaded yet means wait for it
        reference = aliased(ReferenceData, name=f"reference_{name}")
        query = (query.join if inputs_ready else query.outerjoin)(reference, reference.name == name)
        stale.append(own.updated_at < reference.updated_at)
    return query, stale


@dataclass(frozen=True)
class Outdated:
    """Why a stored output is not current: `reason` is version, model, content or input; `waiting`, when
    it cannot be redone now, why (`stale_outputs`; "" when a run may redo it now)."""

    reason: str
    made_by: str = ""  # the version or the model that made it
    waiting: str = ""

    def describe(self, noun: str) -> str:
        """In a few words, as `pipeline reprocess --stale` counts them."""
        return {
            "version": f"made by version {self.made_by}",
            "model": f"made by {self.made_by}",
            "content": f"the {noun} changed",
            "input": "an input it read changed (upstream output or reference data)",
        }[self.reason]


def outdated_outputs(
    session: Session, spec: WorkSpec, keys: Sequence[str] | None = None
) -> dict[str, Outdated]:
    """Why each stored output of this use case that is not current is not, by key (by the rule of
    `_with_stale_conditions`, which discovery applies); `keys` narrows the question. Current outputs
    and subjects without an output are not listed. Unlike discovery, claims, parking, backoff and
    upstream outputs still to be made do not matter here."""
    table = spec.subjects
    subjects = table.model
    own = aliased(UseCaseOutput, name="own_output")
    query = (
        select(subjects.key, own.use_case_version, own.model, own.subject_hash, subjects.content_hash)
        .join(own, and_(own.use_case == spec.use_case, own.subject_key == subjects.key))
        .where(*table.of_kind())
    )
    query, stale = _with_stale_conditions(query, spec, own, subjects, inputs_ready=False)
    query = query.where(or_(*stale[1:])).distinct()
    found: dict[str, Outdated] = {}
    chunks = [None] if keys is None else [list(keys[i : i + CHUNK]) for i in range(0, len(keys), CHUNK)]
    for chunk in chunks:
        rows = session.execute(query if chunk is None else query.where(subjects.key.in_(chunk)))
        for key, version, model, made_from, content_hash in rows:
            if version != spec.version:
                found[key] = Outdated("version", version)
            elif spec.model is not None and model != spec.model:
                found[key] = Outdated("model", model)
            elif made_from != content_hash:
                found[key] = Outdated("content")
            else:
                found[key] = Outdated("input")
    return found


def _join_inputs_current(
    query: Select, output: Any, spec: WorkSpec | None, prefix: str, subjects: Any
) -> Select:
    """Keep only subjects where `output` is no older than the current outputs it was made from."""
    if spec is None:
        return query
    for name, version in sorted(spec.upstream_versions.items()):
        source = aliased(UseCaseOutput, name=f"{prefix}__{name}")
        query = query.join(
            source,
            and_(
                source.use_case == name,
                source.subject_key == subjects.key,
                source.use_case_version == version,
                source.subject_hash == subjects.content_hash,
                source.updated_at <= output.updated_at,
            ),
        )
        query = _join_inputs_current(
            query, source, spec.upstream_specs.get(name), f"{prefix}__{name}", subjects
        )
    for name in spec.reference_inputs:
        reference = aliased(ReferenceData, name=f"{prefix}__reference_{name}")
        query = query.join(reference, and_(reference.name == name, reference.updated_at <= output.updated_at))
    return query


def stale_outputs(session: Session, spec: WorkSpec, keys: Sequence[str] | None = None) -> dict[str, Outdated]:
    """The one answer to "is this output stale?" for `pipeline trace` and `pipeline reprocess --stale`:
    every output `outdated_outputs` finds, each with why a run cannot redo it now, if it cannot
    (parked, backing off, held by a run, or waiting for an upstream output to be redone first)."""
    outdated = outdated_outputs(session, spec, keys)
    if not outdated:
        return outdated
    now = now_on_database(session)  # leases and backoffs are written on the database's clock
    redoable = set(find_pending_work(session, spec, within=list(outdated)))
    waiting = [key for key in outdated if key not in redoable]
    items = {}
    for start in range(0, len(waiting), CHUNK):
        chunk = waiting[start : start + CHUNK]
        query = select(WorkItem).where(WorkItem.use_case == spec.use_case, WorkItem.subject_key.in_(chunk))
        items.update({item.subject_key: item for item in session.scalars(query)})
    found = {}
    for key, why in outdated.items():
        item = items.get(key)
        if key in redoable:
            found[key] = why
        elif item is not None and item.status == "failed":
            found[key] = replace(why, waiting=f"parked after {item.attempts} attempts (`pipeline retry`)")
        elif item is not None and item.status == "claimed":  # not redoable: held by a live run
            found[key] = replace(why, waiting="a run is redoing it")
        elif item is not None and item.next_attempt_at is not None and item.next_attempt_at > now:
            found[key] = replace(why, waiting=f"retried after {item.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC")
        else:
            found[key] = replace(
                why,
                waiting="it waits for its inputs (an upstream output to redo, reference data to load)",
            )
    return found


def find_pending_work(
    session: Session, spec: WorkSpec, *, within: Sequence[str] | None = None, include_current: bool = False
) -> list[str]:
    """Keys of the subjects this use case should process now, oldest first."""
    planner_statistics.refresh_if_stale(session, _tables_read(spec))
    if within is None:
        return _keys_joining_as_written(session, pending_work_query(spec, include_current=include_current))
    found: set[str] = set()
    for start in range(0, len(within), CHUNK):
        chunk = list(within[start : start + CHUNK])
        query = pending_work_query(spec, include_current=include_current).where(
            spec.subjects.model.key.in_(chunk)
        )
        found.update(_keys_joining_as_written(session, query))
    return [key for key in within if key in found]


def _tables_read(spec: WorkSpec) -> tuple[str, ...]:
    """The tables a discovery query joins, whose planner statistics it needs."""
    return (
        spec.subjects.model.__tablename__,
        UseCaseOutput.__tablename__,
        WorkItem.__tablename__,
        ReferenceData.__tablename__,
    )


def subjects_with_output(session: Session, use_case: str, keys: Sequence[str]) -> list[str]:
    """Those of `keys` that have an output of this use case (current or not)."""
    found: list[str] = []
    for start in range(0, len(keys), CHUNK):
        query = select(UseCaseOutput.subject_key).where(
            UseCaseOutput.use_case == use_case,
            UseCaseOutput.subject_key.in_(list(keys[start : start + CHUNK])),
        )
        found += session.scalars(query)
    return found


def _held_query(spec: WorkSpec) -> Select:
    """Subjects of this use case under a live claim (a running run is writing them)."""
    return select(WorkItem.subject_key).where(
        WorkItem.use_case == spec.use_case,
        WorkItem.status == "claimed",
        or_(WorkItem.lease_expires_at >= database_now(), held_by_live_run(WorkItem.claimed_by)),
    )


def work_held(session: Session, spec: WorkSpec) -> bool:
    """Whether a live claim holds a subject of this use case (a running run is writing it)."""
    return session.scalar(_held_query(spec).limit(1)) is not None


def work_unclaimed(session: Session, spec: WorkSpec) -> bool:
    """Whether this use case has a subject to do that no run has claimed yet."""
    return session.scalar(pending_work_query(spec).limit(1)) is not None


def upstream_work(session: Session, specs: Iterable[WorkSpec]) -> tuple[bool, bool]:
    """Whether any of these use cases has subjects being made (a live claim), and whether any has
    subjects being made or still to make: what a reader's sensor and its waiting run ask of their
    upstream (`sensors/discovery_sensor.py`, `assets/batch_run.py`).

    Each answer comes from one statement, so from one snapshot: asked in two, a claim taken between
    them (or given back) showed neither held nor unclaimed work, and a run waiting for its inputs
    ended with them on the way. A held subject answers alone (the common case while an upstream run
    goes: the costlier query for unclaimed work is not even built); otherwise both are asked again
    together."""
    specs = list(specs)
    if not specs:
        return False, False
    held = or_(*(_held_query(spec).exists() for spec in specs))
    if session.scalar(select(held)):
        return True, True
    unclaimed = or_(*(pending_work_query(spec).exists() for spec in specs))
    being_made, coming = session.execute(select(held, case((held, True), else_=unclaimed))).one()
    return bool(being_made), bool(coming)


def _keys_joining_as_written(session: Session, query: Select) -> list[str]:
    """Run a discovery query with PostgreSQL joining in the order written: subjects first.

    PostgreSQL's planner takes a subject's key and its content hash as independent, so it
    estimates an upstream join at 1 row where there are 90,000, puts that join first and probes
    two indexes per row: 0.5-1.0 s at 100,000 subjects (the slow end on freshly written tables).
    Joined in the written order every estimate starts from the subjects and it hashes: 0.23 s.
    (`SET LOCAL`: only for this statement's transaction, and set back right after.)
    """
    if not is_postgres(session):
        return list(session.scalars(query))
    session.execute(text("SET LOCAL join_collapse_limit = 1"))
    keys = list(session.scalars(query))
    session.execute(text("SET LOCAL join_collapse_limit TO DEFAULT"))
    return keys


def change_marker(session: Session, table: SubjectTable) -> str:
    """A cheap fingerprint of everything discovery reads for subjects in `table`; equal markers mean
    nothing changed.

    It includes the next retry, lease expiry or pause end still ahead, so the marker
    also changes when a waiting item or a paused use case comes due.
    """
    now = database_now()
    return _fingerprint(
        session,
        *table.change_columns(),
        select(func.max(UseCaseOutput.updated_at)).scalar_subquery(),
        select(func.max(WorkItem.updated_at)).scalar_subquery(),
        select(func.min(WorkItem.next_attempt_at)).where(WorkItem.next_attempt_at > now).scalar_subquery(),
        select(func.min(WorkItem.lease_expires_at)).where(WorkItem.lease_expires_at > now).scalar_subquery(),
        select(func.max(ReferenceData.updated_at)).scalar_subquery(),
        select(func.count(UseCasePause.use_case)).scalar_subquery(),
        select(func.max(UseCasePause.paused_at)).scalar_subquery(),
        select(func.min(UseCasePause.resume_at)).where(UseCasePause.resume_at > now).scalar_subquery(),
    )


def subjects_marker(session: Session, table: SubjectTable) -> str:
    """A fingerprint of the subjects alone (arrived, changed, gone): while it stays, no subject can have
    become a new partition, whatever the runs write."""
    return _fingerprint(session, *table.change_columns())


def arrival_marker(session: Session, tables: Sequence[SubjectTable]) -> str:
    """A fingerprint of work arriving: subjects of `tables` stored or replaced, pauses ended by hand, LLM
    steps ended (their `run_cost` event: what they wrote may be the rest a downstream sensor waits for),
    runs started (a follower's sensor starts its run beside its upstream's, `_ahead_of_upstream`) and
    runs ended (their pool slots are free). Unlike `change_marker` it stays still while runs write
    their outputs, so the daemon can watch it every quarter second and wake its sensors only on these.
    Every part is read off an index (a primary key, an `updated_at` index, the events' kind index, the
    heartbeats' primary key and state index)."""
    return _fingerprint(
        session,
        *(column for table in tables for column in table.arrival_columns()),
        select(func.count(UseCasePause.use_case)).scalar_subquery(),
        select(func.count(RunHeartbeat.run_id)).scalar_subquery(),
        select(func.count()).where(RunHeartbeat.state.in_(("ended", "dead"))).scalar_subquery(),
        select(func.max(Event.at)).where(Event.kind == "run_cost").scalar_subquery(),
    )


def _fingerprint(session: Session, *values: Any) -> str:
    """The scalar subqueries' values, read in one statement, joined into one comparable string."""
    return "|".join(str(value) for value in session.execute(select(*values)).one())
