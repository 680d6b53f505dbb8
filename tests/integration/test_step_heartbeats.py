"""Heartbeats per (run, step, process): a step that executes away from its run's process (a Celery worker
on another host) beats a row of its own, while the run's own process (which sent the step and waits for
it) beats the run's row. What a user would otherwise see: a run failed because its step waited in the
broker's queue, or a lost worker's postings stuck until a new run, or answered twice when its host came
back. Here on the application database alone (SQLite and PostgreSQL); tests/integration/
test_celery_step_liveness.py runs the same with real workers over RabbitMQ."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dagster import DagsterInstance
from sqlalchemy import select

from appdb import claims, heartbeats
from appdb.database import session_scope
from appdb.models import StepHeartbeat, WorkItem
from appdb.process_identity import ProcessIdentity
from resources.app_database import AppDatabase, RunNotAlive
from resources.run_heartbeat import RunHeartbeat
from sensors.run_liveness import reap_dead_runs, reap_dead_steps
from tests.support.postings import POSTINGS, seed_postings

KEYS = [posting["key"] for posting in POSTINGS]
RUN = "run-away-from-its-steps"
STEP = "posting_summary"
BEAT = 0.2  # seconds: dead after 5 beats, 1 s
DAEMON = ProcessIdentity("daemon-run-process", "daemon-host", 101)  # elsewhere: its age decides
LOST = ProcessIdentity("lost-worker-process", "worker1", 202)


def _states(url: str) -> dict[str, str]:
    with session_scope(url) as session:
        rows = session.execute(select(StepHeartbeat.instance_id, StepHeartbeat.state)).all()
    return dict(rows)


def _claimed_by(url: str) -> dict[str, str | None]:
    with session_scope(url) as session:
        rows = session.execute(
            select(WorkItem.subject_key, WorkItem.claimed_by).where(WorkItem.use_case == STEP)
        ).all()
    return dict(rows)


def _run_row_and_lost_step(url: str, tmp_path: Path) -> None:
    """The run's process beats on the daemon's host; its step's process on worker1 claimed every posting."""
    seed_postings(url, tmp_path)
    with session_scope(url) as session:
        heartbeats.start_heartbeat(session, RUN, job="gemma3_270m_batch_job", source="sensor", process=DAEMON)
        assert heartbeats.start_step_heartbeat(session, RUN, STEP, process=LOST)
    with session_scope(url) as session:
        assert claims.claim_items(session, STEP, KEYS, RUN) == KEYS


def _keep_run_beating(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with session_scope(url) as session:
            assert heartbeats.beat(session, RUN)
        time.sleep(BEAT)


def test_a_lost_steps_claims_come_back_its_run_goes_on_and_the_lost_process_is_fenced(
    app_db_url: str, tmp_path: Path
) -> None:
    instance = DagsterInstance.ephemeral()
    _run_row_and_lost_step(app_db_url, tmp_path)
    app_db = AppDatabase(url=app_db_url, heartbeat_seconds=BEAT)
    with session_scope(app_db_url) as session:
        assert heartbeats.beat_step(session, RUN, STEP, LOST.instance_id or "")
    assert reap_dead_steps(app_db, 5 * BEAT) == [], "a step that beat a moment ago is alive"

    _keep_run_beating(app_db_url, 8 * BEAT)  # the step's process is silent meanwhile: its host is gone
    assert reap_dead_runs(instance, app_db, 5 * BEAT) == [], "the run's own process beats: it is alive"
    reaped = reap_dead_steps(app_db, 5 * BEAT)
    assert [(step.run_id, step.step, step.claims_released) for step in reaped] == [(RUN, STEP, len(KEYS))]
    assert "heartbeat stopped" in reaped[0].reason
    assert set(_claimed_by(app_db_url).values()) == {None}, "every claim of the lost step is back"
    assert _states(app_db_url) == {LOST.instance_id: "dead"}

    # the step delivered again, to another worker, claims them again under the same run
    again = ProcessIdentity("second-worker-process", "worker2", 303)
    with session_scope(app_db_url) as session:
        assert heartbeats.start_step_heartbeat(session, RUN, STEP, process=again)
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, STEP, KEYS, RUN) == KEYS
    with session_scope(app_db_url) as session:
        # the lost process, should its host come back, calls the model for none and stores none
        assert not claims.still_held(session, STEP, KEYS[0], RUN, step_process=LOST.instance_id)
        assert not claims.complete_item(session, STEP, KEYS[0], RUN, {}, step_process=LOST.instance_id)
        assert claims.still_held(session, STEP, KEYS[0], RUN, step_process=again.instance_id)
    assert _claimed_by(app_db_url)[KEYS[0]] == RUN, "the lost process's store was refused"


def test_a_run_declared_dead_takes_its_steps_rows_with_it(app_db_url: str, tmp_path: Path) -> None:
    _run_row_and_lost_step(app_db_url, tmp_path)
    time.sleep(6 * BEAT)  # neither beats: the daemon's host is gone too
    reaped = reap_dead_runs(DagsterInstance.ephemeral(), AppDatabase(url=app_db_url), 5 * BEAT)
    assert [(run.run_id, run.claims_released) for run in reaped] == [(RUN, len(KEYS))]
    assert _states(app_db_url) == {LOST.instance_id: "dead"}
    with session_scope(app_db_url) as session:  # a step delivered after its run was given up does nothing
        assert not heartbeats.start_step_heartbeat(session, RUN, STEP)
    app_db = _in_a_worker(app_db_url)
    with pytest.raises(RunNotAlive), app_db.step_heartbeat(RUN, STEP):
        pass


def _in_a_worker(url: str) -> AppDatabase:
    """The app database resource as a Celery worker's process has it: the run's row is another's."""
    app_db = AppDatabase(url=url, heartbeat_seconds=BEAT)
    heartbeat = RunHeartbeat(url, RUN, "gemma3_270m_batch_job", "sensor", BEAT).start()
    assert not heartbeat.beats_here, "the run's own process beats its row, not a step's"
    app_db._heartbeat = heartbeat  # what setup_for_execution does in a run's step
    return app_db


def test_a_step_delivered_again_waits_for_the_earlier_delivery_to_be_dead_then_takes_its_work(
    app_db_url: str, tmp_path: Path
) -> None:
    _run_row_and_lost_step(app_db_url, tmp_path)
    app_db = _in_a_worker(app_db_url)
    assert app_db.away_from_run
    started = time.monotonic()
    with app_db.step_heartbeat(RUN, STEP) as step_process:
        waited = time.monotonic() - started
        assert step_process is not None and step_process != LOST.instance_id
        assert 5 * BEAT * 0.8 <= waited <= 5 * BEAT + 2 * BEAT + 1.5, "waited until the earlier one was dead"
        assert _states(app_db_url) == {LOST.instance_id: "dead", step_process: "alive"}
        with session_scope(app_db_url) as session:
            assert claims.claim_items(session, STEP, KEYS, RUN) == KEYS
        time.sleep(3 * BEAT)
        assert reap_dead_steps(app_db, 5 * BEAT) == [], "the new delivery beats: alive"
    assert _states(app_db_url)[step_process] == "ended"
    assert set(_claimed_by(app_db_url).values()) == {None}, "what the step still held went back at its end"
