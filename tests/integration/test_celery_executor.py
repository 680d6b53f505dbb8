"""PIPELINE_EXECUTOR=celery for real: batch runs whose steps run on `pipeline worker` processes over the
machine's RabbitMQ, with the application database and Dagster's storage on PostgreSQL, as on several
machines (here: separate processes; tests/end_to_end/test_multi_host.py puts them on separate hosts).

Each run is started with Dagster's own `dagster job execute` (the job's executor, unlike an in-process
run), over the demo postings: the model use case's step must go to the model queue's worker, which
calls the (fake) model server, and the skill tagger's to the CPU queue's worker."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from pipeline_defs.settings import PROJECT_ROOT
from plugins.postings.commands.demo_command import DEMO_POSTINGS
from tests.support.celery_workers import PIPELINE, delete_queues, queue_names, require_broker, worker
from tests.support.fakes import FakeOllama
from tests.support.live_pipeline import free_port

pytestmark = pytest.mark.postgres

DAGSTER = PROJECT_ROOT / ".venv" / "bin" / "dagster"
DEMO_KEYS = [json.loads(line)["key"] for line in DEMO_POSTINGS.read_text().splitlines() if line.strip()]
RANGE = {
    "dagster/asset_partition_range_start": DEMO_KEYS[0],
    "dagster/asset_partition_range_end": DEMO_KEYS[-1],
}
REGISTER_PARTITIONS = """
import sys
from dagster import DagsterInstance
from assets.partitions import add_partitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings
ensure_dagster_home(Settings.from_env())
with DagsterInstance.get() as instance:
    add_partitions(instance, "postings", sys.argv[1:])
"""


def celery_env(tmp_path: Path, app_url: str, dagster_url: str, broker: str, queues: tuple[str, str]) -> dict:
    keep = ("PATH", "LANG", "LC_ALL", "PIPELINE_PORT_RANGE")
    return {
        **{name: os.environ[name] for name in keep if name in os.environ},
        "HOME": str(tmp_path),
        "PIPELINE_DATA_DIR": str(tmp_path / "data"),
        "DAGSTER_HOME": str(tmp_path / "data" / "dagster_home"),  # for `dagster job execute`
        "PIPELINE_DATABASE_URL": app_url,
        "PIPELINE_DAGSTER_POSTGRES_URL": dagster_url,
        "PIPELINE_EXECUTOR": "celery",
        "PIPELINE_CELERY_BROKER_URL": broker,
        "PIPELINE_CELERY_CPU_QUEUE": queues[0],
        "PIPELINE_CELERY_MODEL_QUEUE": queues[1],
        "PIPELINE_JUDGE_SAMPLE": "0",
    }


def run(command: list, env: dict, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, env=env, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def test_batch_runs_send_each_step_to_its_kinds_celery_worker(
    postgres_database: Callable[[], str], httpserver: HTTPServer, tmp_path: Path
) -> None:
    broker = require_broker()
    fake = FakeOllama(httpserver)
    queues = queue_names("test")
    env = celery_env(tmp_path, postgres_database(), postgres_database(), broker, queues)
    env["OLLAMA_HOST"] = httpserver.url_for("/").rstrip("/")
    run([PIPELINE, "migrate"], env)
    run([PIPELINE, "ingest", DEMO_POSTINGS], env)
    run([PROJECT_ROOT / ".venv" / "bin" / "python", "-c", REGISTER_PARTITIONS, *DEMO_KEYS], env)
    cpu_log, model_log = tmp_path / "cpu-worker.log", tmp_path / "model-worker.log"
    try:
        with worker(env, queues[0], "cpu", cpu_log), worker(env, queues[1], "model", model_log):
            for job in ("gemma3_270m_batch_job", "posting_skills_batch_job"):
                execute = [DAGSTER, "job", "execute", "-m", "pipeline_defs.definitions", "-j", job]
                done = run([*execute, "--tags", json.dumps(RANGE)], env, timeout=600)
                assert "Submitting celery task" in done.stdout + done.stderr
    finally:
        delete_queues(list(queues))

    cpu, model = cpu_log.read_text(), model_log.read_text()
    assert f"posting_skills: finished: {len(DEMO_KEYS)} done" in cpu, cpu[-3000:]
    assert f"posting_summary: finished: {len(DEMO_KEYS)} done" in model, model[-3000:]
    assert "posting_summary" not in cpu and "posting_skills" not in model, "each step on its kind's worker"
    assert len(fake.generations) >= len(DEMO_KEYS), "the model worker called the model server"
    status = json.loads(run([PIPELINE, "status", "--json"], env).stdout)
    state = {item["use_case"]: item for item in status["use_cases"]}
    for use_case in ("posting_summary", "posting_skills"):
        assert (state[use_case]["pending"], state[use_case]["claimed"], state[use_case]["failed"]) == (
            0,
            0,
            0,
        )


def test_a_worker_without_its_broker_says_so_in_one_line_and_touches_nothing(tmp_path: Path) -> None:
    closed = f"pyamqp://guest:s3cret@127.0.0.1:{free_port()}//"  # nothing listens there
    env = celery_env(
        tmp_path,
        "postgresql://nobody@127.0.0.1:9/none",
        "postgresql://nobody@127.0.0.1:9/none",
        closed,
        ("a", "b"),
    )
    done = subprocess.run([PIPELINE, "worker"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: cannot reach the Celery broker pyamqp://guest:***@"
        + closed.split("@", 1)[1]
        + ": [Errno 111] Connection refused"
    ]
    assert not (tmp_path / "data").exists(), "no Dagster home made for a worker that could not start"
