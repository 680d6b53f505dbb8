"""Dagster's own storage: a persistent DAGSTER_HOME in the data directory.

SQLite by default; dagster-postgres when PIPELINE_DAGSTER_POSTGRES_URL is set. With
PIPELINE_DAGSTER_STORAGE=stock (the default on the embedded model) Dagster's storage classes
are used as they are; with `pooled` (the default on Ollama) the run and event log storages are
the pooled variants in `pipeline_defs.runtime.dagster_storage` (same tables and files, connections kept
open), which cut the per-partition cost of a batch run several times over
(docs/dagster-storage.md). On the embedded model LLM steps share one concurrency pool (`llm`, one
step at a time) so concurrent runs do not fight over the CPU; on a model server the run queue limits
the runs per host instead (`run_limits`). Run monitoring frees the slots of runs that died.

It uses Dagster's public instance API only; the dagster.yaml it writes is pinned by
`tests/integration/test_dagster_home.py` (a home that Dagster opens, with the storages asked for).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from appdb.database import normalize_url
from appdb.local_files import make_private_dirs
from appdb.redaction import url_passwords
from pipeline_defs.runtime.dagster_storage import DEFAULT_EVENT_BATCH_SIZE
from pipeline_defs.settings import Settings, export_for_dagster
from resources.llm_hosts import LLM_HOST_TAG

LLM_POOL_LIMIT = 1
MAX_CONCURRENT_RUNS = 4
SCRIPT_GROUPS_ROOM = 2  # script groups that run at once beside the LLM runs (the tagger, skill resolution)
DEQUEUE_INTERVAL_SECONDS = 1
DEQUEUE_WORKERS = min(4, os.cpu_count() or 1)  # each launch is a process loading the code: CPU-bound
# A launch whose call to the code server times out (60 s: seen 15 times in 25 minutes at load 100 on 2
# cores) goes back to the queue and is tried again this much later, up to this many times, instead of
# failing the run: a failed taxonomy load counted towards the sensor's three attempts, and skill
# resolution then waited for a changed file.
LAUNCH_RETRIES = 3
LAUNCH_RETRY_DELAY_SECONDS = 30
SENSOR_WORKERS = 4
FREE_SLOTS_AFTER_RUN_END_SECONDS = 60
STORAGE_MODULE = "pipeline_defs.runtime.dagster_storage"
POSTGRES_URL_VARIABLE = "PIPELINE_DAGSTER_POSTGRES_URL"
_CLEAR_PASSWORD_KEY = re.compile(r"(?im)^[ \t]*(?:password|passwd)[ \t]*:[ \t]*[^{\s]")
CONFIG_MODE = 0o600  # the file names storage and may be edited to hold secrets: its owner only
STOCK_NOTE = "PIPELINE_DAGSTER_STORAGE=pooled writes the pooled ones; see docs/dagster-storage.md"


def run_limits(settings: Settings) -> tuple[int, int, int | None]:
    """(max concurrent runs, `llm` pool limit, runs per host or None).

    The embedded model runs in each run's process: one LLM step at a time (the pool), or runs would
    fight over the CPU. A model server serves every run from one loaded model: there the run queue
    limits the runs per host (PIPELINE_RUNS_PER_HOST, by the host tag the sensor sets), so the next
    runs have started, claimed their batch and sent their requests while one finishes, and the
    server's slots never idle between steps; the pool is then as wide as the queue (never the limit:
    a step waiting on it polls every second or more). Script runs get room beside them
    (PIPELINE_SCRIPT_RUNS for each script group)."""
    if not settings.server_backend:
        return MAX_CONCURRENT_RUNS, LLM_POOL_LIMIT, None
    hosts = max(1, len(settings.resolved_hosts()))
    runs = hosts * settings.runs_per_host + SCRIPT_GROUPS_ROOM * settings.script_runs
    return runs, runs, settings.runs_per_host


def dagster_yaml(settings: Settings) -> str:
    max_runs, pool_limit, per_host = run_limits(settings)
    lines = [
        "# Written by `pipeline`; edit freely, it is not overwritten.",
        "telemetry:",
        "  enabled: false",
        "nux:",  # no sign-up pop-up over the UI
        "  enabled: false",
        "concurrency:",
        "  runs:",
        f"    max_concurrent_runs: {max_runs}",
    ]
    if per_host is not None:
        lines += [
            "    tag_concurrency_limits:",
            f"      - key: {json.dumps(LLM_HOST_TAG)}",
            "        value: {applyLimitPerUniqueValue: true}",
            f"        limit: {per_host}",
        ]
    lines += [
        "  pools:",
        f"    default_limit: {pool_limit}",
        # Queued runs start within a second of a free place (Dagster's default looks every 5 s).
        "run_queue:",
        f"  dequeue_interval_seconds: {DEQUEUE_INTERVAL_SECONDS}",
        # Launch dequeued runs side by side: one at a time, each launch (a call to the code server,
        # a new process) took 1-2.5 s, so three hosts' runs started seconds apart; no more at once than
        # the cores: on 2 cores four launches took 6-7 s each and held up the first output.
        "  dequeue_use_threads: true",
        f"  dequeue_num_workers: {DEQUEUE_WORKERS}",
        f"  max_user_code_failure_retries: {LAUNCH_RETRIES}",
        f"  user_code_failure_retry_delay: {LAUNCH_RETRY_DELAY_SECONDS}",
        # Sensors tick side by side (one after another, a loop took 1-3 s on a busy machine and the
        # daemon looks every second: `pipeline_defs/runtime/daemon.py`).
        "sensors:",
        "  use_threads: true",
        f"  num_workers: {SENSOR_WORKERS}",
        # A run whose worker died keeps its pool slot (one slot: every LLM step would wait
        # forever). The discovery sensor marks such runs failed when their claims expire;
        # monitoring then frees their slots, and fails runs that never get started.
        "run_monitoring:",
        "  enabled: true",
        f"  free_slots_after_run_end_seconds: {FREE_SLOTS_AFTER_RUN_END_SECONDS}",
    ]
    # The PostgreSQL URL (and its password) stays in the environment: the file names the variable.
    if settings.dagster_storage == "stock":
        lines += [f"# Dagster's own storage classes ({STOCK_NOTE})"]
        if settings.dagster_postgres_url:
            lines += ["storage:", "  postgres:", f"    postgres_url: {{env: {POSTGRES_URL_VARIABLE}}}"]
        # else: nothing to write, Dagster's SQLite storage in DAGSTER_HOME is the default
    elif settings.dagster_postgres_url:
        url = {"postgres_url": {"env": POSTGRES_URL_VARIABLE}}
        lines += _storage("run_storage", STORAGE_MODULE, "PooledPostgresRunStorage", url)
        lines += _storage(
            "event_log_storage",
            STORAGE_MODULE,
            "PooledPostgresEventLogStorage",
            {**url, "event_batch_size": DEFAULT_EVENT_BATCH_SIZE},
        )
        lines += _storage("schedule_storage", STORAGE_MODULE, "PooledPostgresScheduleStorage", url)
    else:
        # The directories Dagster's default SQLite storage uses inside DAGSTER_HOME.
        home = settings.dagster_home.resolve()
        lines += _storage(
            "run_storage", STORAGE_MODULE, "PooledSqliteRunStorage", {"base_dir": str(home / "history")}
        )
        lines += _storage(
            "event_log_storage",
            STORAGE_MODULE,
            "PooledSqliteEventLogStorage",
            {"base_dir": str(home / "history" / "runs"), "event_batch_size": DEFAULT_EVENT_BATCH_SIZE},
        )
        lines += _storage(
            "schedule_storage",
            STORAGE_MODULE,
            "PooledSqliteScheduleStorage",
            {"base_dir": str(home / "schedules")},
        )
    return "\n".join(lines) + "\n"


def _storage(key: str, module: str, class_name: str, config: dict[str, Any]) -> list[str]:
    return [
        f"{key}:",
        f"  module: {module}",
        f"  class: {class_name}",
        "  config:",
        *(f"    {name}: {_yaml_value(value)}" for name, value in config.items()),
    ]


def _yaml_value(value: Any) -> str:
    """A JSON scalar, or Dagster's `{env: NAME}` (a value read from the environment when loaded)."""
    if isinstance(value, dict) and set(value) == {"env"}:
        return f"{{env: {value['env']}}}"
    return json.dumps(value)


