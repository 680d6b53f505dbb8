"""dagster-daemon whose sensors wake when work arrives: `python -m pipeline_defs.runtime.daemon` takes
dagster-daemon's own arguments (what `pipeline ui` runs in place of `python -m dagster._daemon`, and what
a service runs through `pipeline daemon`).

Dagster's sensor daemon looks at its sensors once every 5 s (`MIN_INTERVAL_LOOP_TIME`, not
configurable), so subjects stored just after a look waited up to 5 s before a run was requested.
Looking every second instead costs a third of a core on an idle machine (each tick is a call to the code
server and a stored tick: about 0.1 CPU s). Here a thread watches the application database's
`arrival_marker` (new or replaced subjects of the declared kinds, pauses ended, runs started, LLM
steps and runs ended: one indexed query every quarter second) and, when it changes, ends the loop's
wait at once; the sensors then tick if their own interval (`PIPELINE_SENSOR_INTERVAL_SECONDS`) has
passed, and the watcher ends the wait once more after that interval for those that were not due.
Idle, the daemon looks every 5 s as before.

This reaches into Dagster's internals (the loop's wait on the daemon's shutdown event, and the name
`SensorDaemon.core_loop` calls it by): pinned by `tests/unit/test_daemon_wake.py`, which fails when
either moves; where this Dagster lacks them the daemon runs unchanged, with a warning.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from appdb.database import session_scope
from appdb.discovery import arrival_marker
from appdb.subject_tables import SubjectTable
from pipeline_defs.catalog import declared_kinds
from pipeline_defs.settings import Settings

WATCH_SECONDS = 0.25
"""How often the watcher reads the arrival marker."""
POLL_SECONDS = 0.1
"""How finely a woken wait notices the wake."""


class WakeableShutdown:
    """The daemon's shutdown event as the sensor loop sees it: its wait between looks also ends when
    `wake` is set (and clears it); shutting down is the real event's business, untouched."""

    def __init__(self, shutdown: threading.Event, wake: threading.Event) -> None:
        self._shutdown = shutdown
        self._wake = wake

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._wake.is_set():
                self._wake.clear()
                return self._shutdown.is_set()
            remaining = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
            if remaining <= 0:
                return self._shutdown.is_set()
            if self._shutdown.wait(remaining):
                return True

    def __getattr__(self, name: str) -> Any:  # is_set, set, clear: the real event's
        return getattr(self._shutdown, name)


def wake_on(wake: threading.Event, loop: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    """Dagster's sensor loop, its waits between looks cut short by `wake`."""

    def wakeable_loop(context: Any, logger: Any, shutdown_event: threading.Event, *args: Any, **kwargs: Any):
        return loop(context, logger, WakeableShutdown(shutdown_event, wake), *args, **kwargs)

    return wakeable_loop


def watch_arrivals(
    database_url: str,
    tables: Sequence[SubjectTable],
    wake: threading.Event,
    stop: threading.Event,
    again_after: float = 0.0,
) -> None:
    """Set `wake` whenever the arrival marker changes, and once more `again_after` seconds later; a
    database that cannot be read is tried again.

    The second wake is for a sensor that looked less than its interval before the change: at the
    first wake it is not due yet, and without another it would wait for the loop's next 5 s look
    (seen in the daemon benchmark: the last resolution run requested 6 s after the skills it waited
    for were written)."""
    last = None
    again_at: float | None = None
    while not stop.wait(WATCH_SECONDS):
        if again_at is not None and time.monotonic() >= again_at:
            wake.set()
            again_at = None
        try:
            with session_scope(database_url) as session:
                marker = arrival_marker(session, tables)
        except SQLAlchemyError:
            continue  # not migrated yet, or briefly unreachable: the 5 s loop still looks
        if last is not None and marker != last:
            wake.set()
            if again_after > 0:
                again_at = time.monotonic() + again_after
        last = marker


def install_wake(settings: Settings) -> threading.Event | None:
    """Make the sensor daemon wake on arrivals; the watcher's stop event, or None where this Dagster
    has no loop to wrap."""
    from dagster._daemon import daemon as daemon_module
    from dagster._daemon import sensor as sensor_module

    loop = getattr(daemon_module, "execute_sensor_iteration_loop", None)
    if loop is None or loop is not getattr(sensor_module, "execute_sensor_iteration_loop", None):
        return None
    wake, stop = threading.Event(), threading.Event()
    daemon_module.execute_sensor_iteration_loop = wake_on(wake, loop)
    again_after = settings.sensor_interval_seconds + WATCH_SECONDS  # every sensor due by then
    tables = [kind.table for kind in declared_kinds(settings)]
    watcher = threading.Thread(
        target=watch_arrivals,
        args=(settings.database_url, tables, wake, stop, again_after),
        name="arrival-watch",
        daemon=True,
    )
    watcher.start()
    return stop


def main() -> None:
    """dagster-daemon's command line (it reads sys.argv), its sensors woken by arriving work."""
    from dagster._daemon.cli import main as daemon_main

    from pipeline_defs.runtime.run_processes import install_server_opener

    settings = Settings.from_env()
    install_server_opener()  # a code server it opens itself (`pipeline daemon`): run_processes.py
    if install_wake(settings) is None:
        print(
            "warning: this Dagster version's sensor loop is not where pipeline_defs/runtime/daemon.py "
            "expects it; "
            "sensors are looked at on Dagster's own 5 s period",
            file=sys.stderr,
        )
    daemon_main()


if __name__ == "__main__":
    main()
