"""Engines, sessions and migrations for the application database.

SQLite (the default) gets WAL, a busy timeout and foreign keys, so several runs can
share the file, and synchronous=NORMAL: in WAL mode a commit then skips its fsync (one
per stored posting), the database stays consistent after any crash, and only a power
loss can undo the last few commits (their postings are then simply discovered again).
The schema is owned by Alembic: `migrate()` upgrades to head and is
called on first use, so a fresh machine needs no separate set-up step.

A writer that holds SQLite's lock longer than the busy timeout (a long ingest, an open `sqlite3`
shell) does not fail runs: a statement that finds the database locked is retried with backoff for up
to `PIPELINE_SQLITE_LOCK_WAIT` seconds (default 600), then fails naming the file and how long it
waited (docs/sqlite-locks.md). Under pysqlite's transaction handling a statement can only meet the
lock as the first write of its transaction (reads take no lock in WAL mode, and the lock, once held,
is kept to the commit), so retrying that statement is retrying the transaction.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from appdb.local_files import create_private_file, make_private_dirs
from appdb.redaction import redact

if TYPE_CHECKING:  # Alembic is imported only to change the schema (~0.4 s of CPU a command otherwise)
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

LOCK_WAIT_ENV = "PIPELINE_SQLITE_LOCK_WAIT"
"""Named in the error of a statement that waited too long (the settings module reads it)."""
DEFAULT_BUSY_TIMEOUT_SECONDS = 30.0
DEFAULT_LOCK_WAIT_SECONDS = 600.0
MAX_LOCK_BACKOFF_SECONDS = 1.0

_log = logging.getLogger(__name__)
_Result = TypeVar("_Result")

_engines: dict[str, Engine] = {}
_factories: dict[Engine, sessionmaker[Session]] = {}  # session factories, one per engine
_migrated: set[str] = set()
_plugin_versions: list[Path] = []  # the plugins' own revision folders (`add_migrations`)
_lock = threading.Lock()
_upgrade_lock = threading.Lock()  # Alembic's migration context is module-global: one upgrade at a time


@lru_cache(maxsize=64)
def normalize_url(url: str) -> str:
    """Use psycopg2 for plain `postgresql://` URLs (the driver installed with the project). Cached: every
    session asks, and parsing the URL cost as much as opening the session."""
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


_sqlite_waits = {"busy_timeout": DEFAULT_BUSY_TIMEOUT_SECONDS, "lock_wait": DEFAULT_LOCK_WAIT_SECONDS}


def configure_sqlite(busy_timeout: float, lock_wait: float) -> None:
    """How long SQLite statements wait for the write lock, for the engines made from now on
    (PIPELINE_SQLITE_BUSY_TIMEOUT and PIPELINE_SQLITE_LOCK_WAIT, read by the settings module)."""
    _sqlite_waits.update(busy_timeout=busy_timeout, lock_wait=lock_wait)


class DatabaseUnavailable(SQLAlchemyError):
    """The application database cannot be opened: the server is unreachable, its driver is not installed,
    the SQLite file or its folder cannot be made. One line naming the URL (password masked) and the
    driver's own first line, which the command line prints instead of a traceback. A SQLAlchemy error,
    so whatever rode out a database that was briefly away (`except SQLAlchemyError`) still does."""

    def __init__(self, url: str, error: BaseException) -> None:
        cause = getattr(error, "orig", None) or error  # SQLAlchemy's wrapper: the driver's error says it
        lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
        reason = lines[0] if lines else type(cause).__name__
        super().__init__(f"cannot open the application database {redact(url)}: {reason}")
        self.url = url


def opened_engine(url: str) -> Engine:
    """The URL's engine once a connection to it opened; `DatabaseUnavailable` when none can be."""
    try:
        engine = get_engine(url)
        with engine.connect():
            pass
    except (OSError, ImportError, SQLAlchemyError) as exc:
        raise DatabaseUnavailable(url, exc) from exc
    return engine


class DatabaseLockedError(sqlite3.OperationalError):
    """Another connection kept SQLite's write lock past the lock wait: says which file and how long."""


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    message = str(exc).lower()
    return "database is locked" in message or "database is busy" in message


