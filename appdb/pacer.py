"""The pacer: a token bucket per backend or host, shared by every process through the database.

Remote and paid backends (a remote Ollama host, an OpenAI-compatible API) must not be sent more than
`rate` requests a second over any window, with bursts of up to `burst`. Each process asks the same
row of `pacer_buckets` for its tokens, so two runs, a sensor and a CLI together stay under the limit.

The bucket reserves rather than polls: `acquire` takes its tokens at once, letting the balance go below
zero, and sleeps until the refill covers them. One short transaction per call (the row is locked only
while the arithmetic runs), no retry loop, and callers are served in the order they asked. Over any
window of T seconds at most `burst + rate * T` tokens are granted (`tests/unit/test_pacer.py`).
Times are the callers' wall clocks (`time.time()`): processes on one machine, or clocks kept in step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from appdb.database import session_scope
from appdb.dialects import insert_for
from appdb.models import PacerBucket


@dataclass(frozen=True)
class BucketState:
    tokens: float
    updated_at: float


def reserve(
    state: BucketState | None, *, rate: float, burst: float, tokens: float, now: float
) -> tuple[BucketState, float]:
    """The bucket after taking `tokens` at `now`, and how long the caller must wait before using them.

    A new bucket starts full. A clock that went backwards (another process's) refills nothing.
    """
    if rate <= 0 or burst < 1:
        raise ValueError(f"a pacer needs rate > 0 and burst >= 1, got rate={rate}, burst={burst}")
    if tokens > burst:
        raise ValueError(f"cannot take {tokens} tokens at once from a bucket of {burst}")
    if state is None:
        available = float(burst)
        updated_at = now
    else:
        updated_at = max(now, state.updated_at)
        available = min(float(burst), state.tokens + max(0.0, now - state.updated_at) * rate)
    remaining = available - tokens
    # Measured from the bucket's time: a caller whose clock reads earlier than the last update waits
    # the difference too (a reservation is never dated before the ones already made).
    wait = max(0.0, (updated_at - now) + max(0.0, -remaining) / rate)
    return BucketState(remaining, updated_at), wait


def reserve_in_database(
    session: Session, bucket: str, *, rate: float, burst: float, tokens: float, clock: Callable[[], float]
) -> tuple[float, float]:
    """`reserve` on the shared row of `bucket`, locked for the caller's transaction: (now, wait).

    The clock is read once the row is locked, so reservations are dated in the order they were made.
    """
    insert = insert_for(session)
    now = clock()
    # Creates the row once; on SQLite it also takes the write lock, so the read below is the latest.
    session.execute(
        insert(PacerBucket).values(name=bucket, tokens=float(burst), updated_at=now).on_conflict_do_nothing()
    )
    row = session.execute(
        select(PacerBucket.tokens, PacerBucket.updated_at).where(PacerBucket.name == bucket).with_for_update()
    ).one()
    now = clock()
    state, wait = reserve(
        BucketState(row.tokens, row.updated_at), rate=rate, burst=burst, tokens=tokens, now=now
    )
    session.execute(
        update(PacerBucket)
        .where(PacerBucket.name == bucket)
        .values(tokens=state.tokens, updated_at=state.updated_at)
        .execution_options(synchronize_session=False)
    )
    return now, wait


@dataclass
class Pacer:
    """`acquire(tokens)` before each request to a paced backend; `on_wait` hears every wait (for the logs).

    database_url: where the shared bucket lives (the application database).
    bucket: one per backend or host, e.g. ``ollama:http://gpu-box:11434``.
    rate: tokens (requests) per second; burst: the most taken at once after a quiet spell.
    """

    database_url: str
    bucket: str
    rate: float
    burst: float = 1.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    on_wait: Callable[[str, float], None] | None = None
    waited_seconds: float = 0.0
    last_grant_at: float = 0.0  # when the last tokens were due (the bucket's schedule, before sleeping)

    def acquire(self, tokens: float = 1.0) -> float:
        """Take `tokens`, sleeping until they are due; returns the seconds waited."""
        with session_scope(self.database_url) as session:
            now, wait = reserve_in_database(
                session, self.bucket, rate=self.rate, burst=self.burst, tokens=tokens, clock=self.clock
            )
        self.last_grant_at = now + wait
        if wait > 0:
            if self.on_wait is not None:
                self.on_wait(self.bucket, wait)
            self.sleep(wait)
            self.waited_seconds += wait
        return wait
