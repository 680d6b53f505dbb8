"""What keeps `pipeline run` live: a reaper thread, the signals, and the run in progress.

- **Reaper.** While runs execute, a thread fails the runs whose heartbeat stopped (a `pipeline run`
  killed with SIGKILL, a daemon run on a lost host) and frees their `llm` pool slots, so this process
  never waits on a pool held by a dead run for longer than `dead_after_seconds`.
- **Holders.** Before `pipeline run` says a group is done, it looks at the claims other runs hold on
  the group's use cases: each holder is waited for until it beats (alive: it does its own work) or is
  reaped (killed moments ago, say on another host, where its process cannot be checked), and the
  reaped one's postings are then planned again in the same command, instead of exiting 0 with them
  undone.
- **Signals.** SIGINT (Ctrl-C) and SIGTERM stop at once, whatever Dagster is doing (inside a model
  call, waiting on the pool): a helper thread gives back the claims of the run in progress without
  spending attempts, reports that run canceled and frees its pool slots, prints one line and exits
  with 128 + the signal number. The runs execute on a worker thread (`call`): on the main thread
  Dagster replaces the SIGINT and SIGTERM handlers with its own, which fail the step and let the loop
  start the next batch, or only note the signal while a step waits on the pool. A second signal exits
  without the clean-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from types import FrameType, TracebackType
from typing import TypeVar

from dagster import DagsterInstance

from appdb import claims, heartbeats
from resources.app_database import AppDatabase
from resources.run_heartbeat import dead_after_seconds
from sensors.run_liveness import fail_run, reap_dead_runs

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
HOLDER_POLL_SECONDS = 1.0  # how often a waited-for holder's heartbeat is looked at
T = TypeVar("T")


class RunWatch:
    """A context manager around the runs of one `pipeline run`; `handle_signals` only in the CLI."""

    def __init__(
        self, instance: DagsterInstance, app_db: AppDatabase, *, handle_signals: bool = False
    ) -> None:
        self.instance, self.app_db = instance, app_db
        self.interval = app_db.heartbeat_seconds
        self.dead_after = dead_after_seconds(app_db.heartbeat_seconds)
        self.current_run_id: str | None = None
        self.reaped: list[str] = []
        self._announced: set[str] = set()
        self._reap_failing = False
        self._handle_signals = handle_signals and threading.current_thread() is threading.main_thread()
        self._previous: dict[int, object] = {}
        self._stop = threading.Event()
        self._stopping = threading.Event()
        self._reaper = threading.Thread(target=self._reap_loop, name="pipeline-run-reaper", daemon=True)

    def __enter__(self) -> RunWatch:
        self.reap()  # before the first run: a pool held by a run that died earlier is freed now
        self._reaper.start()
        if self._handle_signals:
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._reaper.join(timeout=self.interval + 5)

    def call(self, work: Callable[[], T]) -> T:
        """`work()` on a worker thread, the main thread waiting for it and free to take signals."""
        if not self._handle_signals:
            return work()
        outcome: dict[str, object] = {}

        def worker() -> None:
            try:
                outcome["value"] = work()
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                outcome["error"] = exc

        thread = threading.Thread(target=worker, name="pipeline-run-work", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(timeout=0.2)  # short waits: the signal handlers run between them
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["value"]  # type: ignore[return-value]

    def reap(self) -> None:
        """Fail the runs whose heartbeat stopped; say so on stderr."""
        try:
            reaped = reap_dead_runs(self.instance, self.app_db, self.dead_after)
        except Exception as exc:  # noqa: BLE001 - the next round tries again; the run goes on
            if not self._reap_failing:  # one line per outage, not one per beat
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
                print(
                    f"warning: could not check other runs' heartbeats: {first}", file=sys.stderr, flush=True
                )
            self._reap_failing = True
            return
        self._reap_failing = False
        for dead in reaped:
            self.reaped.append(dead.run_id)
            print(
                f"run {dead.run_id} ({dead.job}) is dead (heartbeat stopped "
                f"{dead.heartbeat_age_seconds:.0f}s ago): marked failed, its pool slots freed, "
                f"{dead.claims_released} claims given back",
                file=sys.stderr,
                flush=True,
            )

    def wait_for_silent_holders(self, use_cases: Sequence[str], own_runs: Collection[str]) -> None:
        """Wait while runs other than `own_runs` hold claims on `use_cases` and have not beaten since
        this looked: each either beats (alive: it does its own work, no longer waited for), is reaped
        (its claims come back and the caller plans again), or lets its claims go; at most one
        heartbeat timeout and two beats. A holder killed a moment ago looks as young as a live one:
        only its next beat, or its missing, tells them apart."""
        deadline = time.monotonic() + self.dead_after + 2 * self.interval
        first_seen: dict[str, datetime] = {}
        while True:
            waiting = {}
            for run_id, (count, beat) in self._holders(use_cases, own_runs).items():
                if first_seen.setdefault(run_id, beat.beat_at) != beat.beat_at:
                    continue  # it beat since: alive
                waiting[run_id] = (count, beat)
                if run_id not in self._announced:
                    self._announced.add(run_id)
                    print(
                        f"waiting up to {self.dead_after:.0f}s for run {run_id} ({beat.job}, "
                        f"pid {beat.pid} on {beat.host}): it holds {count} claims; its last heartbeat "
                        f"was {beat.age_seconds():.0f}s ago",
                        file=sys.stderr,
                        flush=True,
                    )
            if not waiting:
                return
            if time.monotonic() >= deadline:
                print(
                    f"warning: {len(waiting)} runs still hold claims without beating: their subjects wait "
                    "for the next `pipeline run` or sensor tick",
                    file=sys.stderr,
                    flush=True,
                )
                return
            reaped_before = len(self.reaped)
            self.reap()
            if len(self.reaped) > reaped_before:
                return  # claims came back: the caller plans again
            time.sleep(min(HOLDER_POLL_SECONDS, self.interval, max(0.0, deadline - time.monotonic())))

    def _holders(
        self, use_cases: Sequence[str], own_runs: Collection[str]
    ) -> dict[str, tuple[int, heartbeats.Heartbeat]]:
        """Other runs holding claims on `use_cases` with a live heartbeat: run -> (claims, heartbeat).
        Holders without a heartbeat row (an older version) are left to the lease sweep."""
        with self.app_db.session() as session:
            held = {
                run_id: count
                for run_id, (count, _) in heartbeats.claims_by_run(session, use_cases).items()
                if run_id not in own_runs
            }
            beats = heartbeats.heartbeats_of(session, held) if held else {}
        return {
            run_id: (count, beats[run_id])
            for run_id, count in held.items()
            if run_id in beats and beats[run_id].state == "alive"
        }

    def _reap_loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.reap()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._stopping.is_set():  # a second Ctrl-C: no clean-up, just go
            os._exit(128 + signum)
        self._stopping.set()
        threading.Thread(target=self._abort, args=(signum,), name="pipeline-run-stop", daemon=True).start()

    def _abort(self, signum: int) -> None:
        """Give the run's claims back, mark it canceled, free its slots, one line, exit."""
        name = signal.Signals(signum).name
        run_id, released = self.current_run_id, 0
        try:
            if run_id is not None:
                with self.app_db.session() as session:
                    heartbeats.mark_dead(session, run_id, f"stopped by {name}")
                    released = claims.release_claims_of_runs(session, [run_id])
                fail_run(self.instance, run_id, f"`pipeline run` stopped by {name}", canceled=True)
            what = (
                f"run {run_id} canceled, {released} claims given back" if run_id else "no run was in progress"
            )
            message = f"pipeline run: stopped by {name}: {what}; the pending work waits for the next run"
        except Exception as exc:  # noqa: BLE001 - exit anyway: the heartbeat reaper finishes the job
            message = (
                f"pipeline run: stopped by {name}; clean-up failed ({exc}): the next run or sensor tick "
                "frees what this run held once its heartbeat is old"
            )
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            print(message, file=sys.stderr, flush=True)
        os._exit(128 + signum)
