"""`pipeline_defs.runtime.daemon`: the sensor daemon wakes when postings arrive instead of waiting out
Dagster's 5 s loop. It wraps a private Dagster loop: these tests run Dagster's real loop, so an upgrade
that moves the loop or its wait fails here."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from dagster._daemon import daemon as daemon_module
from dagster._daemon import sensor as sensor_module

from appdb import events, heartbeats
from appdb.database import session_scope
from pipeline_defs.runtime.daemon import WakeableShutdown, install_wake, wake_on, watch_arrivals
from pipeline_defs.settings import Settings
from plugins.postings.store.ingest import ingest_files
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from tests.support.postings import POSTINGS, write_jsonl


class NoWorkspace:
    """Every look at the workspace fails; Dagster's loop logs the error and waits for its next look."""

    def __getattr__(self, name: str) -> None:
        raise RuntimeError("no workspace in this test")


def looks_within(seconds: float, loop, shutdown: threading.Event) -> int:
    """How many times Dagster's sensor loop looked at its sensors within `seconds`."""
    looks = 0
    deadline = time.monotonic() + seconds
    generator = loop(NoWorkspace(), logging.getLogger("test_daemon_wake"), shutdown, until=time.time() + 60)
    for item in generator:
        if item is None:  # the loop yields None once per look, after its wait
            looks += 1
        if time.monotonic() > deadline:
            break
    return looks


def test_dagsters_sensor_loop_waits_five_seconds_between_looks() -> None:
    assert sensor_module.MIN_INTERVAL_LOOP_TIME == 5
    assert daemon_module.execute_sensor_iteration_loop is sensor_module.execute_sensor_iteration_loop
    started = time.monotonic()
    assert looks_within(0.5, sensor_module.execute_sensor_iteration_loop, threading.Event()) == 1
    assert time.monotonic() - started >= 4.5  # the one look waited out the loop


def test_a_wake_cuts_the_wait_short_and_shutdown_still_stops_it() -> None:
    wake, shutdown = threading.Event(), threading.Event()
    loop = wake_on(wake, sensor_module.execute_sensor_iteration_loop)
    threading.Timer(0.3, wake.set).start()
    started = time.monotonic()
    assert looks_within(0.2, loop, shutdown) == 1
    assert time.monotonic() - started < 2  # woken at 0.3 s, not at 5 s
    assert not wake.is_set()  # a wake is used once

    waiting = WakeableShutdown(shutdown, wake)
    threading.Timer(0.2, shutdown.set).start()
    assert waiting.wait(10) is True and waiting.is_set()


def test_the_watcher_wakes_on_ingest_a_run_starting_an_llm_step_ending_and_a_run_ending_only(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with session_scope(url):
        pass
    wake, stop = threading.Event(), threading.Event()
    watcher = threading.Thread(target=watch_arrivals, args=(url, [POSTINGS_TABLE], wake, stop), daemon=True)
    watcher.start()
    try:
        assert not wake.wait(1.5)  # an unchanged database wakes nothing
        postings = write_jsonl(tmp_path / "postings.jsonl", POSTINGS[:2])
        with session_scope(url) as session:
            ingest_files(session, [postings])
        assert wake.wait(3)
        time.sleep(0.6)
        wake.clear()
        # A run starting wakes (a follower's sensor starts its run beside it); its beats wake nothing;
        # its end does (a downstream sensor may wait for what it wrote).
        with session_scope(url) as session:
            heartbeats.start_heartbeat(session, "run-1", job="tagger_batch_job", source=None, host="h", pid=1)
        assert wake.wait(3)
        time.sleep(0.6)
        wake.clear()
        with session_scope(url) as session:
            heartbeats.beat(session, "run-1")
        assert not wake.wait(1.0)
        # An LLM step ending (its cost recorded) wakes: a reader may wait for the outputs it wrote.
        with session_scope(url) as session:
            events.record_event(session, "run_cost", use_case="posting_skills", run_id="run-1", count=3)
        assert wake.wait(3)
        time.sleep(0.6)
        wake.clear()
        with session_scope(url) as session:  # an error event is not an end
            events.record_event(session, "error", use_case="posting_skills", run_id="run-1", count=1)
        assert not wake.wait(1.0)
        with session_scope(url) as session:
            heartbeats.end_heartbeat(session, "run-1")
        assert wake.wait(3)
    finally:
        stop.set()
        watcher.join(5)


def test_a_change_wakes_the_sensors_again_once_their_interval_has_passed(tmp_path: Path) -> None:
    """A sensor that looked just before the change is not due at the first wake: a second one comes."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with session_scope(url):
        pass
    wake, stop = threading.Event(), threading.Event()
    watcher = threading.Thread(
        target=watch_arrivals, args=(url, [POSTINGS_TABLE], wake, stop, 1.0), daemon=True
    )
    watcher.start()
    try:
        time.sleep(0.6)  # the watcher has read the marker once
        with session_scope(url) as session:
            ingest_files(session, [write_jsonl(tmp_path / "postings.jsonl", POSTINGS[:1])])
        assert wake.wait(3)
        changed = time.monotonic()
        wake.clear()
        assert wake.wait(3)  # again, about a second later, with nothing new
        assert time.monotonic() - changed >= 0.5
        wake.clear()
        assert not wake.wait(1.5)  # and only once
    finally:
        stop.set()
        watcher.join(5)


def test_the_daemon_installs_the_wake_into_dagsters_sensor_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPELINE_DATABASE_URL", f"sqlite:///{tmp_path / 'app.db'}")
    loop = daemon_module.execute_sensor_iteration_loop
    monkeypatch.setattr(daemon_module, "execute_sensor_iteration_loop", loop)
    stop = install_wake(Settings.from_env())
    try:
        assert stop is not None
        assert daemon_module.execute_sensor_iteration_loop is not sensor_module.execute_sensor_iteration_loop
    finally:
        if stop is not None:
            stop.set()
