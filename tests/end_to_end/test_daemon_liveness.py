"""Host loss under the daemon: the whole `pipeline ui` process tree (webserver, daemon, code server, run
workers) is killed with SIGKILL while one run holds the `llm` pool's only slot and claims, at least one
more waits for the slot and the rest are queued. After a restart (timed from the moment the code location is
loaded, so a slow start on a loaded machine is reported as such) the dead runs must be failed within
twice the reaper's own bound, and every posting's LLM work done within one lease of that: the runs that
died (holding the pool, or only waiting for it) are failed by their stopped heartbeats, their slots and
claims freed, and the queued and newly requested runs do the work.

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
from pipeline_defs.runtime.dagster_home import dagster_yaml
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

POSTINGS = 10  # five runs of two: one holds the pool, others wait for it or are queued
LEASE_SECONDS = 60
GROUP_JOB = "gemma3_270m_batch_job"
HEARTBEAT_SECONDS = 1
RUNS_STARTED_BOUND_SECONDS = 300
# after the reaping: a lease for the work itself, plus launching the queued and new run workers, which
# took minutes on a loaded machine (load 15 on 2 cores)
WORK_AFTER_REAPING_BOUND_SECONDS = LEASE_SECONDS + 240
# the liveness sensor fails a run 5 beats after its last one, or 5 beats + 30 s after its start when it
# never beat (SILENT_GRACE_SECONDS); twice that, for a loaded machine
REAP_BOUND_SECONDS = 2 * (5 * HEARTBEAT_SECONDS + 30 + 5)
RUNS_END_BOUND_SECONDS = 120  # from a run's last output to its end: checks and bookkeeping only
IN_PROGRESS = ("STARTED", "QUEUED", "STARTING", "NOT_STARTED")


def _statuses(live: LivePipeline, run_ids: list[str]) -> dict[str, str]:
    statuses = {run["runId"]: run["status"] for run in live.runs()}
    return {run_id: statuses.get(run_id, "unknown") for run_id in run_ids}


def _launching(live: LivePipeline) -> int:
    return sum(1 for run in live.runs() if run["jobName"] == GROUP_JOB and run["status"] == "STARTING")


def _queued(live: LivePipeline) -> int:
    return sum(1 for run in live.runs() if run["jobName"] == GROUP_JOB and run["status"] == "QUEUED")


def _missing_llm_outputs(live: LivePipeline, keys: list[str]) -> list[str]:
    return [key for key in live.missing_outputs(keys) if not key.startswith("skill_entities:")]


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
        env.update(
            PIPELINE_HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS), PIPELINE_LEASE_SECONDS=str(LEASE_SECONDS)
        )
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

            # one run inside a model call and at least one more started, waiting for the pool (a third
            # is not waited for: on a loaded machine launching run workers took minutes); the bound
            # is for launching two run workers and says so
            live.wait_until(
                lambda: fake.in_flight >= 1 and len(in_flight()) >= 2,
                RUNS_STARTED_BOUND_SECONDS,
                lambda: (
                    f"the daemon had not launched two runs (one in a model call, one waiting for the pool) "
                    f"{RUNS_STARTED_BOUND_SECONDS}s after the ingest: {len(in_flight())} started, "
                    f"{fake.in_flight} in a model call"
                ),
            )
            before = {run["runId"]: run["status"] for run in live.runs() if run["jobName"] == GROUP_JOB}
        finally:
            _kill_tree(process)
            fake.release()

        port = free_port()
        live.url = f"http://127.0.0.1:{port}"
        process = _start(live, env, port)  # bounded by STARTUP_TIMEOUT_SECONDS, which says it was slow
        restarted = time.monotonic()  # recovery is timed from a running daemon, not from a slow start
        dead = [run_id for run_id, status in before.items() if status == "STARTED"]
        try:
            # 1. the liveness sensor fails every run that died: a stopped heartbeat is seen within
            # 5 beats, a run killed before its first beat within 5 beats + 30 s; the bound is twice that
            live.wait_until(
                lambda: _statuses(live, dead) == dict.fromkeys(dead, "FAILURE"),
                REAP_BOUND_SECONDS,
                lambda: (
                    f"the liveness sensor had not failed the dead runs {REAP_BOUND_SECONDS}s after the "
                    f"restart (is it ticking?): {_statuses(live, dead)}"
                ),
            )
            reaped = time.monotonic()
            # 2. their work behind the `llm` pool, within one lease of the reaping: the queued and newly
            # requested runs take the freed slot and claims
            live.wait_until(
                lambda: not _missing_llm_outputs(live, keys),
                WORK_AFTER_REAPING_BOUND_SECONDS,
                lambda: (
                    f"the dead runs were reaped {reaped - restarted:.0f}s after the restart, but "
                    f"{WORK_AFTER_REAPING_BOUND_SECONDS}s later postings still lacked LLM outputs: "
                    f"{_missing_llm_outputs(live, keys)}; runs still launching (STARTING: the daemon's "
                    f"launches were slow) {_launching(live)}, queued {_queued(live)}"
                ),
            )
            seconds = time.monotonic() - restarted
            # skill resolution (no pool, several runs at once on a CPU) follows; a hang guard only
            live.wait_until_enriched(keys, timeout=300)  # launching its run workers took minutes at load 15
            all_seconds = time.monotonic() - restarted

            def group_runs() -> dict[str, str]:
                return {run["runId"]: run["status"] for run in live.runs() if run["jobName"] == GROUP_JOB}

            # the last run stores its last output, then reports its checks and ends: wait for that
            live.wait_until(
                lambda: not [status for status in group_runs().values() if status in IN_PROGRESS],
                RUNS_END_BOUND_SECONDS,
                lambda: (
                    f"runs still in progress {RUNS_END_BOUND_SECONDS}s after all work was done: "
                    f"{group_runs()}"
                ),
            )
            after = group_runs()
        finally:
            _kill_tree(process)
            dispose(app_db_url)
    assert all(after[run_id] == "FAILURE" for run_id in dead), {run_id: after[run_id] for run_id in dead}
    print(
        f"{len(dead)} runs died with the host; the LLM work of all {POSTINGS} postings done {seconds:.0f}s "
        f"after the restart, skill resolution too {all_seconds:.0f}s after it"
    )