def _retry_while_locked(connection: LockRetryingConnection, statement: Callable[[], _Result]) -> _Result:
    """Run `statement`; while SQLite reports the database locked, wait with backoff and run it again,
    for up to the connection's lock wait, then fail naming the lock."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return statement()
        except DatabaseLockedError:
            raise
        except sqlite3.OperationalError as exc:
            if not _is_locked(exc):
                raise
            waited = time.monotonic() - started
            if waited >= connection.lock_wait_seconds:
                raise DatabaseLockedError(
                    f"database is locked: another connection held the write lock of {connection.path} "
                    f"for {waited:.0f}s (over {connection.lock_wait_seconds:g}s, {LOCK_WAIT_ENV}); "
                    "a long ingest or an open sqlite3 shell? Nothing was written by this statement"
                ) from exc
            if attempt == 0:
                _log.warning(
                    "%s is locked by another writer; waiting up to %gs",
                    connection.path,
                    connection.lock_wait_seconds,
                )
            time.sleep(min(MAX_LOCK_BACKOFF_SECONDS, 0.05 * 2**attempt))
            attempt += 1


class LockRetryingCursor(sqlite3.Cursor):
    """A cursor whose statements ride out a writer holding the lock (see the module's docstring)."""

    connection: LockRetryingConnection

    def execute(self, sql: str, parameters: Any = (), /) -> LockRetryingCursor:
        return _retry_while_locked(self.connection, lambda: sqlite3.Cursor.execute(self, sql, parameters))

    def executemany(self, sql: str, parameters: Any, /) -> LockRetryingCursor:
        rows = list(parameters)  # an iterator could not be replayed
        return _retry_while_locked(self.connection, lambda: sqlite3.Cursor.executemany(self, sql, rows))


class LockRetryingConnection(sqlite3.Connection):
    """pysqlite's connection with `LockRetryingCursor`s; `path` and `lock_wait_seconds` set on connect."""

    path: str = ""
    lock_wait_seconds: float = DEFAULT_LOCK_WAIT_SECONDS

    def cursor(self, factory: Any = LockRetryingCursor) -> Any:  # noqa: ANN401 - sqlite3's signature
        return super().cursor(factory)


IDLE_PING_SECONDS = 10.0  # a pooled connection idle this long is checked before it is handed out
_IDLE_SINCE = "pipeline_idle_since"


def ping_when_idle(engine: Engine, idle_seconds: float = IDLE_PING_SECONDS) -> Engine:
    """Check a pooled server connection with a round trip before handing it out, but only if it sat
    in the pool for `idle_seconds` or more; a dead one is replaced, as `pool_pre_ping` would.

    `pool_pre_ping` pings on every checkout: a run checks a connection out several times a posting
    (its claims, its outputs, Dagster's events), and the pings were 6 % of a run worker's py-spy
    samples and 12 % of the daemon's on PostgreSQL (10,000 postings). A connection used a moment ago is alive
    unless the server went away in that moment, which a ping just before the query could not rule
    out either; the statement then fails, and SQLAlchemy drops the pool's other connections."""

    @event.listens_for(engine, "checkin")
    def _idle_from(_dbapi_connection: Any, record: Any) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since < idle_seconds:
            return  # new, or back from work a moment ago
        dialect = engine.dialect
        try:
            dialect.do_ping(dbapi_connection)
        except dialect.loaded_dbapi.Error as error:
            if dialect.is_disconnect(error, dbapi_connection, None):
                raise DisconnectionError(str(error)) from error  # the pool connects anew
            raise

    return engine


def _create_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return ping_when_idle(create_engine(url))
    if parsed.database and parsed.database != ":memory:":
        # the postings and outputs are the owner's: a new data directory is 0700, a new database 0600
        # (SQLite gives its -wal and -shm files the database file's mode)
        make_private_dirs(Path(parsed.database).parent)
        create_private_file(Path(parsed.database))
    busy_timeout, lock_wait = _sqlite_waits["busy_timeout"], _sqlite_waits["lock_wait"]
    engine = create_engine(url, connect_args={"timeout": busy_timeout, "factory": LockRetryingConnection})

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_connection, _record) -> None:  # noqa: ANN001 - DBAPI types
        dbapi_connection.path = parsed.database or ":memory:"
        dbapi_connection.lock_wait_seconds = lock_wait
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        cursor.close()

    return engine


