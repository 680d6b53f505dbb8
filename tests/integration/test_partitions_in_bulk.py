"""Postings become Dagster partitions, and retired ones stop being partitions, in a few statements for
thousands of keys, on both storages. The discovery sensor used to hand its new keys to the daemon as
`dynamic_partitions_requests`, which Dagster checks key by key (a query and, on PostgreSQL, a new
connection each): 100,000 new postings kept the daemon busy for minutes with no partition added and
no run started. `pipeline retire` deleted key by key as well."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from dagster import DagsterInstance
from sqlalchemy import event
from sqlalchemy.engine import Engine

from assets.partitions import add_partitions, delete_partitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings

KEYS = [f"p-{index:05d}" for index in range(12_000)]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def instance(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """A Dagster instance on a home of the project's own, on SQLite or a fresh PostgreSQL database."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home")
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("PIPELINE_DAGSTER_POSTGRES_URL", url)
        settings = replace(settings, dagster_postgres_url=url)
    with DagsterInstance.from_config(str(ensure_dagster_home(settings))) as opened:
        yield opened


@contextlib.contextmanager
def _statements_on_partitions() -> Iterator[list[str]]:
    """Every SQL statement any engine sends about the partitions table while the block runs."""
    seen: list[str] = []

    def count(conn, cursor, statement: str, *_: object) -> None:  # noqa: ANN001
        if "dynamic_partitions" in statement:
            seen.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", count)


def test_twelve_thousand_partitions_go_in_and_out_in_a_few_statements(instance: DagsterInstance) -> None:
    add_partitions(instance, "postings", KEYS[:100])  # some were partitions already
    with _statements_on_partitions() as added:
        add_partitions(instance, "postings", KEYS)
    assert list(instance.get_dynamic_partitions("postings")) == KEYS  # once each, in this order
    assert len(added) <= len(KEYS) / 1000, len(added)

    with _statements_on_partitions() as deleted:
        assert delete_partitions(instance, "postings", [*KEYS[:11_000], "not-a-partition"]) == 11_000
    assert list(instance.get_dynamic_partitions("postings")) == KEYS[11_000:]
    assert len(deleted) <= len(KEYS) / 300, len(deleted)  # SQLite looks keys up 500 at a time
