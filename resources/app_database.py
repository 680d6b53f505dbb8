"""The application database as a Dagster resource (SQLite file by default, PostgreSQL by URL).

In a run it also keeps the run's heartbeat (`resources/run_heartbeat.py`): resources are set up
before any step waits on the `llm` pool, so a run is visible as alive from then until it ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr
from sqlalchemy.orm import Session

from appdb import heartbeats
from appdb.database import migrate, session_scope
from resources.run_heartbeat import (
    DEFAULT_HEARTBEAT_SECONDS,
    DEFAULT_LEASE_SECONDS,
    RunHeartbeat,
    StepHeartbeat,
    dead_after_seconds,
)


class RunNotAlive(Exception):
    """A step of a run declared dead or ended: it must claim nothing (its work went to other runs)."""


def source_of_run(tags: dict[str, str]) -> str:
    """Who started the run, as `assets/run_tags.run_source` says it (resources cannot import assets)."""
    if tags.get("pipeline/source"):
        return tags["pipeline/source"][:20]
    return "sensor" if "dagster/sensor_name" in tags else "backfill" if "dagster/backfill" in tags else "ui"


class AppDatabase(ConfigurableResource):
    """Postings, outputs, interactions and work state; migrated to the newest schema on first use.
    heartbeat_seconds: how often a run shows it is alive (PIPELINE_HEARTBEAT_SECONDS); lease_seconds: the
    lease each beat renews on the claims the run holds (PIPELINE_LEASE_SECONDS, else 600)."""

    url: str
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    _heartbeat: RunHeartbeat | None = PrivateAttr(default=None)

    def ensure_ready(self) -> None:
        migrate(self.url)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back on error."""
        with session_scope(self.url) as session:
            yield session

    @property
    def away_from_run(self) -> bool:
        """Whether this process executes a step of a run whose own process is elsewhere (a Celery
        worker's): then each step beats a row of its own (`step_heartbeat`)."""
        return self._heartbeat is not None and not self._heartbeat.beats_here

    @contextmanager
    def step_heartbeat(self, run_id: str, step: str) -> Iterator[str | None]:
        """Around a step: in a process away from its run, the step's own heartbeat row, yielding this
        process's instance id (the fence of its claims), or raising `RunNotAlive` when the run was declared
        dead or ended (a step delivered again after its run was given up); in the run's own process, None
        (the run's heartbeat covers it)."""
        if not self.away_from_run:
            yield None
            return
        heartbeat = StepHeartbeat(self.url, run_id, step, self.heartbeat_seconds, self.lease_seconds)
        if not heartbeat.start():
            raise RunNotAlive(
                f"run {run_id} is no longer alive (declared dead or ended): step {step} does nothing"
            )
        try:
            self._wait_for_earlier_deliveries(run_id, step, heartbeat.instance_id)
            yield heartbeat.instance_id
        finally:
            heartbeat.stop()

    def _wait_for_earlier_deliveries(self, run_id: str, step: str, me: str) -> None:
        """A step delivered again (its worker was lost; the broker acknowledges late) finds the claims of
        the earlier delivery held by its own run: it waits until that process is dead (its heartbeat older
        than the timeout, judged here on the database's clock as the reaper does), declares it so, and so
        gets its claims back to claim them itself. Bounded: an earlier delivery that still beats keeps its
        claims (this one skips them as held)."""
        dead_after = dead_after_seconds(self.heartbeat_seconds)
        deadline = time.monotonic() + dead_after + 2 * self.heartbeat_seconds
        while True:
            with self.session() as session:
                earlier = [
                    beat
                    for beat in heartbeats.alive_step_heartbeats(session, run_id, step)
                    if beat.process.instance_id != me
                ]
                for beat in earlier:
                    if beat.age_seconds() > dead_after:
                        heartbeats.mark_step_dead(
                            session,
                            beat,
                            f"heartbeat stopped {beat.age_seconds():.0f}s ago (pid {beat.pid} on "
                            f"{beat.host}); the step was delivered again",
                        )
            if not earlier or all(beat.age_seconds() > dead_after for beat in earlier):
                return
            if time.monotonic() > deadline:
                return
            time.sleep(min(1.0, self.heartbeat_seconds))

    def setup_for_execution(self, context: InitResourceContext) -> None:
        run = context.run
        if run is None:  # a sensor or a schedule: no run to keep alive
            return
        # No teardown here: that would make this a context-manager resource, which sensors and tests
        # could then only open with `with`. The heartbeat ends itself when Dagster reports the run
        # finished, or when the process exits.
        self._heartbeat = RunHeartbeat(
            self.url,
            run.run_id,
            run.job_name,
            source_of_run(dict(run.tags)),
            self.heartbeat_seconds,
            self.lease_seconds,
        ).start(context.instance)
