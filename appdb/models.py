"""Tables of the application database (separate from Dagster's own storage).

Timestamps are naive UTC everywhere, so SQLite and PostgreSQL compare them alike.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

KEY_LENGTH = 255


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: DateTime()}


class UseCaseOutput(Base):
    """The current output of one use case for one posting.

    It is current while `use_case_version` equals the declaration's version and
    `subject_hash` equals the posting's content hash (and no upstream output is newer).
    Every earlier attempt stays in `interactions`.
    """

    __tablename__ = "outputs"
    # max(updated_at) for the change marker every sensor tick. (Migration 0004.)
    __table_args__ = (Index("ix_outputs_updated_at", "updated_at"),)

    use_case: Mapped[str] = mapped_column(String(100), primary_key=True)
    subject_key: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    value: Mapped[dict[str, Any]]
    model: Mapped[str] = mapped_column(String(200))
    backend: Mapped[str] = mapped_column(String(50))
    use_case_version: Mapped[str] = mapped_column(String(50))
    input_hash: Mapped[str] = mapped_column(String(64))
    subject_hash: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(64))
    interaction_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Interaction(Base):
    """One LLM call, exactly as sent and as answered."""

    __tablename__ = "interactions"
    __table_args__ = (Index("ix_interactions_subject", "subject_key", "use_case"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    use_case: Mapped[str] = mapped_column(String(100))
    use_case_version: Mapped[str] = mapped_column(String(50))
    subject_key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    backend: Mapped[str] = mapped_column(String(50))
    model: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    system_prompt: Mapped[str] = mapped_column(Text, default="")
    options: Mapped[dict[str, Any]]
    raw_response: Mapped[str | None] = mapped_column(Text)
    parsed_output: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    latency_ms: Mapped[float | None]
    cost: Mapped[float | None]  # tokens x the model's configured price; 0 for local models (migration 0005)
    status: Mapped[str] = mapped_column(String(20))  # ok | item_error | infra_error
    error: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(20))  # sensor | backfill | ui | cli | test
    run_id: Mapped[str | None] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


class WorkItem(Base):
    """Work state of one (use case, posting): attempts, errors and the claim of the run holding it.

    A row exists only once a run has claimed the item: the work itself is found by each
    use case's discovery query, not queued here.
    """

    __tablename__ = "work_items"
    __table_args__ = (
        Index("ix_work_items_status", "use_case", "status"),
        # Every sensor tick reads max(updated_at), the next retry and the next lease expiry
        # (change marker) and frees expired leases; without these, full scans of work_items.
        # (Migration 0004.)
        Index("ix_work_items_updated_at", "updated_at"),
        Index("ix_work_items_next_attempt_at", "next_attempt_at"),
        Index("ix_work_items_lease_expires_at", "lease_expires_at"),
    )

    use_case: Mapped[str] = mapped_column(String(100), primary_key=True)
    subject_key: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    status: Mapped[str] = mapped_column(String(20), default="pending")  # pending | claimed | done | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    claimed_by: Mapped[str | None] = mapped_column(String(64))
    lease_expires_at: Mapped[datetime | None]
    next_attempt_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ReferenceData(Base):
    """A non-posting input that use cases read (e.g. the skills taxonomy).

    `updated_at` moves only when the content hash changes, so reloading the same file
    makes nothing stale; a use case that declares this reference input treats its
    outputs older than `updated_at` as stale.
    """

    __tablename__ = "reference_data"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(Text)
    row_count: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class UseCasePause(Base):
    """A use case paused by the circuit breaker (or by hand): no runs until `resume_at`."""

    __tablename__ = "use_case_pauses"

    use_case: Mapped[str] = mapped_column(String(100), primary_key=True)
    reason: Mapped[str] = mapped_column(Text)
    paused_at: Mapped[datetime] = mapped_column(default=utcnow)
    resume_at: Mapped[datetime]
    consecutive_trips: Mapped[int] = mapped_column(Integer, default=1)


class OutputGrade(Base):
    """The judge model's grades of one output (the gym's sample of a run), per rubric criterion.

    `input_hash` names the graded output (the same hash as `outputs.input_hash`), so a
    grade belongs to one generation even after the output is remade. The judge's prompt
    and response are the interaction `interaction_id`.
    """

    __tablename__ = "output_grades"
    __table_args__ = (Index("ix_output_grades_use_case", "use_case", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    use_case: Mapped[str] = mapped_column(String(100))
    subject_key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    use_case_version: Mapped[str] = mapped_column(String(50))
    input_hash: Mapped[str] = mapped_column(String(64))
    judge_model: Mapped[str] = mapped_column(String(200))
    rubric_version: Mapped[str] = mapped_column(String(50))
    scores: Mapped[dict[str, Any]]  # criterion -> 1..5
    overall: Mapped[float]
    interaction_id: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ReviewItem(Base):
    """An output a reviewer should look at: it failed a check or the judge graded it low.

    At most one item per (use case, posting) is open; a new finding updates it. `output`
    is the output as it was when flagged (for a blocked output, the rejected one).
    """

    __tablename__ = "review_items"
    __table_args__ = (Index("ix_review_items_status", "status", "use_case"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    use_case: Mapped[str] = mapped_column(String(100))
    subject_key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    use_case_version: Mapped[str] = mapped_column(String(50))
    reason: Mapped[str] = mapped_column(Text)
    check_name: Mapped[str | None] = mapped_column(String(100))  # None when the judge flagged it
    score: Mapped[float | None]
    output: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    interaction_id: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(20), default="open")  # open|accepted|rejected|corrected
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    resolved_at: Mapped[datetime | None]


class Correction(Base):
    """The gym corpus: a reviewer's verdict on one output, the gold the next evaluation uses.

    `verdict` is `accepted` (the original is right: `corrected` equals `original`) or
    `corrected` (the reviewer's value). The newest row per (use case, posting) counts.
    """

    __tablename__ = "corrections"
    __table_args__ = (Index("ix_corrections_use_case", "use_case", "subject_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    use_case: Mapped[str] = mapped_column(String(100))
    subject_key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    use_case_version: Mapped[str] = mapped_column(String(50))
    verdict: Mapped[str] = mapped_column(String(20))  # accepted | corrected
    original: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    corrected: Mapped[dict[str, Any]]
    note: Mapped[str | None] = mapped_column(Text)
    review_item_id: Mapped[int | None] = mapped_column(Integer)
    interaction_id: Mapped[int | None] = mapped_column(Integer)  # the review's record in `interactions`
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class PacerBucket(Base):
    """One token bucket of the pacer (`appdb/pacer.py`), shared by every process on the database.

    `tokens` may go below zero: a caller that reserved ahead of the refill waits until its
    turn, so the balance records the reservations still to come. `updated_at` is epoch seconds.
    """

    __tablename__ = "pacer_buckets"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    tokens: Mapped[float]
    updated_at: Mapped[float]


class Event(Base):
    """What Dagster's log does not keep across runs and domains: discovery counts, pauses and
    resumes with reasons, errors by class, and each run's cost (`appdb/events.py`)."""

    __tablename__ = "events"
    __table_args__ = (Index("ix_events_at", "at"), Index("ix_events_kind", "kind", "at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(30))  # discovery | pause | resume | error | run_cost
    use_case: Mapped[str | None] = mapped_column(String(100))
    subject_kind: Mapped[str | None] = mapped_column(String(50))
    run_id: Mapped[str | None] = mapped_column(String(64))
    source: Mapped[str | None] = mapped_column(String(20))
    count: Mapped[int | None] = mapped_column(Integer)
    error_class: Mapped[str | None] = mapped_column(String(100))
    reason: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    cost: Mapped[float | None]
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Subject(Base):
    """One subject of a kind other than postings (which keep their own table): what the work core's
    use cases run on. `content` is the domain's fields; `content_hash` changes when they change, which
    makes the subject's outputs stale (as a posting's content hash does). (Migration 0006.)"""

    __tablename__ = "subjects"
    __table_args__ = (
        UniqueConstraint("kind", "key", name="uq_subjects_kind_key"),
        Index("ix_subjects_kind_updated_at", "kind", "updated_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(50))
    key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    content: Mapped[dict[str, Any]]
    content_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class RunHeartbeat(Base):
    """A run that can hold the `llm` pool or claims, seen alive: its process renews `beat_at` every few
    seconds from before it waits on the pool until it ends (`appdb/heartbeats.py`). A row whose beat
    stopped belongs to a dead run: the sensor and `pipeline run` fail it, free its pool slots and give
    its claims back. `state` is `alive`, `ended` (it ended in its process) or `dead` (reaped; a late beat
    cannot revive it)."""

    __tablename__ = "run_heartbeats"
    __table_args__ = (Index("ix_run_heartbeats_beat_at", "state", "beat_at"),)

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job: Mapped[str] = mapped_column(String(200))
    source: Mapped[str | None] = mapped_column(String(20))
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(10), default="alive")  # alive | ended | dead
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    beat_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_reason: Mapped[str | None] = mapped_column(Text)
    # Which process beats, and where its pid means something (migration 0012; null: an older version or
    # no /proc, judged by the heartbeat's age alone): `sensors/run_liveness.local_process`.
    instance_id: Mapped[str | None] = mapped_column(String(32))
    boot_id: Mapped[str | None] = mapped_column(String(40))
    pid_namespace: Mapped[str | None] = mapped_column(String(40))
    process_started: Mapped[int | None] = mapped_column(BigInteger)  # clock ticks since boot


class StepHeartbeat(Base):
    """A step of a run executing in a process other than the run's own (a Celery worker on another host):
    that process beats here, per (run, step, process), while the run's own process (which sent the step
    and waits for it) beats `run_heartbeats`. A step waiting in the broker's queue has no row and its run
    is alive; a step whose process stopped beating is dead: the claims of its use case come back (its
    run goes on: the broker delivers the step again). Migration 0014."""

    __tablename__ = "step_heartbeats"
    __table_args__ = (Index("ix_step_heartbeats_beat_at", "state", "beat_at"),)

    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    step: Mapped[str] = mapped_column(String(200), primary_key=True)  # the use case's step key
    instance_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    boot_id: Mapped[str | None] = mapped_column(String(40))
    pid_namespace: Mapped[str | None] = mapped_column(String(40))
    process_started: Mapped[int | None] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(String(10), default="alive")  # alive | ended | dead
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    beat_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_reason: Mapped[str | None] = mapped_column(Text)
