"""A run's heartbeat: a small thread that shows the run alive in the application database.

It starts when the run's resources are set up, before any step waits on the `llm` pool, and ends
with them. A dead process stops beating: the sensor and `pipeline run` see it within
`DEAD_AFTER_BEATS` beats and fail the run, free its pool slots and give its claims back
(`sensors/run_liveness.py`), instead of waiting ten minutes for its leases, or forever for a run that
died while waiting on the pool and held no claims.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading

from appdb import heartbeats
from appdb.database import session_scope

DEFAULT_HEARTBEAT_SECONDS = 10.0
DEAD_AFTER_BEATS = 6  # a run whose last beat is older than this many intervals is dead

log = logging.getLogger(__name__)


def dead_after_seconds(heartbeat_seconds: float) -> float:
    """How old a heartbeat may get before its run counts as dead."""
    return heartbeat_seconds * DEAD_AFTER_BEATS


class RunHeartbeat:
    """Beats for one run every `interval` seconds on a daemon thread, until `stop()`."""

    def __init__(self, url: str, run_id: str, job: str, source: str | None, interval: float) -> None:
        self.url, self.run_id, self.job, self.source, self.interval = url, run_id, job, source, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id[:8]}", daemon=True)
        self.declared_dead = False

    def start(self) -> RunHeartbeat:
        """The first beat now (in the caller's thread, so it is there before the run waits on anything)."""
        with session_scope(self.url) as session:
            heartbeats.start_heartbeat(
                session,
                self.run_id,
                job=self.job,
                source=self.source,
                host=socket.gethostname(),
                pid=os.getpid(),
            )
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with session_scope(self.url) as session:
                    alive = heartbeats.beat(session, self.run_id)
            except Exception as exc:  # noqa: BLE001 - a missed beat is retried; the run goes on
                log.warning("run %s: heartbeat not written (%s); retrying", self.run_id, exc)
                continue
            if not alive and not self.declared_dead:
                self.declared_dead = True
                log.error(
                    "run %s was declared dead (its heartbeat stopped for too long): its claims went back "
                    "and its outputs will not be stored",
                    self.run_id,
                )

    def stop(self) -> None:
        """The run ended in this process: stop beating and remove the row (nothing to reap)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.interval + 5)
        with contextlib.suppress(Exception), session_scope(self.url) as session:
            heartbeats.end_heartbeat(session, self.run_id)
