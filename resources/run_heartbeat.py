"""A run's heartbeat: a small thread that shows the run alive in the application database.

It starts when the run's resources are set up, before any step waits on the `llm` pool, and ends
with them. A dead process stops beating: the sensor and `pipeline run` see it within
`DEAD_AFTER_BEATS` beats and fail the run, free its pool slots and give its claims back
(`sensors/run_liveness.py`), instead of waiting ten minutes for its leases, or forever for a run that
died while waiting on the pool and held no claims.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from appdb import heartbeats
from appdb.database import get_engine, session_scope

DEFAULT_HEARTBEAT_SECONDS = 10.0
DEAD_AFTER_BEATS = 5  # a run whose last beat is older than this many intervals is dead (50 s by default)

log = logging.getLogger(__name__)


def dead_after_seconds(heartbeat_seconds: float) -> float:
    """How old a heartbeat may get before its run counts as dead."""
    return heartbeat_seconds * DEAD_AFTER_BEATS


_running: set[RunHeartbeat] = set()


@atexit.register
def _end_on_exit() -> None:
    """A run worker exits right after its run: end its heartbeat rather than leave it to be reaped."""
    for heartbeat in list(_running):
        heartbeat.stop()


@contextmanager
def _beat_session(url: str) -> Iterator[Session]:
    """A transaction without `session_scope`'s migration check: a late beat (the database dropped or
    replaced meanwhile, as tests do) must never create a schema."""
    with sessionmaker(get_engine(url))() as session, session.begin():
        yield session


class RunHeartbeat:
    """Beats for one run every `interval` seconds on a daemon thread, until the run is finished
    (Dagster says so), its row was ended or reaped, `stop()`, or the process exits."""

    def __init__(self, url: str, run_id: str, job: str, source: str | None, interval: float) -> None:
        self.url, self.run_id, self.job, self.source, self.interval = url, run_id, job, source, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id[:8]}", daemon=True)
        self._instance: Any = None

    def start(self, instance: Any = None) -> RunHeartbeat:
        """The first beat now (in the caller's thread, so it is there before the run waits on anything).
        With Dagster's `instance`, the thread ends itself once the run is finished."""
        self._instance = instance
        with session_scope(self.url) as session:
            heartbeats.start_heartbeat(
                session,
                self.run_id,
                job=self.job,
                source=self.source,
                host=socket.gethostname(),
                pid=os.getpid(),
            )
        _running.add(self)
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
        while not self._stop.wait(self.interval):
            if self._run_finished():
                self.stop()
                return
            try:
                with _beat_session(self.url) as session:
                    alive = heartbeats.beat(session, self.run_id)
                    state = (
                        None
                        if alive
                        else getattr(
                            heartbeats.heartbeats_of(session, [self.run_id]).get(self.run_id), "state", None
                        )
                    )
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the run goes on
                log.warning("run %s: heartbeat not written (%s); retrying", self.run_id, exc)
                continue
            if not alive:
                if state == "dead":
                    log.error(
                        "run %s was declared dead (its heartbeat stopped for too long): its claims went "
                        "back and its outputs will not be stored",
                        self.run_id,
                    )
                _running.discard(self)
                return

    def stop(self) -> None:
        """The run ended in this process: stop beating and mark the row ended (nothing to reap)."""
        self._stop.set()
        _running.discard(self)
        with contextlib.suppress(Exception), _beat_session(self.url) as session:
            heartbeats.end_heartbeat(session, self.run_id)
