"""A writer holding SQLite's lock longer than the busy timeout: runs ride it out, then fail naming it."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import exc, select, text

from appdb.database import LOCK_WAIT_ENV, session_scope
from appdb.models import WorkItem
from pipeline_defs.settings import Settings
from resources.ollama_backend import OllamaResource
from tests.integration.test_ollama_timeouts import SlowOllama
from tests.support.postings import run_use_case, seed_postings

BUSY_TIMEOUT_ENV = "PIPELINE_SQLITE_BUSY_TIMEOUT"
HOLD_SECONDS = 3.0


@contextmanager
def lock_held(url: str, seconds: float) -> Iterator[None]:
    """Another connection takes the write lock (BEGIN IMMEDIATE) now and keeps it for `seconds`."""
    holder = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("UPDATE postings SET title = title")
    release = threading.Timer(seconds, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        yield
    finally:
        release.join()
        holder.close()


def test_a_run_rides_out_a_writer_holding_the_lock_past_the_busy_timeout(
    sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "0.5")  # each statement waits 0.5 s inside SQLite, the lock 3 s
    Settings.from_env()  # the settings configure SQLite's waits for the engines made from now on
    fake = SlowOllama(hang_on="no posting has this title")
    try:
        from pipeline_defs.definitions import build_definitions

        seed_postings(sqlite_url, tmp_path)
        settings = Settings.from_env().changed(database_url=sqlite_url)
        defs = build_definitions(settings, llm=OllamaResource(host=fake.host, timeout_seconds=5))
        started = time.monotonic()
        with lock_held(sqlite_url, HOLD_SECONDS):
            result = run_use_case(defs, dagster_instance, ["p-1", "p-2", "p-3"])
    finally:
        fake.close()
    assert result.success
    assert time.monotonic() - started >= HOLD_SECONDS
    assert sorted(event.partition for event in result.get_asset_materialization_events()) == [
        "p-1",
        "p-2",
        "p-3",
    ]
    with session_scope(sqlite_url) as session:
        items = session.scalars(select(WorkItem)).all()
    assert len(items) == 3 and all(item.status == "done" and not item.last_error for item in items)


def test_a_lock_held_past_the_wait_fails_naming_the_file(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BUSY_TIMEOUT_ENV, "0.2")
    monkeypatch.setenv(LOCK_WAIT_ENV, "1")
    Settings.from_env()
    seed_postings(sqlite_url, tmp_path)
    with (
        lock_held(sqlite_url, HOLD_SECONDS),
        pytest.raises(exc.OperationalError) as failure,
        session_scope(sqlite_url) as session,
    ):
        session.execute(text("UPDATE postings SET title = title"))
    message = str(failure.value)
    assert "another connection held the write lock of" in message and "app.db" in message
    assert LOCK_WAIT_ENV in message