def add_migrations(folder: Path) -> None:
    """A plugin's own Alembic revisions, applied with the engine's: a branch of its own that starts at
    `down_revision = None` with `branch_labels = ("<plugin>",)`, so a database keeps one
    `alembic_version` row per branch, the engine's history (0001 and on) stays as it was, and a
    process that does not know the plugin leaves its branch alone. (Its tables name no engine table in
    a foreign key: branches are applied in no set order.) The entry's registry adds every registered
    plugin's."""
    folder = Path(folder).resolve()
    with _lock:
        if folder in _plugin_versions:
            return
        _plugin_versions.append(folder)
        _migrated.clear()  # a database may now have revisions to apply
    head_revisions.cache_clear()
    head_revision.cache_clear()


def remove_migrations(folder: Path) -> None:
    """Undo `add_migrations` (tests that register a plugin of their own)."""
    folder = Path(folder).resolve()
    with _lock:
        if folder in _plugin_versions:
            _plugin_versions.remove(folder)
        _migrated.clear()
    head_revisions.cache_clear()
    head_revision.cache_clear()


def version_folders() -> list[Path]:
    """Where the revisions are: the engine's folder, then each added plugin's."""
    with _lock:
        return [MIGRATIONS_DIR / "versions", *_plugin_versions]


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")  # Alembic 1.16+
    config.set_main_option("version_path_separator", "os")  # before 1.16 (1.16+ reads path_separator)
    config.set_main_option(
        "version_locations", os.pathsep.join(str(folder) for folder in version_folders()).replace("%", "%%")
    )
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    return config


def migrate(url: str) -> None:
    """Upgrade the schema to the newest migration (non-destructive; a no-op when current).
    `DatabaseUnavailable` when the database cannot be opened at all."""
    given, url = url, normalize_url(url)
    with _lock:
        if url in _migrated:
            return
    opened_engine(given)  # an unreachable server is not "a new database": say so, naming the URL given
    if _at_head(url):  # the common case, without loading Alembic
        with _lock:
            _migrated.add(url)
        return
    from alembic import command

    # Threads of one process (a code server's sensors at start-up) must not upgrade side by side:
    # Alembic's proxy of the running context is a module global, and the second one's exit raised.
    with _upgrade_lock:
        with _lock:
            if url in _migrated:
                return
        engine = get_engine(url)
        config = alembic_config(url)
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "heads")  # the engine's and each plugin's branch
        with _lock:
            _migrated.add(url)


_REVISION = re.compile(r"^(down_)?revision\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|None)", re.MULTILINE)


@cache
def head_revisions() -> frozenset[str] | None:
    """The newest revision of each branch (the engine's, each added plugin's), read from the migration
    files (`revision = "..."`, `down_revision = "..."`): those no other names as its parent. None when a
    file is unusual: then `migrate` asks Alembic."""
    revisions, parents = set(), set()
    for folder in version_folders():
        for path in folder.glob("*.py"):
            for down, double, single in (match.groups() for match in _REVISION.finditer(path.read_text())):
                value = double or single
                if value:
                    (parents if down else revisions).add(value)
    heads = revisions - parents
    return frozenset(heads) if heads else None


@cache
def head_revision() -> str | None:
    """The newest revision when there is one branch (the engine's alone), else None."""
    heads = head_revisions()
    return next(iter(heads)) if heads is not None and len(heads) == 1 else None


def _at_head(url: str) -> bool:
    """Whether the database is at the newest revision of every known branch already (False when unsure).
    A row of a branch this process does not know (a plugin it has not registered) is left alone."""
    heads = head_revisions()
    if heads is None:
        return False
    try:
        with get_engine(url).connect() as connection:
            stored = set(connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all())
    except SQLAlchemyError:  # no such table yet: a new database
        return False
    return heads <= stored


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session in one transaction: committed on success, rolled back on any error."""
    migrate(url)
    engine = get_engine(url)
    factory = _factories.get(engine)
    if factory is None:  # one per engine: building one per session cost more than the session
        factory = _factories[engine] = sessionmaker(engine, expire_on_commit=False)
    with factory() as session, session.begin():
        yield session


def dispose(url: str) -> None:
    """Close this process's connections to `url` (before dropping a test database, say)."""
    url = normalize_url(url)
    with _lock:
        engine = _engines.pop(url, None)
        _factories.pop(engine, None)
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
        raise ValueError(f"no application database at {url} (nothing has been loaded yet)")
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    with opened_engine(url).connect() as connection:
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