HOME_LOCK = ".pipeline-home.lock"
STORAGE_READY = ".pipeline-storage-ready"
"""Holds the hash of the dagster.yaml whose storage schemas were created (a changed file creates again)."""
HOME_LOCK_WAIT_SECONDS = 300.0


GRPC_TIMEOUT_VARIABLE = "DAGSTER_GRPC_TIMEOUT_SECONDS"
GRPC_TIMEOUT_SECONDS = 180


def ensure_dagster_home(settings: Settings) -> Path:
    """Create DAGSTER_HOME with a dagster.yaml (readable by its owner only) and Dagster's storage
    schemas if missing, and point this process, and the processes it starts, at it (and at the
    Dagster PostgreSQL URL the file names).

    Under a file lock: two first runs at once on a new home both created Dagster's tables, and one
    crashed ("table snapshots already exists"), even after `pipeline migrate`. Now the first process
    creates them (migrate does, too) and the others wait for it, then find them there."""
    home = settings.dagster_home
    make_private_dirs(home)  # new ones 0700: Dagster's runs, event logs and compute logs are the owner's
    if settings.dagster_postgres_url:
        # dagster-postgres needs psycopg2: with SQLAlchemy 2.1 a bare postgresql:// picks psycopg 3.
        export_for_dagster(POSTGRES_URL_VARIABLE, normalize_url(settings.dagster_postgres_url))
    export_for_dagster("DAGSTER_HOME", str(home))
    # Dagster's own bound on a call to the code server (60 s): on a CPU busy with the embedded model a
    # run launch took longer and the run "failed to start" (seen at load ~60 on 2 cores); a user's value wins
    export_for_dagster(GRPC_TIMEOUT_VARIABLE, str(GRPC_TIMEOUT_SECONDS), unless_set=True)
    config = home / "dagster.yaml"
    ready = home / STORAGE_READY
    if config.exists():
        _keep_private(config)
    if config.exists() and ready.exists() and ready.read_text() == _config_hash(config):
        return home  # the common case: set up before, no lock taken
    with _home_lock(home):
        if not config.exists():
            partial = home / f".dagster.yaml.{os.getpid()}"
            descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, CONFIG_MODE)
            with os.fdopen(descriptor, "w") as file:
                file.write(dagster_yaml(settings))
            partial.replace(config)  # whole or absent, never half-written for a concurrent reader
        if not ready.exists() or ready.read_text() != _config_hash(config):
            _create_storage_schemas()
            ready.write_text(_config_hash(config))
    return home


