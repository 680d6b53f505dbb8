"""Engines, sessions and migrations for the application database.

SQLite (the default) gets WAL, a busy timeout and foreign keys, so several runs can
share the file, and synchronous=NORMAL: in WAL mode a commit then skips its fsync (one
per stored posting), the database stays consistent after any crash, and only a power
loss can undo the last few commits (their postings are then simply discovered again).
The schema is owned by Alembic: `migrate()` upgrades to head and is
called on first use, so a fresh machine needs no separate set-up step.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

_engines: dict[str, Engine] = {}
_migrated: set[str] = set()
_lock = threading.Lock()


def normalize_url(url: str) -> str:
    """Use psycopg2 for plain `postgresql://` URLs (the driver installed with the project)."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg2")
    return parsed.render_as_string(hide_password=False)


def get_engine(url: str) -> Engine:
    """One engine per URL per process (engines own connection pools)."""
    url = normalize_url(url)
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _create_engine(url)
            _engines[url] = engine
        return engine


def _create_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001 - DBAPI types
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    return engine


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def migrate(url: str) -> None:
    """Upgrade the schema to the newest migration (non-destructive; a no-op when current)."""
    url = normalize_url(url)
    with _lock:
        if url in _migrated:
            return
    engine = get_engine(url)
    config = alembic_config(url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    with _lock:
        _migrated.add(url)


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on any error."""
    migrate(url)
    factory = sessionmaker(get_engine(url), expire_on_commit=False)
    with factory() as session, session.begin():
        yield session


def dispose(url: str) -> None:
    """Close this process's connections to `url` (before dropping a test database, say)."""
    url = normalize_url(url)
    with _lock:
        engine = _engines.pop(url, None)
        _migrated.discard(url)
    if engine is not None:
        engine.dispose()


@contextmanager
def read_only_session(url: str) -> Iterator[Session]:
    """A session on an existing, current database that is rolled back at the end: it never writes.

    Unlike `session_scope`, it neither creates the database nor migrates it.
    """
    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() == "sqlite" and parsed.database and not Path(parsed.database).is_file():
        raise ValueError(f"no application database at {url} (ingest postings first)")
    with get_engine(url).connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
        if current != head:
            raise ValueError(
                f"the application database at {url} is at schema {current or 'none'}, not {head}: "
                "run `pipeline migrate` first"
            )
        with Session(bind=connection) as session:
            yield session
        connection.rollback()
