"""Dagster storages that keep their database connections open, and write events in fewer trips.

Each posting partition costs Dagster two event-log writes (the planned materialization
when the run is created, the materialization when the posting is done), and Dagster's
own SQLite and PostgreSQL storages open and close a database connection for every
operation (`NullPool`): on SQLite that is a connect, a commit with fsync and a close
that checkpoints the WAL, twice per event (run shard and index shard); on PostgreSQL a
new server connection per write. That alone cost about 25-60 ms per posting per asset
here (see README, Performance), a third of an LLM call at GPU speed.

These subclasses change how connections are made and how events are written; the
tables, the files, the events and what the UI shows are Dagster's (they override private
methods of dagster 1.13 and dagster-postgres 0.29, which pyproject pins):
- `PooledSqliteEventLogStorage`: one small connection pool per database file (the index
  shard and the few most recently used run shards), `synchronous=NORMAL` (in WAL mode a
  commit is then not fsynced; a power loss, never a process crash, can lose the last
  events, and the database stays consistent). Per asset event Dagster's SQLite storage
  also reflects the `asset_keys` columns and tries an INSERT that fails for every known
  asset before it UPDATEs; here the column check is remembered and the row upserted in
  one statement, as dagster-postgres does. A new run's database file is a copy of one
  initialized once per process (Dagster's set-up, which reads every migration file, took
  ~0.2 s per run).
- `PooledPostgresEventLogStorage`: a pool of one connection (plus overflow for other
  threads), checked with a ping before use, as `dagster-webserver` does for itself, and
  `synchronous_commit=off` on those connections: a commit does not wait for the WAL
  flush, so a crash of the PostgreSQL *server* can lose the last fraction of a second of
  events, never corrupt them. An asset event and its index rows are written in one
  transaction on one connection (dagster-postgres: two, plus a NOTIFY nobody listens to).
- Both event log storages remember the tables and columns they have seen (`RemembersEventLogSchema`):
  Dagster checks for its tags table before every asset event, on a second connection, which
  with a pool of one meant a new database connection per posting. Both run storages remember
  the optional columns of the runs table (`RemembersRunColumns`): Dagster reflected them
  about six times per run.
- Both event log storages serialize a materialization once (`SerializesAssetEventsOnce`): Dagster
  serialized it again, wrapped in a record, for the asset row's `last_materialization`.
- `PooledSqliteRunStorage`, `PooledPostgresRunStorage`: Dagster's run storages with a
  pooled engine; their commits keep Dagster's durability, as does the application database.

Both event log storages also write a batch of events in one go (`store_event_batch`): one
transaction per database file, where Dagster's SQLite storage loops and dagster-postgres
batches only materializations. Dagster sends batches only when DAGSTER_EVENT_BATCH_SIZE is
above 0, and (for our assets, which log one materialization per posting) what it batches
is the planned materialization of every posting partition, written when a run is created.
The `event_batch_size` config field (default 1000) sets that variable in each process that
uses the storage, unless the environment already sets it.

`pipeline_defs.runtime.dagster_home` writes them into the dagster.yaml of a new DAGSTER_HOME. The private
methods they override are pinned by `tests/unit/test_dagster_private_api.py`, the migrations folder read
once per process by `tests/unit/test_dagster_runtime_swaps.py`.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from alembic.script import ScriptDirectory
from dagster import Field, IntSource
from dagster._config.config_schema import UserConfigSchema
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage import sql as dagster_sql
from dagster._core.storage.event_log.schema import AssetKeyTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from dagster._time import datetime_from_timestamp
from sqlalchemy import create_engine, event
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

from appdb.database import normalize_url, ping_when_idle
from pipeline_defs.settings import export_for_dagster


class _ScriptDirectoryOnce:
    """Stands in for alembic's `ScriptDirectory` in Dagster's `check_alembic_revision`: one directory
    (and its revision map, read once) per migrations folder and process.

    Dagster compares a storage's revision with the head of its migrations every time it opens the
    storage: every `DagsterInstance.from_ref`, which the code server makes for every sensor tick and
    every run for its own process. Each time alembic read and executed every migration file anew (about
    90 of them for the run, event log and schedule storages): 85% of opening an instance, 0.05 CPU s
    a tick here. The installed migrations do not change while a process lives."""

    _directories: dict[str, ScriptDirectory] = {}
    _lock = threading.Lock()

    @classmethod
    def from_config(cls, config: Any) -> ScriptDirectory:
        location = str(config.get_main_option("script_location"))
        with cls._lock:
            directory = cls._directories.get(location)
            if directory is None:
                directory = cls._directories[location] = ScriptDirectory.from_config(config)
            return directory


def _read_migrations_once() -> None:
    """Point Dagster's revision check at `_ScriptDirectoryOnce` (where this Dagster has it, as 1.13 does:
    pinned by tests/unit/test_dagster_runtime_swaps.py)."""
    if getattr(dagster_sql, "ScriptDirectory", None) is ScriptDirectory:
        dagster_sql.ScriptDirectory = _ScriptDirectoryOnce  # ty: ignore[invalid-assignment]


_read_migrations_once()

DEFAULT_EVENT_BATCH_SIZE = 1000
EVENT_BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"  # read by DagsterInstance on every event

# Run shards kept open besides the index shard: a process writes one run at a time, and the
# UI reads a few; older ones are closed (and their WAL checkpointed) when they drop out.
OPEN_RUN_SHARDS = 4


def _remembered(storage: object, feature: str, ask: Callable[[], bool]) -> bool:
    """Whether the storage's schema has `feature`, asked once it is present: tables and columns
    only ever appear (`dagster instance migrate`), so only a missing one is asked again."""
    seen: set[str] = storage.__dict__.setdefault("_schema_seen", set())
    if feature in seen:
        return True
    present = ask()
    if present:
        seen.add(feature)
    return present


class RemembersEventLogSchema:
    """An event log storage's tables and asset-key columns, answered from memory once seen.
    Dagster asks for its tags table before writing the tags of every asset event, on a second
    connection (SQLite: a new engine each time), and reflects the asset-key table's columns
    several times per run."""

    def has_table(self, table_name: str) -> bool:
        ask = super().has_table  # ty: ignore[unresolved-attribute]
        return _remembered(self, f"table {table_name}", lambda: ask(table_name))

    def _has_asset_key_col_on_connection(self, conn: Connection, column_name: str) -> bool:
        ask = super()._has_asset_key_col_on_connection  # ty: ignore[unresolved-attribute]
        return _remembered(self, f"asset_keys.{column_name}", lambda: ask(conn, column_name))


class SerializesAssetEventsOnce:
    """An asset materialization serialized once per write, not twice.

    Dagster stores each materialization as its event-log row and again, wrapped in an
    `EventLogRecord`, as the asset's `last_materialization`, serializing the event anew for the
    second (its metadata, the posting's preview table, is most of the cost: ~0.4 ms an event).
    The wrapped form is the record's fields around the event's own serialization, so it is built
    from the row's string; the bytes are the same (tests/unit/test_asset_event_serialized_once.py)."""

    def _event_to_row(self, event: EventLogEntry) -> dict[str, Any]:
        row = super()._event_to_row(event)  # ty: ignore[unresolved-attribute]
        _last_serialized.entry = (event, row["event"])
        return row

    def _get_asset_entry_values(
        self, event: EventLogEntry, event_id: int, has_asset_key_index_cols: bool
    ) -> dict[str, Any]:
        stashed = getattr(_last_serialized, "entry", None)
        dagster_event = event.dagster_event
        if stashed is None or stashed[0] is not event or dagster_event is None:
            return super()._get_asset_entry_values(event, event_id, has_asset_key_index_cols)  # ty: ignore[unresolved-attribute]
        if not dagster_event.is_step_materialization:
            return super()._get_asset_entry_values(event, event_id, has_asset_key_index_cols)  # ty: ignore[unresolved-attribute]
        values: dict[str, Any] = {
            "last_materialization": event_log_record_json(stashed[1], event_id),
            "last_run_id": event.run_id,
        }
        if has_asset_key_index_cols:
            values["last_materialization_timestamp"] = datetime_from_timestamp(event.timestamp)
        return values


_last_serialized = threading.local()  # the event whose row this thread built last, and its string


def event_log_record_json(serialized_event: str, storage_id: int) -> str:
    """`serialize_value(EventLogRecord(storage_id, event))` from the event's own serialization."""
    return (
        f'{{"__class__": "EventLogRecord", "event_log_entry": {serialized_event}, '
        f'"storage_id": {storage_id}}}'
    )


class RemembersRunColumns:
    """A run storage's optional columns, answered from memory once seen: Dagster reflects the
    runs table's columns about six times per run (a schema query each on PostgreSQL)."""

    def has_run_stats_index_cols(self) -> bool:
        return _remembered(self, "runs.start_time", super().has_run_stats_index_cols)  # ty: ignore[unresolved-attribute]

    def has_backfill_id_column(self) -> bool:
        return _remembered(self, "runs.backfill_id", super().has_backfill_id_column)  # ty: ignore[unresolved-attribute]


class HoldsAssetEventsForABatch:
    """A run's materializations stored a batch at a time instead of one write each.

    While `holding_asset_events()` is open in a thread, the materializations (and observations)
    Dagster stores from that thread wait, and go in one `store_event_batch` when the holder flushes
    them, when `max_events` wait or the first has waited `max_seconds`, when any other event comes
    (so the log keeps its order: a check's evaluation finds the materialization it follows), and when
    the holder closes. Storing materializations one at a time was a fifth of a run worker's samples
    holding the GIL on PostgreSQL (py-spy, 10,000 postings): a connection, three statements and a
    commit each. The outputs are
    committed to the application database before Dagster hears of them, so a crash while events wait
    loses what a crash between that commit and the event's own write lost before: Dagster's record
    of the last few, never an output."""

    def _held(self) -> list[EventLogEntry] | None:
        local = self.__dict__.get("_holding")
        return getattr(local, "events", None) if local is not None else None

    @contextmanager
    def holding_asset_events(
        self, max_events: int = 50, max_seconds: float = 0.5
    ) -> Iterator[Callable[..., None]]:
        """Hold this thread's asset events; yields the flush, `flush_held_events` (nested holders share
        the outer one)."""
        local = self.__dict__.setdefault("_holding", threading.local())
        if getattr(local, "events", None) is not None:
            yield self.flush_held_events
            return
        local.events, local.since, local.limits = [], 0.0, (max_events, max_seconds)
        try:
            yield self.flush_held_events
        finally:
            try:
                self.flush_held_events()
            finally:
                local.events = None

    def flush_held_events(self, only_if_due: bool = False) -> None:
        held = self._held()
        if not held:
            return
        local = self.__dict__["_holding"]
        max_events, max_seconds = local.limits
        if only_if_due and len(held) < max_events and time.monotonic() - local.since < max_seconds:
            return
        events = list(held)
        held.clear()
        local.events = None  # while they are stored, nothing is held back
        try:
            try:
                self.store_event_batch(events)  # ty: ignore[unresolved-attribute]
            except Exception:  # as Dagster does with a batch that fails: one by one
                for stored in events:
                    self.store_event(stored)  # ty: ignore[unresolved-attribute]
        finally:
            local.events = held

    def _held_back(self, event: EventLogEntry) -> bool:
        """Whether `event` waits in this thread's batch (else whatever waits is stored first)."""
        held = self._held()
        if held is None:
            return False
        if _batchable(event):
            if not held:
                self.__dict__["_holding"].since = time.monotonic()
            held.append(event)
            self.flush_held_events(only_if_due=True)
            return True
        self.flush_held_events()
        return False


class PooledSqliteEventLogStorage(
    HoldsAssetEventsForABatch, SerializesAssetEventsOnce, RemembersEventLogSchema, SqliteEventLogStorage
):
    """Dagster's SQLite event log storage with pooled connections and synchronous=NORMAL."""

    def __init__(
        self,
        base_dir: str,
        inst_data: ConfigurableClassData | None = None,
        event_batch_size: int = DEFAULT_EVENT_BATCH_SIZE,
    ) -> None:
        _use_event_batches(event_batch_size)
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        self._shard_template: bytes | None = None
        super().__init__(base_dir, inst_data)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return {**super().config_type(), **_BATCH_CONFIG}

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
            engine = _pooled_sqlite_engine(self.conn_string_for_shard(shard))
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
            if shard not in self._initialized_dbs:
                if shard == INDEX_SHARD_NAME or not self._create_run_shard(shard):
                    self._initdb(self._engine_for(shard))
                self._initialized_dbs.add(shard)
            engine = self._engine_for(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _create_run_shard(self, shard: str) -> bool:
        """Create a new run's database as a copy of one Dagster initialized earlier in this process.

        Initializing it (tables, indexes, Alembic stamp; the stamp reads every migration file)
        took ~0.2 s per run. False when the file already exists: then Dagster's own check runs.
        """
        path = self.path_for_shard(shard)
        if os.path.exists(path):
            return False
        if self._shard_template is None:
            self._shard_template = self._initialized_shard_bytes()
        temporary = f"{path}.{os.getpid()}.{threading.get_ident()}.new"
        with open(temporary, "wb") as handle:
            handle.write(self._shard_template)
        try:
            os.link(temporary, path)  # never replaces a shard another process created meanwhile
        except OSError:  # it exists now, or the file system has no hard links: Dagster's own way
            return False
        finally:
            os.remove(temporary)
        return True

    def _initialized_shard_bytes(self) -> bytes:
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "template.db")
            engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
            try:
                self._initdb(engine)
            finally:
                engine.dispose()
            with open(path, "rb") as handle:
                return handle.read()

    def _store_asset_event(self, conn: Connection, event: EventLogEntry, event_id: int) -> None:
        if not (event.dagster_event and event.dagster_event.asset_key):
            return
        values = self._get_asset_entry_values(
            event, event_id, self._has_asset_key_index_cols_on_connection(conn)
        )
        if not values:
            return
        insert = sqlite_insert(AssetKeyTable).values(
            asset_key=event.dagster_event.asset_key.to_string(), **values
        )
        conn.execute(insert.on_conflict_do_update(index_elements=[AssetKeyTable.c.asset_key], set_=values))

    def store_event(self, event: EventLogEntry) -> None:
        if not self._held_back(event):
            super().store_event(event)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """A batch (the planned materializations of a run) in one transaction per database file,
        instead of two transactions per event."""
        batched = [event for event in events if _batchable(event)]
        if batched:
            statements = [self.prepare_insert_event(event) for event in batched]
            for run_id in dict.fromkeys(event.run_id for event in batched):
                with self.run_connection(run_id) as conn:
                    for event, statement in zip(batched, statements, strict=True):
                        if event.run_id == run_id:
                            conn.execute(statement)
            with self.index_transaction() as conn:
                for event, statement in zip(batched, statements, strict=True):
                    event_id = conn.execute(statement).inserted_primary_key[0]
                    self._store_asset_event_tags(conn, [event], [event_id])
                    self._store_asset_event(conn, event, event_id)
        for event in events:
            if not _batchable(event):
                self.store_event(event)

    def dispose(self) -> None:
        with self._engines_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()
        super().dispose()


# Events whose storage is an event-log row plus the asset index (tags, asset_keys row) and nothing
# else; any other event in a batch (an asset check's planned evaluation, say) is stored on its own.
_BATCHABLE = {
    DagsterEventType.ASSET_MATERIALIZATION,
    DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    DagsterEventType.ASSET_OBSERVATION,
}


class PooledSqliteRunStorage(RemembersRunColumns, SqliteRunStorage):
    """Dagster's SQLite run storage with one pooled engine instead of an engine per operation
    (a run reads and writes its record a dozen times). Commits keep Dagster's durability."""

    def __init__(self, conn_string: str, inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(conn_string, inst_data)
        self._pooled = _pooled_sqlite_engine(conn_string)

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledSqliteRunStorage:
        return cls.from_local(inst_data=inst_data, **config_value)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._pooled.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()
        self._pooled.dispose()


class RemembersScheduleSchema:
    """A schedule storage's tables and built indexes, answered from memory once seen. Dagster's asks
    for them around every read and write of a sensor's state or tick (the daemon does both every tick
    of every sensor): each answer a new connection and, for tables, a reflection of the schema."""

    def _has_instigators_table(self, conn: Connection) -> bool:
        ask = super()._has_instigators_table  # ty: ignore[unresolved-attribute]
        return _remembered(self, "table instigators", lambda: ask(conn))

    def _has_asset_daemon_asset_evaluations_table(self, conn: Connection) -> bool:
        ask = super()._has_asset_daemon_asset_evaluations_table  # ty: ignore[unresolved-attribute]
        return _remembered(self, "table asset_daemon_asset_evaluations", lambda: ask(conn))

    def has_instigators_table(self) -> bool:
        return _remembered(self, "table instigators", super().has_instigators_table)  # ty: ignore[unresolved-attribute]

    def has_secondary_index_table(self) -> bool:
        return _remembered(self, "table secondary_indexes", super().has_secondary_index_table)  # ty: ignore[unresolved-attribute]

    def has_built_index(self, migration_name: str) -> bool:
        ask = super().has_built_index  # ty: ignore[unresolved-attribute]
        return _remembered(self, f"index {migration_name}", lambda: ask(migration_name))


class PooledSqliteScheduleStorage(RemembersScheduleSchema, SqliteScheduleStorage):
    """Dagster's SQLite schedule storage (sensor states, cursors, ticks) with one pooled engine instead
    of an engine per operation. Commits keep Dagster's durability."""

    def __init__(self, conn_string: str, inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(conn_string, inst_data)
        self._pooled = _pooled_sqlite_engine(conn_string)

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledSqliteScheduleStorage:
        return cls.from_local(inst_data=inst_data, **config_value)

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        with self._pooled.connect() as conn, conn.begin():
            yield conn

    def dispose(self) -> None:
        super().dispose()
        self._pooled.dispose()


_BATCH_CONFIG = {
    "event_batch_size": Field(
        IntSource,
        is_required=False,
        default_value=DEFAULT_EVENT_BATCH_SIZE,
        description=f"{EVENT_BATCH_SIZE_ENV} for processes using this storage, unless set; 0 disables",
    )
}


_EVENT_INSERT = SqlEventLogStorageTable.insert().returning(
    SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
)  # ids in the order of the rows given


def _use_event_batches(size: int) -> None:
    export_for_dagster(EVENT_BATCH_SIZE_ENV, str(size), unless_set=True)


def _batchable(event: EventLogEntry) -> bool:
    return event.is_dagster_event and event.get_dagster_event().event_type in _BATCHABLE


def _asset_and_kind(event: EventLogEntry) -> tuple[Any, Any]:
    dagster_event = event.get_dagster_event()
    return dagster_event.asset_key, dagster_event.event_type


def _pooled_sqlite_engine(url: str) -> Engine:
    """One connection kept open (a few more for other threads), shareable across threads."""
    return create_engine(
        url,
        pool_size=1,
        max_overflow=4,
        connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
    )


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
    from dagster_postgres.run_storage.run_storage import PostgresRunStorage
    from dagster_postgres.schedule_storage.schedule_storage import PostgresScheduleStorage
    from dagster_postgres.utils import create_pg_engine, get_token_provider_from_config, pg_url_from_config
except ImportError:  # pragma: no cover
    PostgresEventLogStorage = None  # type: ignore[assignment,misc]


if PostgresEventLogStorage is not None:

    def _postgres_storage_args(config_value: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor arguments dagster-postgres reads from a storage's config."""
        return {
            # psycopg2 for a bare postgresql:// read from the environment (dagster.yaml names the variable)
            "postgres_url": normalize_url(pg_url_from_config(config_value)),
            "should_autocreate_tables": config_value.get("should_autocreate_tables", True),
            "token_provider": get_token_provider_from_config(config_value),
        }

    def _replace_with_pooled_pg_engine(storage: Any) -> Engine:
        """A pooled, pinged engine for a dagster-postgres storage, disposing of its NullPool one
        (as `dagster-webserver` pools its own connections)."""
        storage._engine.dispose()
        engine = create_pg_engine(
            storage.postgres_url,
            storage._token_provider,
            isolation_level="AUTOCOMMIT",
            pool_size=1,
            max_overflow=8,
            pool_recycle=3600,
        )
        return ping_when_idle(engine)

    _TABLES_FOUND: set[tuple[str, str]] = set()

    def _look_for_tables(storage_class: type, postgres_url: str, should_autocreate_tables: bool) -> bool:
        """Whether dagster-postgres should look for its tables (and make missing ones) on opening a
        storage: the first time per kind of storage, database and process. Dagster opens an instance
        for every sensor tick in the code server, and each of the three storages then connected anew
        (no pool) to list the database's tables: opening an instance took 21-29 ms of CPU, now 10-11.
        Tables, once there, stay while the process lives."""
        return should_autocreate_tables and (storage_class.__name__, postgres_url) not in _TABLES_FOUND

    def _tables_found(storage: Any) -> None:
        if storage.should_autocreate_tables:
            _TABLES_FOUND.add((type(storage).__name__, storage.postgres_url))

    class PooledPostgresEventLogStorage(
        HoldsAssetEventsForABatch, SerializesAssetEventsOnce, RemembersEventLogSchema, PostgresEventLogStorage
    ):
        """dagster-postgres's event log storage with a pooled, pinged connection instead of NullPool."""

        def __init__(
            self,
            postgres_url: str,
            should_autocreate_tables: bool = True,
            inst_data: ConfigurableClassData | None = None,
            token_provider: Any = None,
            event_batch_size: int = DEFAULT_EVENT_BATCH_SIZE,
        ) -> None:
            _use_event_batches(event_batch_size)
            look = _look_for_tables(type(self), postgres_url, should_autocreate_tables)
            super().__init__(postgres_url, look, inst_data, token_provider)
            _tables_found(self)
            self._engine = _replace_with_pooled_pg_engine(self)
            event.listen(self._engine, "connect", _postgres_asynchronous_commit)

        @classmethod
        def config_type(cls) -> UserConfigSchema:
            return {**super().config_type(), **_BATCH_CONFIG}

        @classmethod
        def from_config_value(  # ty: ignore[invalid-method-override]
            cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
        ) -> PooledPostgresEventLogStorage:
            return cls(
                inst_data=inst_data,
                **_postgres_storage_args(config_value),
                event_batch_size=config_value.get("event_batch_size", DEFAULT_EVENT_BATCH_SIZE),
            )

        def store_event(self, event: EventLogEntry) -> None:
            """dagster-postgres's `store_event` on one connection: an asset event and its index rows
            (tags, asset row) in one transaction, and no NOTIFY (dagster-postgres no longer listens)."""
            if self._held_back(event):
                return
            insert = self.prepare_insert_event(event).returning(SqlEventLogStorageTable.c.id)
            dagster_event = event.dagster_event if event.is_dagster_event else None
            with self._connect() as conn:
                if (
                    dagster_event is not None
                    and dagster_event.event_type in ASSET_EVENTS
                    and dagster_event.asset_key
                ):
                    conn = conn.execution_options(isolation_level="READ COMMITTED")
                    with conn.begin():
                        event_id = int(conn.execute(insert).scalar_one())
                        self._store_asset_event_tags(conn, [event], [event_id])
                        self._store_asset_event(conn, event, event_id)
                else:
                    event_id = int(conn.execute(insert).scalar_one())
            if dagster_event is not None and dagster_event.event_type in ASSET_CHECK_EVENTS:
                self.store_asset_check_event(event, event_id)

        def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
            """A batch (the planned materializations of a run) in one INSERT and one index
            transaction; dagster-postgres batches materializations only and writes the rest one by one."""
            batched = [event for event in events if _batchable(event)]
            if batched:
                with self._connect() as conn:
                    # the rows given to execute (psycopg2 sends them as multi-row statements), not in the
                    # statement as Dagster's `prepare_insert_event_batch` puts them: that INSERT of 50
                    # VALUES tuples was compiled anew for every batch (a seventh of storing an event)
                    result = conn.execute(_EVENT_INSERT, [self._event_to_row(event) for event in batched])
                    event_ids = [int(row[0]) for row in result.fetchall()]
                with self.index_transaction() as conn:
                    self._store_asset_event_tags(conn, batched, event_ids)
                    # the asset row ends as if the events were stored one by one: the latest of each kind
                    latest = {_asset_and_kind(event): index for index, event in enumerate(batched)}
                    for index in sorted(latest.values()):
                        self._store_asset_event(conn, batched[index], event_ids[index])
            for event in events:
                if not _batchable(event):
                    self.store_event(event)

        def dispose(self) -> None:
            super().dispose()
            self._engine.dispose()

    class PooledPostgresRunStorage(RemembersRunColumns, PostgresRunStorage):
        """dagster-postgres's run storage with a pooled, pinged connection instead of NullPool
        (a run reads and writes its record a dozen times). Commits keep full durability."""

        def __init__(
            self,
            postgres_url: str,
            should_autocreate_tables: bool = True,
            inst_data: ConfigurableClassData | None = None,
            token_provider: Any = None,
        ) -> None:
            look = _look_for_tables(type(self), postgres_url, should_autocreate_tables)
            super().__init__(postgres_url, look, inst_data, token_provider)
            _tables_found(self)
            self._engine = _replace_with_pooled_pg_engine(self)

        @classmethod
        def from_config_value(  # ty: ignore[invalid-method-override]
            cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
        ) -> PooledPostgresRunStorage:
            return cls(inst_data=inst_data, **_postgres_storage_args(config_value))

        def dispose(self) -> None:
            super().dispose()
            self._engine.dispose()

    class PooledPostgresScheduleStorage(RemembersScheduleSchema, PostgresScheduleStorage):
        """dagster-postgres's schedule storage with a pooled, pinged connection instead of NullPool:
        the daemon reads and writes each sensor's state and tick every tick (a new server connection
        each, and a schema reflection before most)."""

        def __init__(
            self,
            postgres_url: str,
            should_autocreate_tables: bool = True,
            inst_data: ConfigurableClassData | None = None,
            token_provider: Any = None,
        ) -> None:
            look = _look_for_tables(type(self), postgres_url, should_autocreate_tables)
            super().__init__(postgres_url, look, inst_data, token_provider)
            _tables_found(self)
            self._engine = _replace_with_pooled_pg_engine(self)

        @classmethod
        def from_config_value(  # ty: ignore[invalid-method-override]
            cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
        ) -> PooledPostgresScheduleStorage:
            return cls(inst_data=inst_data, **_postgres_storage_args(config_value))

        def dispose(self) -> None:
            super().dispose()
            self._engine.dispose()
