"""Host loss under the daemon: the whole `pipeline ui` process tree (webserver, daemon, code server, run
workers) is killed with SIGKILL while one run holds the `llm` pool's only slot and claims, three more
wait for the slot and another is queued. After a restart every posting must be done within one lease
+ 60 s: the runs that died (holding the pool, or only waiting for it) are failed by their stopped
heartbeats, their slots and claims freed, and the queued and newly requested runs do the work.

Its own `dagster dev` (the shared one in tests/support/live_pipeline.py must survive), with the pool
one step wide and four runs at once (as on the embedded model), a 1 s heartbeat and a 60 s lease.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appdb.database import dispose, migrate
from pipeline_defs.dagster_home import dagster_yaml
from pipeline_defs.settings import PROJECT_ROOT, Settings
from tests.support.fake_ollama_server import FakeOllamaServer
from tests.support.live_pipeline import (
    STARTUP_TIMEOUT_SECONDS,
    LivePipeline,
    _location_loaded,
    _server_env,
    free_port,
    make_postings,
)

pytestmark = pytest.mark.live_dagster

POSTINGS = 10  # five runs of two: one holds the pool, three wait for it, one is queued
LEASE_SECONDS = 60
GROUP_JOB = "gemma3_270m_batch_job"


def _home_like_the_embedded_model(env: dict[str, str]) -> None:
    """dagster.yaml as the embedded model has it (four runs at once, the `llm` pool one step wide), and
    the run queue launching up to three runs whose steps must wait for the pool (Dagster's
    `op_granularity_run_buffer`): without it the queue holds them back and only one run waits at a time
    (on its next step), which the test could not catch reliably."""
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update({**env, "PIPELINE_LLM_BACKEND": "embedded", "PIPELINE_DAGSTER_STORAGE": "stock"})
        os.environ.pop("OLLAMA_HOST", None)
        text = dagster_yaml(Settings.from_env())
        (home / "dagster.yaml").write_text(
            text.replace("    default_limit: 1\n", "    default_limit: 1\n    op_granularity_run_buffer: 3\n")
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _start(live: LivePipeline, env: dict[str, str], port: int) -> subprocess.Popen:
    with live.log_path.open("a") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline_defs.cli.main", "ui", "--port", str(port)],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while not _location_loaded(live):
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"`pipeline ui` did not come up: {live.log_path.read_text(errors='replace')[-3000:]}")
        time.sleep(1)
    return process


def _kill_tree(process: subprocess.Popen) -> None:
    """A host loss: every process of the tree dies at once, no clean-up."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_after_the_daemon_tree_is_killed_a_restart_finishes_all_work_within_a_lease(
    app_db_url: str, tmp_path: Path
) -> None:
    migrate(app_db_url)
    rows = make_postings("host-loss", POSTINGS)
    keys = [row["key"] for row in rows]
    with FakeOllamaServer(delay_seconds=0.5) as fake:
        env = _server_env(tmp_path, app_db_url, fake.url)
        env.update(PIPELINE_HEARTBEAT_SECONDS="1", PIPELINE_LEASE_SECONDS=str(LEASE_SECONDS))
        _home_like_the_embedded_model(env)
        port = free_port()
        live = LivePipeline(
            url=f"http://127.0.0.1:{port}",
            app_db_url=app_db_url,
            dagster_home=Path(env["DAGSTER_HOME"]),
            log_path=tmp_path / "dagster_dev.log",
            work_dir=tmp_path,
            fake_ollama=fake,
        )
        process = _start(live, env, port)
        fake.hold()  # the run that gets the pool's slot stays inside its model call, holding claims
        try:
            live.ingest(rows, "host-loss")

            def in_flight() -> list[dict]:
                return [
                    run for run in live.runs() if run["jobName"] == GROUP_JOB and run["status"] == "STARTED"
                ]

            live.wait_until(
                lambda: fake.in_flight >= 1 and len(in_flight()) >= 3,
                180,
                lambda: (
                    f"one run inside a model call, others waiting for the pool ({len(in_flight())} started)"
                ),
            )
            before = {run["runId"]: run["status"] for run in live.runs() if run["jobName"] == GROUP_JOB}
        finally:
            _kill_tree(process)
            fake.release()

        restarted = time.monotonic()
        port = free_port()
        live.url = f"http://127.0.0.1:{port}"
        process = _start(live, env, port)
        try:
            # the work behind the `llm` pool the dead runs held, within one lease + 60 s of the restart
            live.wait_until(
                lambda: (
                    not [key for key in live.missing_outputs(keys) if not key.startswith("skill_entities:")]
                ),
                LEASE_SECONDS + 60 - (time.monotonic() - restarted),
                lambda: f"postings still lacking LLM outputs: {live.missing_outputs(keys)}",
            )
            seconds = time.monotonic() - restarted
            # skill resolution (no pool, several runs at once on a CPU) follows; a hang guard only
            live.wait_until_enriched(keys, timeout=120)
            all_seconds = time.monotonic() - restarted
            after = {run["runId"]: run["status"] for run in live.runs() if run["jobName"] == GROUP_JOB}
        finally:
            _kill_tree(process)
            dispose(app_db_url)
    dead = [run_id for run_id, status in before.items() if status == "STARTED"]
    assert all(after[run_id] == "FAILURE" for run_id in dead), {run_id: after[run_id] for run_id in dead}
    assert not [status for status in after.values() if status in ("STARTED", "QUEUED", "STARTING")], after
    print(
        f"{len(dead)} runs died with the host; the LLM work of all {POSTINGS} postings done {seconds:.0f}s "
        f"after the restart, skill resolution too {all_seconds:.0f}s after it"
    )
