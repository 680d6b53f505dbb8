"""A canary for the pooled Dagster storages (pipeline_defs/runtime/dagster_storage.py): they override private
methods of Dagster's storage classes and call private helpers. If a Dagster release changes any of
them (its source or signature), this test fails and names it, instead of the UI quietly drifting from
what the runs stored.

When it fails after an upgrade: read the changed methods, bring the overrides in line, run
tests/integration/test_dagster_storage_differential.py (stock and pooled must show the UI the same
batch), then record the new sources:

    PIPELINE_UPDATE_SNAPSHOT=1 .venv/bin/pytest tests/unit/test_dagster_private_api.py

Checked against dagster 1.13 / dagster-postgres 0.29 (pyproject pins both).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from pathlib import Path

import dagster
import dagster_postgres

from pipeline_defs.runtime import dagster_storage

PINS = Path(__file__).with_name("snapshots") / "dagster_private_api.json"
OURS = (
    dagster_storage.PooledSqliteEventLogStorage,
    dagster_storage.PooledSqliteRunStorage,
    dagster_storage.PooledPostgresEventLogStorage,
    dagster_storage.PooledPostgresRunStorage,
    dagster_storage.PooledSqliteScheduleStorage,
    dagster_storage.PooledPostgresScheduleStorage,
)
# Dagster's private helpers the overrides call (beside the methods they override)
CALLED = {
    "SqliteEventLogStorage": ["_initdb", "conn_string_for_shard", "path_for_shard", "run_connection"],
    "SqlEventLogStorage": [
        "_store_asset_event_tags",
        "_get_asset_entry_values",
        "_has_asset_key_index_cols_on_connection",
        "prepare_insert_event",
        "prepare_insert_event_batch",
        "index_transaction",
        "store_asset_check_event",
    ],
    "PostgresEventLogStorage": ["_connect"],
    "SqliteRunStorage": ["from_local"],
    "SqliteScheduleStorage": ["from_local"],
}


def _dagster_definition(cls: type, name: str) -> tuple[str, object] | None:
    """The Dagster class whose `name` our class overrides (or inherits), and that function."""
    for base in cls.__mro__:
        if base.__module__.startswith(("dagster", "dagster_postgres")) and name in base.__dict__:
            return base.__name__, base.__dict__[name]
    return None


def current_sources() -> dict[str, str]:
    """`Class.method` -> sha256 of its source and signature, for every method the overrides rely on."""
    found: dict[str, object] = {}
    for ours in OURS:
        own = {
            name
            for klass in ours.__mro__
            if klass.__module__ == dagster_storage.__name__
            for name in klass.__dict__
        }
        for name in sorted(own):
            definition = _dagster_definition(ours, name)
            if definition is not None and callable(getattr(definition[1], "__func__", definition[1])):
                found[f"{definition[0]}.{name}"] = definition[1]
        for base in ours.__mro__:
            for name in CALLED.get(base.__name__, []):
                found[f"{base.__name__}.{name}"] = base.__dict__[name]
    digests = {}
    for key, function in sorted(found.items()):
        function = getattr(function, "__func__", function)
        source = inspect.getsource(function)
        digests[key] = hashlib.sha256(f"{inspect.signature(function)}\n{source}".encode()).hexdigest()[:16]
    return digests


def test_the_private_dagster_methods_the_pooled_storages_rely_on_are_unchanged() -> None:
    current = current_sources()
    if os.environ.get("PIPELINE_UPDATE_SNAPSHOT") == "1":
        versions = {"dagster": dagster.__version__, "dagster-postgres": dagster_postgres.__version__}
        PINS.write_text(json.dumps({"checked_with": versions, "methods": current}, indent=2) + "\n")
    pinned = json.loads(PINS.read_text())
    changed = sorted(key for key in current if pinned["methods"].get(key) != current[key])
    gone = sorted(set(pinned["methods"]) - set(current))
    assert not changed and not gone, (
        f"Dagster methods the pooled storages override or call changed since they were checked with "
        f"{pinned['checked_with']}: changed {changed}, gone {gone}. See this module's docstring; "
        "PIPELINE_DAGSTER_STORAGE=stock avoids them meanwhile."
    )


def test_the_canary_covers_the_overridden_writes() -> None:
    current = current_sources()
    assert {"SqliteEventLogStorage._connect", "SqlEventLogStorage._store_asset_event"} <= set(current)
    assert {"PostgresEventLogStorage.store_event", "PostgresEventLogStorage.store_event_batch"} <= set(
        current
    )
