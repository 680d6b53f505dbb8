"""Dagster event log storages that keep their database connections open.

Each posting partition costs Dagster two event-log writes (the planned materialization
when the run is created, the materialization when the posting is done), and Dagster's
own SQLite and PostgreSQL event log storages open and close a database connection for
every write (`NullPool`): on SQLite that is a connect, a commit with fsync and a close
that checkpoints the WAL, twice per event (run shard and index shard); on PostgreSQL a
new server connection per write. That alone cost about 25-60 ms per posting per asset
here (see README, Performance), a third of an LLM call at GPU speed.

These subclasses change only how connections are made; the tables, the files, the
events and what the UI shows are Dagster's:
- `PooledSqliteEventLogStorage`: one small connection pool per database file (the index
  shard and the few most recently used run shards), `synchronous=NORMAL` (in WAL mode a
  commit is then not fsynced; a power loss, never a process crash, can lose the last
  events, and the database stays consistent).
- `PooledPostgresEventLogStorage`: a pool of one connection (plus overflow for other
  threads), checked with a ping before use, as `dagster-webserver` does for itself, and
  `synchronous_commit=off` on those connections: a commit does not wait for the WAL
  flush (three per event here), so a crash of the PostgreSQL *server* can lose the
  last fraction of a second of events, never corrupt them. Runs, schedules and the
  application database keep full durability.

`pipeline_defs.dagster_home` writes them into the dagster.yaml of a new DAGSTER_HOME.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine

# Run shards kept open besides the index shard: a process writes one run at a time, and the
# UI reads a few; older ones are closed (and their WAL checkpointed) when they drop out.
OPEN_RUN_SHARDS = 4


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log storage with pooled connections and synchronous=NORMAL."""

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        super().__init__(base_dir, inst_data)

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def _engine_for(self, shard: str) -> Engine:
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
                return engine
            engine = create_engine(
                self.conn_string_for_shard(shard),
                pool_size=1,
                max_overflow=4,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
            )
            event.listen(engine, "connect", _sqlite_synchronous_normal)
            self._engines[shard] = engine
            run_shards = [name for name in self._engines if name != INDEX_SHARD_NAME]
            for name in run_shards[:-OPEN_RUN_SHARDS]:
                self._engines.pop(name).dispose()
            return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        # The same steps as Dagster's `_connect`, with an engine that outlives the call.
        with self._db_lock:
            engine = self._engine_for(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def dispose(self) -> None:
        with self._engines_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()
        super().dispose()


def _sqlite_synchronous_normal(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _postgres_asynchronous_commit(dbapi_connection: Any, _record: Any) -> None:
    with dbapi_connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit TO off")
    if not dbapi_connection.autocommit:
        dbapi_connection.commit()


try:  # dagster-postgres is a dependency, but keep the SQLite storage usable without it
    from dagster_postgres.event_log.event_log import PostgresEventLogStorage
    from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config
except ImportError:  # pragma: no cover
    PostgresEventLogStorage = None  # type: ignore[assignment,misc]


if PostgresEventLogStorage is not None:

    class PooledPostgresEventLogStorage(PostgresEventLogStorage):
        """dagster-postgres's event log storage with a pooled, pinged connection instead of NullPool."""

        def __init__(
            self,
            postgres_url: str,
            should_autocreate_tables: bool = True,
            inst_data: ConfigurableClassData | None = None,
            token_provider: Any = None,
        ) -> None:
            super().__init__(postgres_url, should_autocreate_tables, inst_data, token_provider)
            unpooled = self._engine
            self._engine = create_pg_engine(
                self.postgres_url,
                self._token_provider,
                isolation_level="AUTOCOMMIT",
                pool_size=1,
                max_overflow=8,
                pool_recycle=3600,
                pool_pre_ping=True,
            )
            event.listen(self._engine, "connect", _postgres_asynchronous_commit)
            unpooled.dispose()

        @classmethod
        def from_config_value(  # ty: ignore[invalid-method-override]
            cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
        ) -> PooledPostgresEventLogStorage:
            return cls(
                inst_data=inst_data,
                postgres_url=pg_url_from_config(config_value),
                should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                token_provider=get_token_provider_from_config(config_value),
            )

        def dispose(self) -> None:
            super().dispose()
            self._engine.dispose()
