"""A run's heartbeat: a small thread that shows the run alive in the application database.

It starts when the run's resources are set up, before any step waits on the `llm` pool, and ends
with them. A dead process stops beating: the sensor and `pipeline run` see it within
`DEAD_AFTER_BEATS` beats and fail the run, free its pool slots and give its claims back
(`sensors/run_liveness.py`), instead of waiting ten minutes for its leases, or forever for a run that
died while waiting on the pool and held no claims.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from appdb import heartbeats
from appdb.database import get_engine, session_scope
from appdb.process_identity import this_process

DEFAULT_HEARTBEAT_SECONDS = 10.0
DEAD_AFTER_BEATS = 5  # a run whose last beat is older than this many intervals is dead (50 s by default)
DEFAULT_LEASE_SECONDS = 600.0  # `appdb.retry_policy.RetryPolicy.lease_seconds`, unless PIPELINE_LEASE_SECONDS

log = logging.getLogger(__name__)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def dead_after_seconds(heartbeat_seconds: float) -> float:
    """How old a heartbeat may get before its run counts as dead."""
    return heartbeat_seconds * DEAD_AFTER_BEATS


_running: set[RunHeartbeat] = set()
_exit_handler_pid: int | None = None


@atexit.register
def _end_on_exit() -> None:
    """A run worker exits right after its run: end its heartbeat rather than leave it to be reaped."""
    for heartbeat in list(_running):
        heartbeat.stop(timeout=0.0)


def _end_on_exit_of_this_process() -> None:
    """Have `_end_on_exit` run when this process ends as a `multiprocessing` child too. A run forked
    by the forkserver (`PIPELINE_RUN_START=forkserver`, the default) ends with `os._exit` after
    multiprocessing's own exit handlers, so `atexit` never ran there: every finished daemon run kept
    an `alive` heartbeat of a gone pid, and the reaper recorded it `dead`. Once per process."""
    global _exit_handler_pid
    if _exit_handler_pid != os.getpid():
        multiprocessing.util.Finalize(None, _end_on_exit, exitpriority=10)
        _exit_handler_pid = os.getpid()


@contextmanager
def _beat_session(url: str) -> Iterator[Session]:
    """A transaction without `session_scope`'s migration check: a late beat (the database dropped or
    replaced meanwhile, as tests do) must never create a schema."""
    with sessionmaker(get_engine(url))() as session, session.begin():
        yield session


class RunHeartbeat:
    """Beats for one run every `interval` seconds on a daemon thread, until the run is finished
    (Dagster says so), its row was ended or reaped, `stop()`, or the process exits. Each beat also
    renews the leases of the claims the run holds (`lease_seconds`), so a live run keeps them however
    long its calls take."""

    def __init__(
        self,
        url: str,
        run_id: str,
        job: str,
        source: str | None,
        interval: float,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self.url, self.run_id, self.job, self.source, self.interval = url, run_id, job, source, interval
        self.lease_seconds = lease_seconds
        self._stop = threading.Event()
        self._ended = threading.Event()
        self._end_failed = False
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id[:8]}", daemon=True)
        self._instance: Any = None
        # False in a process executing a step of a run whose own process beats elsewhere (a Celery
        # worker): that process beats the step's row instead (`StepHeartbeat`, from the step itself)
        self.beats_here = True

    def start(self, instance: Any = None) -> RunHeartbeat:
        """The first beat now (in the caller's thread, so it is there before the run waits on anything).
        With Dagster's `instance`, the thread ends itself once the run is finished. When the row is
        another process's (the run's own, sending its steps to Celery), nothing here."""
        self._instance = instance
        with session_scope(self.url) as session:
            heartbeats.start_heartbeat(session, self.run_id, job=self.job, source=self.source)
            row = heartbeats.heartbeats_of(session, [self.run_id]).get(self.run_id)
        if row is not None and row.process.instance_id != this_process().instance_id:
            self.beats_here = False  # another's: alive, or declared dead (then the step does nothing)
            return self
        _running.add(self)
        _end_on_exit_of_this_process()
        self._thread.start()
        return self

    def _run_finished(self) -> bool:
        if self._instance is None:
            return False
        try:
            run = self._instance.get_run_by_id(self.run_id)
        except Exception:  # noqa: BLE001 - the instance is gone (closed): so is the run
            return True
        return run is not None and run.is_finished

    def _loop(self) -> None:
        failing = False
        while not self._stop.wait(self.interval):
            if self._run_finished():
                self._stop.set()
                break
            try:
                with _beat_session(self.url) as session:
                    alive = heartbeats.beat(session, self.run_id, lease_seconds=self.lease_seconds)
                    state = (
                        None
                        if alive
                        else getattr(
                            heartbeats.heartbeats_of(session, [self.run_id]).get(self.run_id), "state", None
                        )
                    )
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the run goes on
                if not failing:  # one line per outage
                    log.warning("run %s: heartbeat not written (%s); retrying", self.run_id, _first_line(exc))
                failing = True
                continue
            failing = False
            if not alive:
                if state == "dead":
                    log.error(
                        "run %s was declared dead (its heartbeat stopped for too long): its claims went "
                        "back and it calls the model for none of them and stores none",
                        self.run_id,
                    )
                self._ended.set()
                _running.discard(self)
                return
        # Finished: end the row, retrying while the database is away (a blip must not leave it "alive"
        # for the reaper's patience, with the claims it still holds).
        while not self._end_once():
            time.sleep(min(self.interval, 5.0))

    def _end_once(self) -> bool:
        """End the row and give back what the run still holds; whether that is done (or was)."""
        if self._ended.is_set():
            return True
        try:
            with _beat_session(self.url) as session:
                heartbeats.end_heartbeat(session, self.run_id)
        except Exception as exc:  # noqa: BLE001 - the caller retries
            if not self._end_failed:
                log.warning("run %s: heartbeat not ended (%s); retrying", self.run_id, _first_line(exc))
            self._end_failed = True
            return False
        self._ended.set()
        _running.discard(self)
        return True

    def stop(self, timeout: float = 0.0) -> bool:
        """The run ended in this process: stop beating and mark the row ended (nothing to reap), giving
        back the claims it still holds. If the database is away, the beat thread keeps trying; wait up to
        `timeout` seconds for that. Returns whether the row is ended."""
        self._stop.set()
        if self._end_once():
            return True
        if not self._thread.is_alive():  # never started, or already gone: retry here
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                time.sleep(min(self.interval, 1.0, max(0.0, deadline - time.monotonic())))
                if self._end_once():
                    return True
            return False
        return self._ended.wait(timeout)


def end_run_heartbeat(run_id: str, timeout: float) -> bool:
    """End the heartbeat of `run_id` kept by this process now, waiting up to `timeout` seconds for the
    database; True when it is ended (or none is kept here)."""
    for heartbeat in list(_running):
        if heartbeat.run_id == run_id:
            return heartbeat.stop(timeout)
    return True


class StepHeartbeat:
    """Beats for one step executing away from its run's process (a Celery worker), on a daemon thread,
    until `stop()` (the step ended: its row `ended`, its claims back) or the row is declared dead (the
    process was lost: its claims went back, and the fence `claims._step_fence` keeps it from calling or
    storing anything). Each beat renews the leases of its use case's claims of the run."""

    def __init__(self, url: str, run_id: str, step: str, interval: float, lease_seconds: float) -> None:
        self.url, self.run_id, self.step, self.interval = url, run_id, step, interval
        self.lease_seconds = lease_seconds
        self.instance_id = this_process().instance_id or ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"step-heartbeat-{step[:20]}", daemon=True)

    def start(self) -> bool:
        """The first beat; False when the run is no longer alive (the step must do nothing)."""
        with _beat_session(self.url) as session:
            alive = heartbeats.start_step_heartbeat(session, self.run_id, self.step)
        if alive:
            self._thread.start()
        return alive

    def _loop(self) -> None:
        failing = False
        while not self._stop.wait(self.interval):
            try:
                with _beat_session(self.url) as session:
                    alive = heartbeats.beat_step(
                        session, self.run_id, self.step, self.instance_id, lease_seconds=self.lease_seconds
                    )
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the step goes on
                if not failing:
                    log.warning(
                        "step %s of run %s: heartbeat not written (%s); retrying",
                        self.step,
                        self.run_id,
                        _first_line(exc),
                    )
                failing = True
                continue
            failing = False
            if not alive:
                log.error(
                    "step %s of run %s was declared dead (its heartbeat stopped for too long): its claims "
                    "went back and it calls the model for none of them and stores none",
                    self.step,
                    self.run_id,
                )
                return

    def stop(self) -> int:
        """The step ended here: its row `ended`, the claims it still holds back; how many."""
        self._stop.set()
        with _beat_session(self.url) as session:
            return heartbeats.end_step_heartbeat(session, self.run_id, self.step, self.instance_id)