def ensure_dagster_storage(settings: Settings) -> Path:
    """`ensure_dagster_home`, then the storage itself, from this one process before it starts others
    (`pipeline ui`'s webserver, daemon and code server; runs): Dagster creates any missing tables when
    the instance opens, and the `llm` pool gets its limit row (`ensure_pools`: one query when it is there).

    The home's marker cannot tell that `PIPELINE_DAGSTER_POSTGRES_URL` now names a fresh database
    (dagster.yaml names the variable, not the URL): `pipeline ui` on such a home left the row to the
    daemon's runs, which raced to write it (issue 39, item 5)."""
    from dagster import DagsterInstance

    home = ensure_dagster_home(settings)
    with DagsterInstance.get() as instance:
        _ = (instance.run_storage, instance.event_log_storage, instance.schedule_storage)
        ensure_pools(settings, instance)
    return home


def _keep_private(config: Path) -> None:
    """An existing dagster.yaml (kept: it may be edited) loses any group or world access; one written
    before the file named the variable may hold a password: say so."""
    if config.stat().st_mode & 0o077:
        config.chmod(CONFIG_MODE)
    if _holds_clear_password(config.read_text()):
        print(
            f"warning: {config} holds a password in clear text: replace the URL with "
            f"{{env: {POSTGRES_URL_VARIABLE}}} (or delete the file: `pipeline migrate` writes a new one)",
            file=sys.stderr,
        )


