"""The application database as a Dagster resource (SQLite file by default, PostgreSQL by URL).

In a run it also keeps the run's heartbeat (`resources/run_heartbeat.py`): resources are set up
before any step waits on the `llm` pool, so a run is visible as alive from then until it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr
from sqlalchemy.orm import Session

from appdb.database import migrate, session_scope
from resources.run_heartbeat import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_LEASE_SECONDS, RunHeartbeat


def _source(tags: dict[str, str]) -> str:
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
            _source(dict(run.tags)),
            self.heartbeat_seconds,
            self.lease_seconds,
        ).start(context.instance)
