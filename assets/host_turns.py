"""Turns at a model server: which runs send their requests to a host now, and which wait, started and ready.

The run queue starts up to PIPELINE_RUNS_PER_HOST runs per host, so the next runs have loaded the code
location and claimed their batch while one is working. If they all sent at once they would share the
server, finish together, and leave it idle while the next wave of runs starts (seconds per run on a
loaded machine). Instead a step takes a turn at its host before its calls: a Dagster concurrency pool per
host (`llm_host:<url>`, `HOST_TURNS` slots, visible in the UI's pools) that a waiting step polls every
0.1 s, so when one step's calls end the next is sending within a tenth of a second. (Dagster's own
`pool=` cannot be per host, since a run's host is chosen at run time, and a step blocked on it polls
with a back-off up to 15 s, which were the 1-4 s gaps between steps.) Slots held by a run that died are
freed by run monitoring, like the `llm` pool's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from assets.batch_state import BatchRun

HOST_TURNS = 2  # steps sending to one host at once: one's bookkeeping overlaps the other's calls
POLL_SECONDS = 0.1
HOST_POOL_PREFIX = "llm_host:"


def host_pool(url: str) -> str:
    return f"{HOST_POOL_PREFIX}{url}"


def ensure_host_pool(storage: Any, pool: str) -> None:
    """Give a host's pool its turns the first time any run sends to it.

    Runs starting at once on a fresh PostgreSQL storage each found no row and inserted it; all but one
    failed on the unique key (`UniqueViolation ... concurrency_limits_concurrency_key_key`) and took
    their run down. The row another run wrote is all that is needed, so only a row still missing is
    an error."""
    if pool in storage.get_concurrency_keys():
        return
    try:
        storage.set_concurrency_slots(pool, HOST_TURNS)
    except SQLAlchemyError:
        if pool not in storage.get_concurrency_keys():
            raise


@contextlib.contextmanager
def host_turn(run: BatchRun) -> Iterator[None]:
    """Hold one of the host's turns while the body sends this step's requests (no-op without a host)."""
    host = run.llm.pinned_host if run.llm is not None else None
    storage = run.context.instance.event_log_storage
    if host is None or not storage.supports_global_concurrency_limits:
        yield
        return
    pool, step = host_pool(host.label), run.use_case.name
    ensure_host_pool(storage, pool)
    started = time.monotonic()
    while not storage.claim_concurrency_slot(pool, run.run_id, step).is_claimed:
        run.renew_claims_if_due()
        time.sleep(POLL_SECONDS)
    waited = time.monotonic() - started
    if waited > 1:
        run.log.info(f"{step}: waited {waited:.1f}s for a turn at {host.label} (ready, batch claimed)")
    try:
        yield
    finally:
        storage.free_concurrency_slot_for_step(run.run_id, step)
