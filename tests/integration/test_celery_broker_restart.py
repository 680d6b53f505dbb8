"""The broker restarted in the middle of a run (issue 65, item 2): `pipeline daemon` with
PIPELINE_EXECUTOR=celery, one `pipeline worker`, a model server that counts the calls it answers, and a
RabbitMQ node of the test's own (tests/support/private_rabbitmq.py: the machine's is never touched),
stopped (`rabbitmqctl stop_app`) once a few summaries are stored and started again 10 s later.

What must hold: every posting current in the end, no summary stored twice, and no prompt answered
twice except the one call in flight when the broker went (one call at a time here). The time from the
restart until every posting is current, and the runs that failed meanwhile, are printed (`-s`)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import func, select

from appdb.database import session_scope
from appdb.models import UseCaseOutput
from benchmarks.celery_hosts import all_current, started, wait_for_text
from pipeline_defs.settings import PROJECT_ROOT, Settings
from tests.integration.test_celery_executor import celery_env, run
from tests.support.celery_workers import PIPELINE
from tests.support.live_pipeline import free_port
from tests.support.private_rabbitmq import private_rabbitmq

pytestmark = pytest.mark.postgres

PYTHON = str(PROJECT_ROOT / ".venv" / "bin" / "python")
DEMO = PROJECT_ROOT / "plugins" / "postings" / "demo_data" / "postings.jsonl"
OUTAGE_SECONDS = 10.0
DONE_BOUND_SECONDS = 900.0


def _stored(url: str, use_case: str) -> int:
    with session_scope(url) as session:
        return session.scalar(
            select(func.count()).select_from(UseCaseOutput).where(UseCaseOutput.use_case == use_case)
        )


def test_a_broker_restarted_mid_run_leaves_every_posting_current_and_nothing_done_twice(
    postgres_database: Callable[[], str], tmp_path: Path
) -> None:
    with private_rabbitmq() as broker:
        env = celery_env(tmp_path, postgres_database(), postgres_database(), broker.url, ("cpu", "model"))
        env["DAGSTER_HOME"] = str(tmp_path / "data" / "dagster_home")
        port, calls = free_port(), tmp_path / "model-calls.jsonl"
        env |= {
            "OLLAMA_HOST": f"http://127.0.0.1:{port}",
            "PIPELINE_LLM_PARALLEL": "1",  # one call in flight: the only one the outage can leave unanswered
            "PIPELINE_HEARTBEAT_SECONDS": "2",
            "PIPELINE_RUN_CONTINUE_SECONDS": "0",
        }
        run([PIPELINE, "migrate"], env)
        run([PIPELINE, "ingest", str(DEMO)], env)
        settings = Settings.from_env(env)
        app_url = env["PIPELINE_DATABASE_URL"]
        server = [PYTHON, "-m", "tests.support.counting_ollama", "--port", str(port), "--latency-ms", "300"]
        server += ["--parallel", "1", "--calls", str(calls)]
        report: dict[str, float | int] = {}
        with (
            started(server, env, tmp_path / "model.log"),
            started([str(PIPELINE), "worker", "--concurrency", "2"], env, tmp_path / "worker.log"),
        ):
            wait_for_text(tmp_path / "worker.log", " ready.", 180)
            with started([str(PIPELINE), "daemon"], env, tmp_path / "daemon.log"):
                deadline = time.monotonic() + DONE_BOUND_SECONDS
                while _stored(app_url, "posting_summary") < 5:
                    assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
                    time.sleep(0.3)
                broker.ctl("stop_app")
                report["summaries_stored_at_the_stop"] = _stored(app_url, "posting_summary")
                time.sleep(OUTAGE_SECONDS)
                broker.ctl("start_app")
                back = time.monotonic()
                while not all_current(settings):
                    assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-3000:]
                    time.sleep(2)
                report["every_posting_current_after_the_restart_seconds"] = round(time.monotonic() - back, 1)

    answered = Counter(json.loads(line)["prompt"] for line in calls.read_text().splitlines())
    report["model_calls"] = sum(answered.values())
    report["prompts_answered_twice"] = sum(1 for count in answered.values() if count > 1)
    # what a user sees in the UI: the runs under way lose the broker and fail, as do the runs the sensors
    # start while it is away (their claims come back when they end); then new runs do the work
    report["runs_failed"] = (tmp_path / "daemon.log").read_text(errors="replace").count("- RUN_FAILURE -")
    print("\nbroker restart report: " + json.dumps(report, indent=2))
    assert _stored(app_url, "posting_summary") == len(answered)
    assert report["prompts_answered_twice"] <= 1 and max(answered.values()) <= 2, answered
