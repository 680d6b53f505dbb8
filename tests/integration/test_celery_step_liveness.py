"""Liveness with the Celery executor, for real (RabbitMQ as the machine runs it, PostgreSQL for both
databases, `pipeline worker` processes, `dagster job execute` as the run's own process):

- a step held in the broker's queue with no worker for longer than the liveness sensor's windows (the
  heartbeat timeout, and the grace of a run that never beat) leaves its run alive: the run's process beats
  while it waits, and the run does its work once a worker comes (before, the run's only heartbeat came
  from its step's worker, and the reaper failed such a run as "started and never sent a heartbeat");
- a worker killed in the middle of a step: the broker delivers the step again to the other worker, which
  waits until the killed process's step heartbeat is dead, takes its claims back and finishes the work;
  the run succeeds, every posting is current and no prompt was answered twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from sqlalchemy import select

from appdb import heartbeats
from appdb.database import session_scope
from appdb.models import StepHeartbeat
from pipeline_defs.runtime.dagster_home import POSTGRES_URL_VARIABLE
from pipeline_defs.settings import PROJECT_ROOT
from resources.app_database import AppDatabase
from sensors.run_liveness import SILENT_GRACE_SECONDS, reap_dead_runs, reap_dead_steps
from tests.integration.test_celery_executor import (
    DAGSTER,
    DEMO_KEYS,
    RANGE,
    REGISTER_PARTITIONS,
    celery_env,
    run,
)
from tests.support.celery_workers import PIPELINE, delete_queues, queue_names, require_broker, worker
from tests.support.live_pipeline import free_port

pytestmark = pytest.mark.postgres

BEAT = 1.0  # PIPELINE_HEARTBEAT_SECONDS in these tests: dead after 5 s
DEAD_AFTER = 5 * BEAT
PYTHON = str(PROJECT_ROOT / ".venv" / "bin" / "python")


def _prepared(tmp_path: Path, postgres_database: Callable[[], str], queues: tuple[str, str]) -> dict:
    env = celery_env(tmp_path, postgres_database(), postgres_database(), require_broker(), queues)
    env["PIPELINE_HEARTBEAT_SECONDS"] = str(BEAT)
    run([PIPELINE, "migrate"], env)
    run([PIPELINE, "ingest", str(PROJECT_ROOT / "plugins/postings/demo_data/postings.jsonl")], env)
    run([PYTHON, "-c", REGISTER_PARTITIONS, *DEMO_KEYS], env)
    return env


@contextmanager
def _run_started(env: dict, job: str, log: Path) -> Iterator[subprocess.Popen]:
    """The run's own process (`dagster job execute`: it sends the steps to Celery and waits)."""
    command = [str(DAGSTER), "job", "execute", "-m", "pipeline_defs.definitions", "-j", job]
    with log.open("w") as output:
        process = subprocess.Popen(
            [*command, "--tags", json.dumps(RANGE)], env=env, cwd=PROJECT_ROOT, stdout=output,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextmanager
def _dagster_instance(env: dict, monkeypatch: pytest.MonkeyPatch) -> Iterator[DagsterInstance]:
    monkeypatch.setenv(POSTGRES_URL_VARIABLE, env["PIPELINE_DAGSTER_POSTGRES_URL"])
    with DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        yield instance


def _done(env: dict, use_case: str) -> tuple[int, int, int]:
    status = json.loads(run([PIPELINE, "status", "--json"], env).stdout)
    state = {item["use_case"]: item for item in status["use_cases"]}[use_case]
    return state["pending"], state["claimed"], state["failed"]


def test_a_step_waiting_in_the_queue_past_the_liveness_windows_leaves_its_run_alive(
    postgres_database: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queues = queue_names("queued")
    env = _prepared(tmp_path, postgres_database, queues)
    app_db = AppDatabase(url=env["PIPELINE_DATABASE_URL"], heartbeat_seconds=BEAT)
    job = "posting_skills_batch_job"
    try:
        with (
            _run_started(env, job, tmp_path / "run.log") as run_process,
            _dagster_instance(env, monkeypatch) as instance,
        ):
            # no worker takes the CPU queue: the step waits in RabbitMQ; the reaper looks every second
            # for longer than a silent run's window (timeout + grace) and a dead run's (timeout)
            window = DEAD_AFTER + SILENT_GRACE_SECONDS + 5
            started = time.monotonic()
            while time.monotonic() - started < window:
                assert run_process.poll() is None, (tmp_path / "run.log").read_text()[-3000:]
                reaped = reap_dead_runs(instance, app_db, DEAD_AFTER, [job])
                assert reaped == [], f"a run whose step waits in the broker's queue was reaped: {reaped}"
                assert reap_dead_steps(app_db, DEAD_AFTER) == []
                time.sleep(BEAT)
            [waiting] = instance.get_runs(RunsFilter(job_name=job))
            assert waiting.status == DagsterRunStatus.STARTED
            with app_db.session() as session:
                beat = heartbeats.heartbeats_of(session, [waiting.run_id])[waiting.run_id]
            assert beat.state == "alive" and beat.age_seconds() < DEAD_AFTER, "the run's own process beats"
            with worker(env, queues[0], "cpu", tmp_path / "cpu-worker.log"):
                assert run_process.wait(timeout=600) == 0, (tmp_path / "run.log").read_text()[-3000:]
            assert instance.get_run_by_id(waiting.run_id).status == DagsterRunStatus.SUCCESS
    finally:
        delete_queues(list(queues))
    assert _done(env, "posting_skills") == (0, 0, 0)
    with session_scope(env["PIPELINE_DATABASE_URL"]) as session:
        rows = session.execute(select(StepHeartbeat.step, StepHeartbeat.state)).all()
    assert rows == [("posting_skills", "ended")], "the worker's process beat the step, and ended it"


def test_a_worker_killed_mid_step_its_step_is_delivered_again_and_finished_by_the_other_worker(
    postgres_database: Callable[[], str], tmp_path: Path
) -> None:
    queues = queue_names("killed")
    env = _prepared(tmp_path, postgres_database, queues)
    port, calls = free_port(), tmp_path / "model-calls.jsonl"
    server = [PYTHON, "-m", "tests.support.counting_ollama", "--port", str(port), "--latency-ms", "400"]
    server += ["--parallel", "1", "--calls", str(calls)]
    env["OLLAMA_HOST"] = f"http://127.0.0.1:{port}"
    env["PIPELINE_LLM_PARALLEL"] = "1"  # one call in flight: the only one the kill can leave unanswered
    model = subprocess.Popen(
        server, env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "b")}
    try:
        with (
            worker(env, queues[1], "a", logs["a"]) as first,
            worker(env, queues[1], "b", logs["b"]) as second,
            _run_started(env, "gemma3_270m_batch_job", tmp_path / "run.log") as run_process,
        ):
            deadline = time.monotonic() + 300
            while not (calls.exists() and len(calls.read_text().splitlines()) >= 5):
                assert time.monotonic() < deadline, (tmp_path / "run.log").read_text()[-3000:]
                time.sleep(0.2)
            taker = "a" if "posting_summary" in logs["a"].read_text() else "b"
            killed = {"a": first, "b": second}[taker]
            os.killpg(killed.pid, signal.SIGKILL)  # the worker and its pool's processes, at once
            assert run_process.wait(timeout=600) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        model.terminate()
        model.wait()
        delete_queues(list(queues))

    other = logs["b" if taker == "a" else "a"].read_text()
    assert "posting_summary: finished: " in other, other[-3000:]
    assert _done(env, "posting_summary") == (0, 0, 0), "every summary current"
    answered = Counter(json.loads(line)["prompt"] for line in calls.read_text().splitlines())
    assert len(answered) == len(DEMO_KEYS)
    twice = [prompt for prompt, count in answered.items() if count > 1]
    # the call in flight at the kill is answered to a dead process and made again; no other
    assert len(twice) <= 1 and max(answered.values()) <= 2, answered
    with session_scope(env["PIPELINE_DATABASE_URL"]) as session:
        states = sorted(session.scalars(select(StepHeartbeat.state)))
    assert states == ["dead", "ended"], "the killed delivery declared dead, the second one ended"
    print(f"\nkilled worker {taker}; the other's log tail:\n" + other[-1500:], file=sys.stderr)