def _holds_clear_password(text: str) -> bool:
    """Whether a dagster.yaml holds a password as written: a URL with one, or a `password:` key whose
    value is not `{env: ...}`. Words that merely equal a secret (`postgres`, the storage's name) are
    no password."""
    return bool(url_passwords(text)) or bool(_CLEAR_PASSWORD_KEY.search(text))


def _config_hash(config: Path) -> str:
    return hashlib.sha256(config.read_bytes()).hexdigest()


def _create_storage_schemas() -> None:
    """Open the instance once, touching each storage: Dagster creates the missing tables then; and
    give the `llm` pool its limit row (`initialize_pools`)."""
    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        _ = (instance.run_storage, instance.event_log_storage, instance.schedule_storage)
        initialize_pools(instance)


def _pool_missing(instance: Any) -> str | None:
    """The `llm` pool's name when a run's first step would write its limit row: the storage enforces
    pools and has no row for it, or one from an older `default_limit` (Dagster's own condition)."""
    from assets.factory import LLM_POOL  # here: setting up a home needs no Dagster definitions

    storage = instance.event_log_storage
    default = instance.global_op_concurrency_default_limit
    if not storage.supports_global_concurrency_limits or default is None:
        return None
    pool = {limit.name: limit for limit in storage.get_pool_limits()}.get(LLM_POOL)
    if pool is None or (pool.from_default and pool.limit != default):
        return LLM_POOL
    return None


def initialize_pools(instance: Any) -> None:
    """Write the `llm` pool's limit row now, once, before any run can.

    Otherwise the first step of each run writes it on first use: three runs starting at once on a fresh
    PostgreSQL storage each inserted it, and one failed on the unique key (`UniqueViolation ...
    concurrency_limits_concurrency_key_key (llm)`). Callers hold the home's lock, so the processes of
    one host take turns; a process on another host that wins the race leaves the row there, which is
    all that is needed."""
    from sqlalchemy.exc import SQLAlchemyError

    pool = _pool_missing(instance)
    if pool is None:
        return
    try:
        instance.event_log_storage.initialize_concurrency_limit_to_default(pool)
    except SQLAlchemyError:
        # Another host wrote it first: on PostgreSQL Dagster's fallback update then fails in the
        # aborted transaction. Only a row still missing is an error.
        if _pool_missing(instance) is not None:
            raise


def ensure_pools(settings: Settings, instance: Any) -> None:
    """`initialize_pools` under the home's lock, for a storage set up before it did so (or a fresh
    PostgreSQL database behind an existing home); one cheap query when the row is there."""
    if _pool_missing(instance) is None:
        return
    with _home_lock(settings.dagster_home):
        initialize_pools(instance)


@contextlib.contextmanager
def _home_lock(home: Path) -> Iterator[None]:
    """An exclusive lock on the home's lock file, waited for up to HOME_LOCK_WAIT_SECONDS."""
    with open(home / HOME_LOCK, "a+") as handle:
        deadline = time.monotonic() + HOME_LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another process has held {home / HOME_LOCK} for over {HOME_LOCK_WAIT_SECONDS:g}s "
                        "while setting up the Dagster home"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
