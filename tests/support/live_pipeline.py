"""The real `pipeline ui` (`dagster dev`: webserver, daemon, code server) for end-to-end tests.

One server per test session (the fixture `live_pipeline`), in a temporary DAGSTER_HOME
with a temporary SQLite app database, on a free port of 127.0.0.1, with the LLM served
by a fake Ollama over HTTP (runs launched by the daemon are separate processes). The
sensors tick every 2 s and runs take 2 postings each, so a handful of postings gives
several runs. Everything started is stopped at the end: the server's whole process
group (webserver, daemon, code server and any run worker) and the fake Ollama.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from sqlalchemy import select

from appdb.database import dispose, migrate, session_scope
from appdb.models import UseCaseOutput
from benchmarks import ports
from pipeline_defs.settings import PROJECT_ROOT
from plugins.postings.postings_asset import report_ingest
from plugins.postings.store.ingest import ingest_files
from plugins.postings.store.postings_kind import POSTINGS
from tests.support.fake_ollama_server import FakeOllamaServer
from tests.support.postings import write_jsonl

BATCH_SIZE = 2
SENSOR_INTERVAL_SECONDS = 2
# `pipeline ui` loading the code location is a precondition, not what the tests measure: its bound only
# ends a start that is truly stuck (it took over 180 s at load average ~100 on 2 cores, 2026-11-28)
STARTUP_TIMEOUT_SECONDS = 600
ENRICHED_USE_CASES = ("posting_summary", "posting_skills", "skill_entities")
GENERATION_DELAY_SECONDS = 0.2
LOG_TAIL_LINES = 60
DEV_SHUTDOWN_SECONDS = 60
RUNS_QUERY = """
query Runs($limit: Int) {
  runsOrError(limit: $limit) {
    __typename
    ... on Runs { results { runId jobName status startTime endTime tags { key value } } }
    ... on PythonError { message }
  }
}
"""
RUN_ERRORS_QUERY = """
query RunErrors($runId: ID!) {
  logsForRun(runId: $runId, limit: 500) {
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message }
        ... on ExecutionStepFailureEvent { error { message } }
        ... on RunFailureEvent { error { message } }
      }
    }
  }
}
"""


free_port = ports.free_port  # the end-to-end tests' servers keep to PIPELINE_PORT_RANGE too


def make_postings(prefix: str, count: int) -> list[dict[str, str]]:
    """Postings whose text names a tool or two, so skills and entities have something to find."""
    tools = ["Python and SQL", "Excel", "Docker", "Java", "dbt and Python"]
    return [
        {
            "key": f"{prefix}-{index:03d}",
            "title": f"Data Analyst {prefix} {index}",
            "company": "Brightwave Energy",
            "location": "Berlin",
            "description": f"Analyse turbine data with {tools[index % len(tools)]}; report weekly.",
        }
        for index in range(1, count + 1)
    ]


@dataclass
class LivePipeline:
    url: str
    app_db_url: str
    dagster_home: Path
    log_path: Path
    work_dir: Path
    fake_ollama: FakeOllamaServer
    batch_size: int = BATCH_SIZE
    process_group: int = 0  # `pipeline ui`'s: every process it started is in it

    def processes(self) -> dict[int, tuple[int, str]]:
        """The live processes of `pipeline ui`'s group: their parent's id and command line (a process
        forked without exec, as a run from a forkserver, shows its parent's command line)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == self.process_group:
                    command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    found[int(entry.name)] = (int(fields[1]), command)
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
        return found

    def graphql(self, query: str, variables: dict[str, Any] | None = None, timeout: float = 30) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(
            f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            payload = json.loads(response.read())
        if payload.get("errors"):
            raise AssertionError(f"GraphQL errors: {payload['errors']}")
        return payload["data"]

    def ingest(self, rows: list[dict[str, str]], name: str) -> None:
        path = write_jsonl(self.work_dir / f"{name}.jsonl", rows)
        with session_scope(self.app_db_url) as session:
            report = ingest_files(session, [path])
            total = POSTINGS.table.count(session)
        assert not report.rejected, report.rejected
        with DagsterInstance.from_config(str(self.dagster_home)) as instance:  # as `pipeline ingest` does
            report_ingest(instance, report, total, "test")

    def outputs(self, keys: list[str]) -> dict[tuple[str, str], UseCaseOutput]:
        with session_scope(self.app_db_url) as session:
            rows = session.scalars(select(UseCaseOutput).where(UseCaseOutput.subject_key.in_(keys))).all()
            session.expunge_all()
        return {(row.use_case, row.subject_key): row for row in rows}

    def missing_outputs(self, keys: list[str]) -> list[str]:
        done = self.outputs(keys)
        return [f"{name}:{key}" for key in keys for name in ENRICHED_USE_CASES if (name, key) not in done]

    def wait_until_enriched(self, keys: list[str], timeout: float = 240) -> None:
        """Wait (without doing anything) until the sensors' runs gave every posting all its outputs."""
        self.wait_until(
            lambda: not self.missing_outputs(keys),
            timeout,
            lambda: f"postings still lacking outputs: {self.missing_outputs(keys)}",
        )

    def runs(self, limit: int = 200) -> list[dict[str, Any]]:
        result = self.graphql(RUNS_QUERY, {"limit": limit})["runsOrError"]
        assert result["__typename"] == "Runs", result
        for run in result["results"]:
            run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
        return result["results"]

    def wait_until(self, done: Callable[[], bool], timeout: float, describe: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return
            time.sleep(1)
        pytest.fail(f"timed out after {timeout:.0f}s: {describe()}\n\n{self.diagnostics()}")

    def diagnostics(self) -> str:
        """Run statuses, failed runs' errors and the server log's tail, for a failure message."""
        lines = ["runs (newest first):"]
        try:
            runs = self.runs()
        except (OSError, AssertionError) as exc:
            runs = []
            lines.append(f"  (cannot list runs: {exc})")
        for run in runs:
            tags = {key: value for key, value in run["tags"].items() if "partition" in key or "sensor" in key}
            lines.append(f"  {run['runId'][:8]} {run['jobName']} {run['status']} {tags}")
            if run["status"] == "FAILURE":
                events = self.graphql(RUN_ERRORS_QUERY, {"runId": run["runId"]})["logsForRun"]["events"]
                errors = [(event.get("error") or {}).get("message") for event in events]
                lines += [f"    error: {error.strip()[:500]}" for error in errors if error]
        log = self.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        lines += [f"last {len(log)} lines of {self.log_path}:", *log]
        return "\n".join(lines)


def _server_env(work_dir: Path, app_db_url: str, ollama_url: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIPELINE_", "DAGSTER_", "OLLAMA_"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        PIPELINE_DATA_DIR=str(work_dir / "data"),
        PIPELINE_DATABASE_URL=app_db_url,
        DAGSTER_HOME=str(work_dir / "dagster_home"),
        OLLAMA_HOST=ollama_url,
        PIPELINE_LLM_BACKEND="ollama",
        # the fake Ollama answers the skills prompt (the CPU tagger has tests of its own)
        PIPELINE_SKILLS_STYLE="llm",
        PIPELINE_BATCH_SIZE=str(BATCH_SIZE),
        PIPELINE_SENSOR_INTERVAL_SECONDS=str(SENSOR_INTERVAL_SECONDS),
    )
    return env


def _location_loaded(live: LivePipeline) -> bool:
    try:
        data = live.graphql(
            "{ workspaceOrError { ... on Workspace { locationEntries { name "
            "locationOrLoadError { __typename ... on PythonError { message } } } } } }",
            timeout=5,
        )
    except (OSError, urllib.error.URLError):
        return False
    states = [entry["locationOrLoadError"] or {} for entry in data["workspaceOrError"]["locationEntries"]]
    if any(state.get("__typename") == "PythonError" for state in states):
        raise AssertionError(f"the code location failed to load: {states}")
    return bool(states) and all(state.get("__typename") == "RepositoryLocation" for state in states)


def _stop_process_group(process: subprocess.Popen) -> bool:
    """Stop `dagster dev` as a service manager would (SIGTERM: it shuts its webserver and daemon
    down), then end whatever is left in its process group (code servers, run workers).
    Whether dagster dev exited on the SIGTERM by itself."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=DEV_SHUTDOWN_SECONDS)
        graceful = True
    except subprocess.TimeoutExpired:
        graceful = False
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.poll()
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
    return graceful


def _as_a_background_job() -> None:
    """Start the server as `nohup pipeline ui &` would: with SIGINT ignored (it must still stop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="session")
def live_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePipeline]:
    work_dir = tmp_path_factory.mktemp("live_pipeline")
    app_db_url = f"sqlite:///{work_dir / 'app.db'}"
    migrate(app_db_url)
    log_path = work_dir / "dagster_dev.log"
    with FakeOllamaServer(delay_seconds=GENERATION_DELAY_SECONDS) as fake, log_path.open("w") as log:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline_defs.cli.main", "ui", "--port", str(port)],
            cwd=PROJECT_ROOT,
            env=_server_env(work_dir, app_db_url, fake.url),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so teardown reaches every child
            preexec_fn=_as_a_background_job,
        )
        live = LivePipeline(
            url=f"http://127.0.0.1:{port}",
            app_db_url=app_db_url,
            dagster_home=work_dir / "dagster_home",
            log_path=log_path,
            work_dir=work_dir,
            fake_ollama=fake,
            process_group=process.pid,
        )
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
            while not _location_loaded(live):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        f"`pipeline ui` did not come up on {live.url} (exit code {process.returncode}):\n"
                        + log_path.read_text(errors="replace")[-5000:]
                    )
                time.sleep(1)
            yield live
        finally:
            graceful = _stop_process_group(process)
            dispose(app_db_url)
        assert graceful, (
            f"`pipeline ui` did not stop within {DEV_SHUTDOWN_SECONDS}s of SIGTERM; see {log_path}"
        )


@pytest.fixture(scope="session")
def enriched_postings(live_pipeline: LivePipeline) -> list[str]:
    """Three postings the daemon's sensors have fully processed (summary, skills, entities)."""
    rows = make_postings("flow-a", 3)
    live_pipeline.ingest(rows, "flow-a")
    keys = [row["key"] for row in rows]
    live_pipeline.wait_until_enriched(keys)
    return keys


def max_runs(partitions: int, batch_size: int) -> int:
    return math.ceil(partitions / batch_size)
