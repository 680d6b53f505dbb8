"""The application database as a Dagster resource (SQLite file by default, PostgreSQL by URL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dagster import ConfigurableResource
from sqlalchemy.orm import Session

from appdb.database import migrate, session_scope


class AppDatabase(ConfigurableResource):
    """Postings, outputs, interactions and work state; migrated to the newest schema on first use."""

    url: str

    def ensure_ready(self) -> None:
        migrate(self.url)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One transaction: committed when the block ends, rolled back on error."""
        with session_scope(self.url) as session:
            yield session
