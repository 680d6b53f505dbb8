"""The production path, timed: N postings ingested into an idle `pipeline ui`, until every output is current.

    python -m benchmarks.daemon_throughput [--postings 1000] [--parallel 4] [--posting-set skillspan|tiny]
        [--postings-file FILE] [--data-dir DIR] [--latency-ms MS] [--prefill-tokens-per-second N]
        [--decode-tokens-per-second N] [--min-output-tokens N]
        [--hosts 1] [--dagster-storage sqlite,postgres] [--kill-host-after SECONDS]
        [--project-root DIR] [--label NAME] [--no-floor | --floor-postings N] [--retire]
        [--idle-seconds N] [--own-server]

What users run: `pipeline ui` (dagster dev: the daemon's sensors, its run queue, runs launched as
subprocesses) against `benchmarks.simulated_ollama` servers (one process each, `--parallel` slots),
judge off. Once the code location is up and the sensors have ticked on an empty database, N postings
are ingested with `pipeline ingest`; the clock starts when it returns.

The postings (`benchmarks/skillspan_postings.py`): by default real ones, SkillSpan's 140 train postings
(mean 668 words) from the shared data (`--data-dir`, else the PIPELINE_SHARED_DATA setting), cycled to
N and each made unique; `--postings-file` a user's own JSON lines, cycled the same way; `--posting-set
tiny` the 8-word postings that measure the orchestration alone. The simulated server's time: with real
postings a 7-8B model on one GPU (`simulated_ollama.GPU_7B`: prompt tokens at
`--prefill-tokens-per-second`, one prompt at a time; answer tokens at `--decode-tokens-per-second` in
each slot; `--latency-ms` beside them, default 0); with tiny postings `--latency-ms` alone (default 100).

Measured: the first output, every output of the three use cases current (summary: LLM; skills and
skill_entities: scripts, unless the settings give them a model), the runs, and at the servers the idle
gaps between generations and the busy share of their slots. Efficiency = the backend's own least time for
the calls (a simulated server's: its prompts one after another or its generations spread over its
slots, whichever is longer; `--own-server`: calls x `--latency-ms` / slots) / the time from ingest to
every output current.

A posting's cost by stage (the `## CPU seconds a posting by stage` table): the tagger, the linker and the
faithfulness check as the floor (below) measures them in process, the rest of the floor's summary work
(prompts, the LLM client, parsing), the orchestration (the path's CPU a posting less the floor's), the
model server's time a posting (its generations' time, and its least wall time at its slots), and the
cores that keep its slots busy: the path's CPU a posting x the server's postings a second at its slots.

Cost, not only time (CPU seconds, which a busy machine does not inflate as it does wall time): from
just before ingest to every output current and the enriched postings tables remade after the last
one (`tables made s`; `--no-tables`: to every output current), the CPU of every process `pipeline
ui` started (daemon, code server, run workers, webserver, dagster dev itself), exact in total (the
kernel adds a reaped
process's CPU to its parent's) and by kind of process as sampled from /proc (`process_tree_cpu.py`),
with the run workers started and their CPU each, and per job; on PostgreSQL, beside it and not in
the path's total, the local server's own CPU over the same window (`process_tree_cpu.server_cpu_seconds`:
a query plan gone wrong shows there, not in the path). Then **the floor**: the same work (the
same prompts through the same LLM resource to the same server, the tagger and the resolver called per
posting, the outputs parsed and checked, nothing stored) in one plain loop in this process, after the
path's run in the same invocation; `ratio to floor` = the path's CPU per posting / the loop's (1.0:
orchestration costs nothing). Also when each use case's first and last outputs came, and how far each
use case trails its upstream (skill entities behind their posting's skills). `--no-floor` skips it;
`--floor-postings N` runs the loop over the first N postings only (the floor is a cost a posting,
which does not grow with the count; at 100,000 the whole loop would take half an hour of one core).

`--idle-seconds N` first measures what `pipeline ui` costs with nothing to do: the CPU of each kind of
process over N seconds once the start-up runs are over, the sensors ticking on an empty database
(`idle` in the row: CPU seconds by kind and the share of one core), before the postings are ingested.

`--retire` runs `pipeline retire` over every finished posting once `pipeline ui` has stopped (what
an operator does at a large partition count): its time, CPU and the partitions it deleted.

`--own-server` measures against the model server this shell configures instead of a simulated one
(`OLLAMA_HOST` or `PIPELINE_LLM_HOSTS`, `PIPELINE_OPENAI_BASE_URL`, the models: docs/configuration.md):
the shell's `PIPELINE_*` and `OLLAMA_*` variables go to `pipeline ui`, except its databases, data and
Dagster home, which stay the benchmark's own; no config file is read in either mode (its databases
would not be the benchmark's), so give the server by environment. The same postings, path and CPU
accounting; the calls' times are read from the interactions the pipeline records (calls a second,
the LLM window, gaps with no call in flight, the most calls in flight). `--hosts` x `--parallel` say
the slots the server has; its own time a call is known only to you: give it as `--latency-ms` for an
efficiency (the runs' latencies include the wait in its queue). The floor calls the server again for
`--floor-postings` postings.

`--project-root` runs another checkout (e.g. a `git worktree` of an older commit) with this
benchmark and this simulated server, so before and after are measured by the same command.
`--kill-host-after S` kills the second host's server S seconds after ingest: its postings must be
finished by the others, with no duplicate outputs and no attempts spent.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, create_engine, func, select, text

from appdb.database import normalize_url
from appdb.models import Interaction, UseCaseOutput, WorkItem
from benchmarks.ports import free_port
from benchmarks.process_tree_cpu import (
    ProcessTreeCpu,
    become_subreaper,
    reap_orphans,
    server_cpu_seconds,
)
from benchmarks.report import write_report
from benchmarks.simulated_ollama import GPU_7B, NO_TOKENS, TokenRates, least_seconds, server_arguments
from benchmarks.skillspan_postings import (
    TINY,
    add_posting_options,
    benchmark_postings,
    describe,
)
from benchmarks.stage_cpu import (
    FAITHFULNESS,
    LINKER,
    ORCHESTRATION,
    TAGGER,
    StageCpu,
    cores_to_keep_busy,
    timed_use_cases,
)
from domain.language.declaration import SCRIPT_BACKEND
from pipeline_defs.settings import PROJECT_ROOT

USE_CASES = ("posting_summary", "posting_skills", "skill_entities")
UPSTREAM = {"skill_entities": "posting_skills"}  # the use case each one waits for
LOG = logging.getLogger(__name__)
PROJECT_PACKAGES = ("appdb", "assets", "domain", "pipeline_defs", "resources", "sensors")
STARTUP_TIMEOUT_SECONDS = 300
IDLE_SECONDS = 12  # after the location is up: the sensors' first ticks find an empty database
POLL_SECONDS = 0.25
GAP_SECONDS = 1.0
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")
LOCATION_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { __typename } } } } }
"""
# the partition health the asset page asks for (Dagster 1.13's `PartitionHealthQuery`, its part for a
# dynamically partitioned asset): every partition key and every key's status
PARTITION_HEALTH_QUERY = """
{ assetNodeOrError(assetKey: {path: ["%s"]}) { ... on AssetNode { id
  partitionKeysByDimension { name type partitionKeys }
  assetPartitionStatuses { ... on DefaultPartitionStatuses {
    materializedPartitions materializingPartitions failedPartitions } } } } }
"""
ASSET_PAGE_TIMINGS = 3
TABLES_JOB = "__ASSET_JOB"  # the run that remakes the enriched postings tables (`outputs` group)
TABLES_TIMEOUT_SECONDS = 120  # the outputs sensor looks every 30 s
RUNS_QUERY = """
{ runsOrError(limit: 1000) { ... on Runs { results { runId jobName status startTime endTime
  tags { key value } } } } }
"""


def _get(url: str, timeout: float = 10) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def _post(url: str, body: dict[str, Any], timeout: float = 30) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


@contextmanager
def simulated_hosts(
    count: int,
    latency_ms: float,
    parallel: int,
    ports: list[int] | None = None,
    rates: TokenRates = NO_TOKENS,
) -> Iterator[list[subprocess.Popen]]:
    """`count` simulated Ollama servers, each its own process (so one can be killed like a dead host);
    on `ports` when given (a shared machine's own range), else on free ports."""
    processes = []
    try:
        for index in range(count):
            port = ports[index] if ports else free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.simulated_ollama", "--port", str(port)]
                + [*server_arguments(latency_ms, rates), "--parallel", str(parallel)],
                cwd=PROJECT_ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            process.url = process.stdout.readline().strip()  # type: ignore[attr-defined]
            processes.append(process)
            if not process.url.startswith("http"):  # type: ignore[attr-defined]
                raise RuntimeError(f"the simulated server on port {port} did not start (the port taken?)")
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:  # a loaded machine: it did not get the CPU to exit
                    process.kill()
                    process.wait()


def ui_env(
    project_root: Path,
    work: Path,
    app_url: str,
    dagster_url: str | None,
    host_url: str | None,
    parallel: int,
) -> dict[str, str]:
    """The environment of a benchmark's `pipeline ui`, pointed at the work folder and the databases:
    with `host_url`, this shell's without its pipeline, Dagster and Ollama settings, and one simulated
    host; without (`--own-server`), this shell's model server and pipeline settings kept."""
    dropped = ("PIPELINE_", "DAGSTER_", "OLLAMA_") if host_url else ("DAGSTER_", "PIPELINE_DAGSTER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    no_config = work / "pipeline.toml"  # a config file's databases would not be the benchmark's
    no_config.touch()
    env.update(
        PYTHONPATH=str(project_root),
        PIPELINE_CONFIG=str(no_config),
        PIPELINE_DATA_DIR=str(work / "data"),
        PIPELINE_DATABASE_URL=app_url,
        DAGSTER_HOME=str(work / "dagster_home"),
        PIPELINE_JUDGE_SAMPLE="0",
    )
    if host_url:
        env.update(PIPELINE_LLM_BACKEND="ollama", OLLAMA_HOST=host_url, OLLAMA_NUM_PARALLEL=str(parallel))
    if dagster_url:
        env["PIPELINE_DAGSTER_POSTGRES_URL"] = dagster_url.replace("postgresql://", "postgresql+psycopg2://")
    return env


@contextmanager
def postgres_databases(admin_url: str, count: int, prefix: str | None = None) -> Iterator[list[str]]:
    """Fresh PostgreSQL databases named `<prefix>_<random>`, dropped afterwards."""
    admin_url = normalize_url(admin_url)  # psycopg2: with SQLAlchemy 2.1 a bare postgresql:// picks psycopg 3
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    prefix = prefix or os.environ.get("PIPELINE_TEST_DATABASE_PREFIX", "bench_daemon")  # a shared server's
    names = [f"{prefix}_{uuid.uuid4().hex[:8]}" for _ in range(count)]
    base = admin_url.rsplit("/", 1)[0]
    with engine.connect() as conn:
        for name in names:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield [f"{base}/{name}" for name in names]
    finally:
        with engine.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


class Ui:
    """`pipeline ui` in a process group of its own, from `project_root`, with the given environment."""

    def __init__(
        self,
        project_root: Path,
        env: dict[str, str],
        log_path: Path,
        port: int | None = None,
        python: str = sys.executable,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_path.open("a")
        self.process = subprocess.Popen(
            [python, "-m", "pipeline_defs.cli.main", "ui", "--port", str(self.port)],
            cwd=project_root,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def graphql(self, query: str) -> dict[str, Any]:
        return _post(f"{self.url}/graphql", {"query": query})["data"]

    def wait_loaded(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        query = LOCATION_QUERY
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"`pipeline ui` exited ({self.process.returncode}); see {self.log.name}")
            try:
                entries = self.graphql(query)["workspaceOrError"]["locationEntries"]
                if entries and all(
                    (e["locationOrLoadError"] or {}).get("__typename") == "RepositoryLocation"
                    for e in entries
                ):
                    return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(f"`pipeline ui` did not come up; see {self.log.name}")

    def wait_idle(self) -> None:
        """Until the start-up runs (taxonomy, gym) are over and the sensors ticked on an empty database."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            active = [run for run in self.runs() if run["status"] not in FINISHED]
            if not active:
                break
            time.sleep(1)
        time.sleep(IDLE_SECONDS)

    def wait_tables_made(self, since: float, timeout: float = TABLES_TIMEOUT_SECONDS) -> float | None:
        """Until a run of the enriched postings tables started at or after `since` (so it read every
        output) has ended, and no run is going: when it ended (None: not within `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            runs = self.runs()
            made = [
                run["endTime"]
                for run in runs
                if run["jobName"] == TABLES_JOB
                and (run.get("startTime") or 0) >= since
                and run["status"] in FINISHED
                and run.get("endTime")
            ]
            if made and all(run["status"] in FINISHED for run in runs):
                return max(made)
            time.sleep(1)
        return None

    def runs(self) -> list[dict[str, Any]]:
        runs = self.graphql(RUNS_QUERY)["runsOrError"]["results"]
        for run in runs:
            run["tags"] = {tag["key"]: tag["value"] for tag in run["tags"]}
        return runs

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=60)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(3)
        self.log.close()


def _byte_compile(project_root: Path, python: str = sys.executable) -> None:
    """Compile the checkout's modules once, as a normal install leaves them: every run is a new process,
    and where PYTHONDONTWRITEBYTECODE is set (this machine; many container images) each would compile
    the project anew (0.25-0.3 s of a run's start)."""
    packages = [str(project_root / name) for name in PROJECT_PACKAGES if (project_root / name).is_dir()]
    subprocess.run([python, "-m", "compileall", "-q", *packages], check=True, capture_output=True)


def storage_bytes(work: Path, app_url: str, dagster_url: str | None) -> dict[str, int]:
    """The size on disk of Dagster's storage and of the application database: files for SQLite
    (Dagster's home folder holds its databases and the compute logs), `pg_database_size` for PostgreSQL."""

    def database_bytes(url: str) -> int:
        with _connected(url) as conn:
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())

    def folder_bytes(folder: Path) -> int:
        return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())

    sqlite_app = app_url.removeprefix("sqlite:///")
    return {
        "dagster": database_bytes(dagster_url) if dagster_url else folder_bytes(work / "dagster_home"),
        "app_db": database_bytes(app_url)
        if not app_url.startswith("sqlite")
        else sum(
            Path(sqlite_app + suffix).stat().st_size
            for suffix in ("", "-wal")
            if Path(sqlite_app + suffix).exists()
        ),
    }


def asset_page_timing(ui: Any, asset: str) -> dict[str, Any]:
    """What the asset page's partition health costs the webserver at this partition count: the median
    wall time of its query (a client's wait, so it moves with the machine's load) and the answer's size."""
    seconds, size = [], 0
    for _ in range(ASSET_PAGE_TIMINGS):
        started = time.perf_counter()
        try:
            answer = ui.graphql(PARTITION_HEALTH_QUERY % asset)
        except OSError as error:  # a timeout at a large partition count is a figure too
            return {"asset": asset, "error": f"{type(error).__name__}: {error}"}
        seconds.append(time.perf_counter() - started)
        size = len(json.dumps(answer))
    node = answer["assetNodeOrError"]
    keys = (node.get("partitionKeysByDimension") or [{}])[0].get("partitionKeys") or []
    return {
        "asset": asset,
        "partitions": len(keys),
        "median_seconds": round(sorted(seconds)[len(seconds) // 2], 3),
        "answer_kb": round(size / 1024, 1),
    }


def _pipeline(project_root: Path, env: dict[str, str], *command: str, python: str = sys.executable) -> str:
    """One `pipeline` command of the checkout under test: its output, or an error with it if it fails."""
    done = subprocess.run(
        [python, "-m", "pipeline_defs.cli.main", *command],
        cwd=project_root,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"`pipeline {' '.join(command)}` failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def retire_finished(
    project_root: Path, env: dict[str, str], work: Path, app_url: str, dagster_url: str | None
) -> dict[str, Any]:
    """`pipeline retire` over every posting finished by now: wall and CPU seconds, what it printed,
    and Dagster's storage before and after (PostgreSQL keeps freed pages until a VACUUM FULL)."""
    before = storage_bytes(work, app_url, dagster_url)["dagster"]
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date().isoformat()
    cpu_before, started = _children_cpu_seconds(), time.perf_counter()
    printed = _pipeline(project_root, env, "retire", "--finished-before", tomorrow)
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(_children_cpu_seconds() - cpu_before, 1),
        "printed": printed.strip().splitlines(),
        "dagster_storage_mb_before_after": [
            round(before / 2**20, 1),
            round(storage_bytes(work, app_url, dagster_url)["dagster"] / 2**20, 1),
        ],
    }


def idle_gaps(intervals: list[tuple[float, float]]) -> list[float]:
    """The stretches with no generation running, between the first start and the last end."""
    gaps, busy_until = [], None
    for start, end in sorted(intervals):
        if busy_until is not None and start > busy_until:
            gaps.append(start - busy_until)
        busy_until = end if busy_until is None else max(busy_until, end)
    return gaps


def measure(args: argparse.Namespace, storage: str) -> dict[str, Any]:
    """One `pipeline ui` from start to every output current; the figures of that run."""
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="daemon-bench-")))
        hosts = (
            []
            if args.own_server
            else stack.enter_context(
                simulated_hosts(args.hosts, args.latency_ms, args.parallel, rates=args.rates)
            )
        )
        if storage == "postgres":
            app_url, dagster_url = stack.enter_context(postgres_databases(args.postgres_admin_url, 2))
        else:
            app_url, dagster_url = f"sqlite:///{work / 'app.db'}", None
        env = ui_env(
            args.project_root, work, app_url, dagster_url, hosts[0].url if hosts else None, args.parallel
        )
        if len(hosts) > 1:
            env["PIPELINE_LLM_HOSTS"] = "; ".join(f"{h.url} parallel={args.parallel}" for h in hosts)
        for pair in args.env:
            name, _, value = pair.partition("=")
            env[name] = value
        _pipeline(args.project_root, env, "migrate")
        become_subreaper()  # a process orphaned at shut-down is reaped here, its CPU counted
        children_before_ui = _children_cpu_seconds()
        ui = Ui(args.project_root, env, work / "dagster_dev.log")
        tree = ProcessTreeCpu(ui.process.pid)
        tree.start()
        try:
            ui.wait_loaded()
            ui.wait_idle()
            idle = idle_cost(tree, args.idle_seconds) if args.idle_seconds else None
            for host in hosts:
                _post(f"{host.url}/stats/reset", {})
            rows = args.rows
            postings_file = work / "postings.jsonl"
            postings_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
            storage_before = storage_bytes(work, app_url, dagster_url)
            tree.start_window()  # the tree's CPU counts from here: ingest wakes the sensors
            server_before = server_cpu_seconds() if storage == "postgres" else None
            children_before_ingest = _children_cpu_seconds()
            _pipeline(args.project_root, env, "ingest", str(postings_file))
            ingest_cpu = _children_cpu_seconds() - children_before_ingest
            ingested = time.time()
            result = _watch(args, app_url, hosts, ingested)
            at_all_current = tree.sample()  # the exact total then, beside the one with the tables made
            if result["all_current_seconds"] and not args.no_tables:
                # the enriched postings tables follow the outputs: their run is part of the path's cost
                result["tables_made_seconds"] = ui.wait_tables_made(ingested + result["all_current_seconds"])
                if result["tables_made_seconds"] is not None:
                    result["tables_made_seconds"] = round(result["tables_made_seconds"] - ingested, 2)
            tree.stop_window()
            server_after = server_cpu_seconds() if server_before is not None else None
            all_runs = ui.runs()
            result["runs"] = _runs_summary(all_runs, ingested, llm_run_ids(app_url))
            result["asset_page"] = asset_page_timing(ui, "posting_summary")
            result["storage_growth_mb"] = {
                name: round((size - storage_before[name]) / 2**20, 1)
                for name, size in storage_bytes(work, app_url, dagster_url).items()
            }
        except BaseException:
            tree.stop()
            kept = Path(tempfile.mkdtemp(prefix="daemon-bench-log-")) / "dagster_dev.log"
            ui.stop()
            kept.write_text((work / "dagster_dev.log").read_text(errors="replace"))
            print(f"  (dagster dev log kept at {kept})", file=sys.stderr)
            raise
        tree.stop()
        ui.stop()
        orphans_reaped = reap_orphans()
        # the kernel's count of every reaped process of `pipeline ui`, start-up and shut-down included
        ui_lifetime_cpu = _children_cpu_seconds() - children_before_ui - ingest_cpu
        if args.retire:
            retired = retire_finished(args.project_root, env, work, app_url, dagster_url)
        if args.keep_log is not None:
            args.keep_log.mkdir(parents=True, exist_ok=True)
            kept = args.keep_log / f"dagster_dev-{storage}-{int(ingested)}.log"
            kept.write_text((work / "dagster_dev.log").read_text(errors="replace"))
        if args.own_server:  # the calls as the pipeline recorded them: their start and end
            servers = [llm_call_timeline(app_url)]
            stats = [{"peak_concurrent_generations": peak_overlap(servers[0])}]
        else:
            servers = [_get(f"{h.url}/stats/timeline")["generations"] for h in hosts if h.poll() is None]
            stats = [_get(f"{h.url}/stats") for h in hosts if h.poll() is None]
        result.update(_integrity(app_url, len(rows)))
        result.update(_server_figures(args, servers, stats, ingested, result))
        llm_firsts = [
            seconds
            for name, seconds in result["first_output_by_use_case"].items()
            if name in result["llm_use_cases"]
        ]
        result["first_llm_output_seconds"] = min(llm_firsts, default=None)
        result.update(storage=storage, hosts=args.hosts, latency_ms=args.latency_ms, parallel=args.parallel)
        result["token_rates"] = None if args.own_server else dataclasses.asdict(args.rates)
        result["posting_texts"] = args.posting_texts
        if args.own_server:
            result["server"] = "own"
        result["postings"] = args.postings
        result.update(_output_latencies(app_url, ingested))
        # a run cut short by --timeout: its CPU over the postings it finished (runs in flight add a little)
        finished = args.postings if result["all_current_seconds"] else result["outputs"] / len(USE_CASES)
        result["postings_finished"] = round(finished)
        result["cpu"] = _cpu_figures(tree, ui_lifetime_cpu, ingest_cpu, max(finished, 1))
        result["cpu"]["path_cpu_seconds_per_posting_at_all_current"] = round(
            (at_all_current.total - tree.window_start.total) / max(finished, 1), 4
        )
        result["cpu"]["orphans_reaped"] = orphans_reaped
        if server_before is not None and server_after is not None:  # the server's, not in the path's
            result["cpu"]["database_server_cpu_seconds"] = round(server_after - server_before, 2)
            result["cpu"]["database_server_cpu_seconds_per_posting"] = round(
                (server_after - server_before) / max(finished, 1), 4
            )
        result["cpu"]["run_worker_cpu_by_job"] = run_worker_cpu_by_job(
            result["cpu"].pop("run_workers"), all_runs, run_pids(app_url)
        )
        result["load_average"] = os.getloadavg()
        if idle is not None:
            result["idle"] = idle
        if args.retire:
            result["retire"] = retired
        if not args.no_floor:
            sample = rows[: args.floor_postings] if args.floor_postings else rows
            result["floor"] = plain_loop_floor(env, sample, app_url)
            result["floor"]["postings"] = len(sample)
            if result["cpu"]["path_cpu_seconds_per_posting"] and result["floor"]["cpu_seconds_per_posting"]:
                result["cpu"]["ratio_to_floor"] = round(
                    result["cpu"]["path_cpu_seconds_per_posting"]
                    / result["floor"]["cpu_seconds_per_posting"],
                    2,
                )
            if not result["all_current_seconds"]:
                result["cpu"].update(_partial_ratio(result))
        result["stages"] = stage_figures(result)
        return result


def stage_figures(result: dict[str, Any]) -> dict[str, Any]:
    """A posting's CPU by stage (the floor's tagger, linker, faithfulness check and the rest of its summary
    work; the orchestration: the path's CPU beyond the floor's), the model server's time a posting, and
    the cores that keep the server's slots busy (the path's CPU a posting x its postings a second)."""
    cpu, floor = result.get("cpu") or {}, result.get("floor") or {}
    path = cpu.get("path_cpu_seconds_per_posting")
    finished = max(result.get("postings_finished") or result["postings"], 1)
    figures: dict[str, Any] = {"path_cpu_seconds_per_posting": path}
    if floor:
        per_posting = {
            name: entry["cpu_seconds"] / max(floor["postings"], 1)
            for name, entry in floor["by_use_case"].items()
        }
        by_stage = floor.get("by_stage_per_posting") or {}
        figures.update(
            {
                TAGGER: round(per_posting.get("posting_skills", 0.0), 4),
                LINKER: round(per_posting.get("skill_entities", 0.0), 4),
                FAITHFULNESS: by_stage.get(FAITHFULNESS),
                "summary, the rest (prompts, LLM client, parsing)": round(
                    per_posting.get("posting_summary", 0.0) - (by_stage.get(FAITHFULNESS) or 0.0), 4
                ),
                "floor": floor.get("cpu_seconds_per_posting"),
            }
        )
        if path is not None and floor.get("cpu_seconds_per_posting") is not None:
            figures[ORCHESTRATION] = round(path - floor["cpu_seconds_per_posting"], 4)
    model_seconds, least = result.get("server_model_seconds"), result.get("backend_capacity_seconds")
    if model_seconds is not None:
        figures["model server: generation s a posting"] = round(model_seconds / finished, 4)
    if least:
        figures["slots"] = result["parallel"] * result["hosts"]
        figures.update(_cores("this server", least / finished, path, floor))
    if result.get("gpu_7b_least_seconds"):
        figures.update(
            _cores("a 7-8B model on one GPU", result["gpu_7b_least_seconds"] / finished, path, floor)
        )
    return figures


def _cores(
    server: str, least_per_posting: float, path: float | None, floor: dict[str, Any]
) -> dict[str, Any]:
    """A server's least wall time a posting at its slots, its postings a second, and the cores that keep
    it busy: the path's CPU a posting (and the floor's, the work alone) x those postings a second."""
    figures: dict[str, Any] = {
        f"{server}: least wall s a posting": round(least_per_posting, 4),
        f"{server}: postings a second": round(1 / least_per_posting, 2) if least_per_posting else None,
    }
    if path is not None:
        figures[f"{server}: cores to keep it busy"] = cores_to_keep_busy(path, least_per_posting)
    if floor.get("cpu_seconds_per_posting"):
        figures[f"{server}: cores to keep it busy, the work alone (floor)"] = cores_to_keep_busy(
            floor["cpu_seconds_per_posting"], least_per_posting
        )
    return figures


def idle_cost(tree: ProcessTreeCpu, seconds: float) -> dict[str, Any]:
    """The tree's CPU over `seconds` of doing nothing (what a `pipeline ui` left running costs), by
    kind of process; the window the workload's figures use starts afresh after it."""
    tree.start_window()
    time.sleep(seconds)  # a fixed span measured, not a wait for a condition
    tree.stop_window()
    figures = tree.figures()
    window = max(figures["window_seconds"], 1e-9)
    return {
        "seconds": figures["window_seconds"],
        "cpu_seconds": figures["total_cpu_seconds"],
        "cpu_seconds_by_kind": figures["cpu_seconds_by_kind"],
        "share_of_a_core": round(figures["total_cpu_seconds"] / window, 3),
        "processes_started_by_kind": figures["processes_started_by_kind"],
    }


def _partial_ratio(result: dict[str, Any]) -> dict[str, Any]:
    """For a run cut short: the path's CPU against the floor's CPU for the outputs actually made, use
    case by use case (summaries may run far ahead of skills, so outputs / 3 postings would undercount
    the floor of the slow use case's work and flatter the ratio)."""
    floor = result["floor"]
    done = result.get("outputs_by_use_case") or {}
    floor_for_done = sum(
        floor["by_use_case"].get(name, {}).get("cpu_seconds", 0.0) / max(floor["postings"], 1) * made
        for name, made in done.items()
    )
    path = result["cpu"]["total_cpu_seconds"]
    return {
        "floor_cpu_seconds_for_outputs_made": round(floor_for_done, 2),
        "ratio_to_floor": round(path / floor_for_done, 2) if floor_for_done else None,
    }


def _watch(
    args: argparse.Namespace, app_url: str, hosts: list[subprocess.Popen], ingested: float
) -> dict[str, Any]:
    """Poll the application database until every output is current (or the timeout)."""
    engine = create_engine(normalize_url(app_url))
    expected = args.postings * len(USE_CASES)
    first: dict[str, float] = {}
    killed_at = None
    deadline = ingested + args.timeout
    count, counts = 0, {}
    try:
        while time.time() < deadline:
            if (
                args.kill_host_after is not None
                and killed_at is None
                and time.time() - ingested >= args.kill_host_after
            ):
                victim = hosts[1] if len(hosts) > 1 else hosts[0]
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                killed_at = time.time() - ingested
            with engine.connect() as conn:
                counts = dict(
                    conn.execute(
                        select(UseCaseOutput.use_case, func.count()).group_by(UseCaseOutput.use_case)
                    ).all()
                )
            now = time.time()
            for name in USE_CASES:
                if counts.get(name) and name not in first:
                    first[name] = now - ingested
            count = sum(counts.get(name, 0) for name in USE_CASES)
            if count >= expected:
                break
            time.sleep(POLL_SECONDS)
    finally:
        engine.dispose()
    done = time.time() - ingested
    return {
        "all_current_seconds": round(done, 2) if count >= expected else None,
        "outputs": count,
        "outputs_by_use_case": {name: counts.get(name, 0) for name in USE_CASES} if count else {},
        "expected_outputs": expected,
        "first_output_seconds": round(min(first.values()), 2) if first else None,
        "first_output_by_use_case": {name: round(seconds, 2) for name, seconds in first.items()},
        "killed_host_at_seconds": round(killed_at, 2) if killed_at is not None else None,
    }


def _runs_summary(runs: list[dict[str, Any]], ingested: float, llm_runs_ids: set[str]) -> dict[str, Any]:
    """The runs after ingest by job and status, when they started and ended; `llm_runs_ids`: the runs
    that made an LLM call (a model's group is named after its model, so the name cannot tell)."""
    runs = [run for run in runs if run.get("startTime") is None or run["startTime"] >= ingested]
    by_job: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for run in runs:
        by_job[run["jobName"]] = by_job.get(run["jobName"], 0) + 1
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    starts = [run["startTime"] for run in runs if run.get("startTime")]
    llm_runs = [run for run in runs if run["runId"] in llm_runs_ids and run.get("startTime")]
    script_starts = [
        run["startTime"] for run in runs if "skill_entities" in run["jobName"] and run.get("startTime")
    ]
    llm_ends = [run["endTime"] for run in llm_runs if run.get("endTime")]
    return {
        "count": len(runs),
        "by_job": by_job,
        "by_status": statuses,
        "first_run_started_seconds": round(min(starts) - ingested, 2) if starts else None,
        "first_llm_run_started_seconds": (
            round(min(run["startTime"] for run in llm_runs) - ingested, 2) if llm_runs else None
        ),
        "by_host": _count(run["tags"].get("pipeline/llm_host", "-") for run in llm_runs),
        # every run's job, start and end in seconds after ingest: where the time went
        "timeline": sorted(
            [
                run["jobName"],
                round(run["startTime"] - ingested, 2),
                round(run["endTime"] - ingested, 2) if run.get("endTime") else None,
            ]
            for run in runs
            if run.get("startTime")
        ),
        # resolution alongside the LLM group: its first run starts before the last LLM run ends
        "script_run_started_before_llm_runs_ended": bool(script_starts and llm_ends)
        and min(script_starts) < max(llm_ends),
    }


def _count(values: Any) -> dict[str, int]:
    counted: dict[str, int] = {}
    for value in values:
        counted[value] = counted.get(value, 0) + 1
    return counted


def _server_figures(
    args: argparse.Namespace,
    timelines: list[list[list[float]]],
    stats: list[dict[str, Any]],
    ingested: float,
    result: dict[str, Any],
) -> dict[str, Any]:
    intervals = [(start, end) for timeline in timelines for start, end in timeline]
    calls = len(intervals)
    llm_calls = result["llm_calls_needed"]
    slots = args.parallel * args.hosts
    # the server's own time for the calls: known for a simulated server, or given by --latency-ms for
    # one's own (a client's latencies include the wait in the server's queue: runs keep more calls in
    # flight than it has slots, so their sum is no measure of its work)
    least = [s["least_seconds"] for s in stats if s.get("least_seconds") is not None]
    if least and not args.own_server:  # the simulated servers' own least time, each for its calls
        capacity_seconds: float | None = max(least)
    else:
        capacity_seconds = llm_calls * args.latency_ms / 1000 / slots if args.latency_ms else None
    busy = sum(end - start for start, end in intervals)
    figures: dict[str, Any] = {
        "generations": calls,
        "server_model_seconds": round(sum(s.get("model_seconds", 0.0) for s in stats), 2) if least else None,
        # what a 7-8B model on one GPU a host would need for the same calls, whatever this server's time
        "gpu_7b_least_seconds": round(
            max(least_seconds(s["token_counts"], GPU_7B, args.parallel) for s in stats), 2
        )
        if least and all("token_counts" in s for s in stats)
        else None,
        "server_tokens": {
            "prompt": sum(s.get("prompt_tokens", 0) for s in stats),
            "output": sum(s.get("output_tokens", 0) for s in stats),
        }
        if least
        else None,
        "peak_in_flight_per_host": [s.get("peak_concurrent_generations") for s in stats],
        "backend_capacity_seconds": round(capacity_seconds, 2) if capacity_seconds else None,
    }
    if args.own_server:  # as the runs saw it: the server's time and the wait in its queue
        figures["mean_call_latency_ms"] = round(1000 * busy / max(calls, 1), 1)
    if result.get("all_current_seconds") and capacity_seconds:
        figures["efficiency"] = round(capacity_seconds / result["all_current_seconds"], 3)
    if intervals and args.kill_host_after is None:
        first, last = min(s for s, _ in intervals), max(e for _, e in intervals)
        gaps = idle_gaps(intervals)
        if capacity_seconds and not args.own_server:
            figures["slot_busy_share"] = round(busy / ((last - first) * slots), 3)
        if capacity_seconds:
            figures["llm_efficiency_in_window"] = round(capacity_seconds / (last - first), 3)
        figures.update(
            first_generation_seconds=round(first - ingested, 2),
            llm_window_seconds=round(last - first, 2),
            max_gap_seconds=round(max(gaps, default=0.0), 2),
            gaps_over_1s=sum(1 for gap in gaps if gap > GAP_SECONDS),
            throughput_calls_per_second=round(calls / (last - first), 2),
        )
    return figures


def _integrity(app_url: str, postings: int) -> dict[str, Any]:
    """What the database says of the work: the LLM calls it needed, duplicates, attempts spent.

    A duplicate is a second stored answer for the same use case, posting and chain step (a chain
    records one interaction per step, so two per posting can be right). The LLM calls needed are
    the distinct (use case, posting, step) answered by the LLM, not by a script: the tagger's
    skills are no LLM work, however many use cases there are.
    """
    with _connected(app_url) as conn:
        answered = conn.execute(
            select(
                Interaction.use_case, Interaction.subject_key, Interaction.backend, Interaction.options
            ).where(Interaction.status == "ok")
        ).all()
        attempts = conn.execute(select(func.coalesce(func.sum(WorkItem.attempts), 0))).scalar_one()
        failed_calls = conn.execute(
            select(func.count()).select_from(Interaction).where(Interaction.status != "ok")
        ).scalar_one()
    seen: dict[tuple[Any, ...], int] = {}
    llm_use_cases: set[str] = set()
    for use_case, subject_key, backend, options in answered:
        chain = (options or {}).get("chain") or {}
        key = (use_case, subject_key, chain.get("step"), chain.get("visit"))
        seen[key] = seen.get(key, 0) + 1
        if backend != SCRIPT_BACKEND:
            llm_use_cases.add(use_case)
    llm_keys = {key for key in seen if key[0] in llm_use_cases}
    return {
        "duplicate_outputs": sum(1 for count in seen.values() if count > 1),
        "attempts_spent": int(attempts),
        "failed_interactions": failed_calls,
        "llm_use_cases": sorted(llm_use_cases),
        "llm_calls_needed": len(llm_keys),
    }


def llm_call_timeline(app_url: str) -> list[tuple[float, float]]:
    """Every answered LLM call's start and end (seconds since the epoch), as the pipeline recorded it:
    the timeline of a server the benchmark did not start (`--own-server`). A call is recorded as its
    answer comes (`finished_at`) with its own latency; `started_at` is when the row was stored. An
    answer the use case refused (an item error: a check blocked it) was the server's work all the same."""
    with _connected(app_url) as conn:
        calls = conn.execute(
            select(Interaction.finished_at, Interaction.latency_ms).where(
                Interaction.backend != SCRIPT_BACKEND,
                Interaction.status.in_(("ok", "item_error")),
                Interaction.finished_at.is_not(None),
                Interaction.latency_ms.is_not(None),
            )
        ).all()
    return sorted((_epoch(end) - latency / 1000, _epoch(end)) for end, latency in calls)


def _epoch(moment: datetime) -> float:
    """A stored timestamp (UTC, naive) in seconds since the epoch, as `time.time()` counts."""
    return moment.replace(tzinfo=UTC).timestamp() if moment.tzinfo is None else moment.timestamp()


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most calls in flight at once."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    peak = current = 0
    for _, change in edges:  # at a tie an end (-1) sorts first: back to back is not overlapping
        current += change
        peak = max(peak, current)
    return peak


def llm_run_ids(app_url: str) -> set[str]:
    """The runs that made an LLM call (a script's answers name the script as their backend)."""
    with _connected(app_url) as conn:
        return set(
            conn.execute(
                select(Interaction.run_id)
                .where(Interaction.backend != SCRIPT_BACKEND, Interaction.run_id.is_not(None))
                .distinct()
            ).scalars()
        )


def _children_cpu_seconds() -> float:
    """CPU (user + system) of every child process this one has reaped, and of theirs (the kernel's)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_pids(app_url: str) -> dict[str, int]:
    """Each run's process id, as its heartbeat recorded it (runs that claim work or hold the pool)."""
    with _connected(app_url) as conn:
        return dict(conn.execute(text("SELECT run_id, pid FROM run_heartbeats")).all())


@contextmanager
def _connected(url: str) -> Iterator[Connection]:
    """A connection to a database of the run, on an engine of its own that is disposed after."""
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def run_worker_cpu_by_job(
    workers: list[list[float]], runs: list[dict[str, Any]], pids: dict[str, int] | None = None
) -> dict[str, dict[str, Any]]:
    """Each run worker process's CPU under its run's job. A run that recorded its process id (its
    heartbeat row, `pids`: run id -> pid) takes that process. A process's command line does not name
    its run, so any other run (in order of start) takes the latest unclaimed process started before it:
    Dagster stamps a run's start once its process has loaded the code location. (Runs starting seconds
    apart load at different speeds, so by start alone the summaries' runs took the tagger's CPU.)"""
    unclaimed = sorted(workers)  # [epoch start, CPU seconds, pid]
    by_pid = {int(worker[2]): worker for worker in unclaimed if len(worker) > 2}
    pids = pids or {}
    started = sorted((r for r in runs if r.get("startTime")), key=lambda r: r["startTime"])
    matched: list[tuple[dict[str, Any], list[float]]] = []
    for run in started:
        worker = by_pid.get(pids.get(run.get("runId", ""), -1))
        if worker is not None and worker in unclaimed:
            unclaimed.remove(worker)
            matched.append((run, worker))
    by_job: dict[str, dict[str, Any]] = {}
    for run, worker in matched:
        entry = by_job.setdefault(run["jobName"], {"runs": 0, "cpu_seconds": 0.0})
        entry["runs"] += 1
        entry["cpu_seconds"] = round(entry["cpu_seconds"] + worker[1], 2)
    taken = {id(run) for run, _ in matched}
    for run in (r for r in started if id(r) not in taken):
        earlier = [worker for worker in unclaimed if worker[0] <= run["startTime"]]
        if not earlier:
            continue
        worker = earlier[-1]
        unclaimed.remove(worker)
        entry = by_job.setdefault(run["jobName"], {"runs": 0, "cpu_seconds": 0.0})
        entry["runs"] += 1
        entry["cpu_seconds"] = round(entry["cpu_seconds"] + worker[1], 2)
    if unclaimed:
        by_job["(no run matched)"] = {
            "runs": len(unclaimed),
            "cpu_seconds": round(sum(worker[1] for worker in unclaimed), 2),
        }
    return by_job


def _cpu_figures(
    tree: ProcessTreeCpu, ui_lifetime_cpu: float, ingest_cpu: float, postings: int
) -> dict[str, Any]:
    """The path's CPU from ingest to every output current (and the tables remade): the whole tree, by kind,
    per run started."""
    figures = tree.figures()
    total = figures["total_cpu_seconds"]
    runs_started = len(figures["run_workers"])
    run_cpu = figures["cpu_seconds_by_kind"].get("run worker", 0.0)
    return {
        **figures,
        "path_cpu_seconds_per_posting": round(total / postings, 4) if postings else None,
        "cpu_seconds_per_posting_by_kind": {
            kind: round(value / postings, 4) for kind, value in figures["cpu_seconds_by_kind"].items()
        },
        "run_worker_processes_started": figures["processes_started_by_kind"].get("run worker", 0),
        "runs_started": runs_started,  # run worker processes started by the code server (not steps)
        "cpu_seconds_per_run_worker": round(run_cpu / runs_started, 2) if runs_started else None,
        "ingest_cpu_seconds": round(ingest_cpu, 2),
        "ui_lifetime_cpu_seconds_kernel": round(ui_lifetime_cpu, 2),
    }


def _output_latencies(app_url: str, ingested: float) -> dict[str, Any]:
    """When each use case's first and last outputs were stored (seconds after ingest), and how far each
    use case trails its upstream: per posting, its output's time minus its upstream output's."""
    with _connected(app_url) as conn:
        stored = conn.execute(
            select(UseCaseOutput.use_case, UseCaseOutput.subject_key, UseCaseOutput.created_at)
        ).all()
    at: dict[str, dict[str, float]] = {}
    for use_case, key, created in stored:
        at.setdefault(use_case, {})[key] = _epoch(created) - ingested
    spans = {
        name: {"first_s": round(min(times.values()), 2), "last_s": round(max(times.values()), 2)}
        for name, times in at.items()
        if name in USE_CASES and times
    }
    trailing: dict[str, dict[str, float]] = {}
    for name, upstream in UPSTREAM.items():
        lags = sorted(
            at[name][key] - at[upstream][key] for key in at.get(name, {}) if key in at.get(upstream, {})
        )
        if lags:
            trailing[name] = {
                "upstream": upstream,
                "first_behind_first_s": round(spans[name]["first_s"] - spans[upstream]["first_s"], 2),
                "last_behind_last_s": round(spans[name]["last_s"] - spans[upstream]["last_s"], 2),
                "per_posting_median_s": round(lags[len(lags) // 2], 2),
                "per_posting_max_s": round(lags[-1], 2),
                "per_posting_by_upstream_time": _lags_over_time(at[name], at[upstream]),
            }
    return {"output_span_by_use_case": spans, "trailing_upstream": trailing}


def _lags_over_time(
    made: dict[str, float], upstream: dict[str, float], bucket_seconds: float = 10.0
) -> list[dict[str, float]]:
    """How far outputs trailed their upstream's, by when the upstream output was stored (buckets of
    `bucket_seconds` after ingest): where in the run a lag builds up (a burst, a run start, the end)."""
    buckets: dict[int, list[float]] = {}
    for key, at in made.items():
        if key in upstream:
            buckets.setdefault(int(upstream[key] // bucket_seconds), []).append(at - upstream[key])
    rows = []
    for bucket, lags in sorted(buckets.items()):
        lags.sort()
        rows.append(
            {
                "upstream_from_s": bucket * bucket_seconds,
                "postings": len(lags),
                "median_s": round(lags[len(lags) // 2], 2),
                "max_s": round(lags[-1], 2),
            }
        )
    return rows


# --- the floor: the same work in one plain loop ----------------------------------------------------


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """This process's environment as `pipeline ui`'s for a while (some resources read variables)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _cpu_seconds() -> float:
    """CPU (user + system) of this process, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _in_dependency_order(use_cases: list[Any]) -> list[Any]:
    """Upstream use cases first (each loop needs its upstream's outputs)."""
    ordered: list[Any] = []
    names = {use_case.name for use_case in use_cases}
    pending = list(use_cases)
    while pending:
        done = {use_case.name for use_case in ordered}
        ready = [u for u in pending if all(up in done or up not in names for up in u.upstream)]
        if not ready:
            raise RuntimeError(f"use cases with a cycle: {[u.name for u in pending]}")
        ordered += ready
        pending = [u for u in pending if u not in ready]
    return ordered


@dataclass
class _FloorWork:
    """What the plain loop calls with: the resources a run gets, the app database (the taxonomy) and
    each posting's values (its fields, then each use case's output as the loop makes it)."""

    llm: Any
    resources: Any
    app_db: Any
    references: dict[str, str]
    values: dict[str, dict[str, Any]]

    def step_context(self) -> Any:
        from domain.language.steps import StepContext

        return StepContext(resources=self.resources, app_db=self.app_db, log=LOG, references=self.references)


def plain_loop_floor(env: dict[str, str], rows: list[dict[str, str]], app_url: str) -> dict[str, Any]:
    """The work itself, with none of the orchestration: each use case over every posting in one loop
    in this process, by the code the runs call (prompts rendered and sent through the same LLM resource
    with as many requests in flight as a run keeps, answers parsed and checked; the tagger's and the
    resolver's functions per posting), nothing stored. Models and the taxonomy's resolver are loaded
    once, before the clock (`load_cpu_seconds`). CPU seconds of this process per use case."""
    from domain.core.plugins import PluginContext
    from pipeline_defs.catalog import declared_plugins, declared_use_cases, plugin_settings
    from pipeline_defs.settings import Settings
    from pipeline_defs.wiring import build_llm_resource, configured
    from plugins.postings.store.taxonomy import REFERENCE_NAME, loaded_taxonomy_hash
    from resources.app_database import AppDatabase

    stages = StageCpu()
    with _environment(env), stages.faithfulness_timed():
        settings = Settings.from_env()
        declared = timed_use_cases(declared_use_cases(settings), stages)
        use_cases = _in_dependency_order([u for u in declared if u.name in USE_CASES])
        llm = build_llm_resource(settings)
        named: dict[str, Any] = {"llm": llm}
        for plugin in declared_plugins(settings):
            if plugin.definitions is not None:
                context = PluginContext(
                    settings=plugin_settings(settings, plugin),
                    core=settings,
                    use_cases=(),
                    configured=lambda name: configured(settings, name, env_vars=False),
                )
                named.update(plugin.definitions(context).resources or {})
        work = _FloorWork(
            llm,
            SimpleNamespace(**named),
            AppDatabase(url=app_url),
            {},
            {row["key"]: _template_values(row) for row in rows},
        )
        load_started = _cpu_seconds()
        if "taxonomy" in named:
            with work.app_db.session() as session:
                named["taxonomy"].resolver(session)  # built once, as a run builds it once
                work.references[REFERENCE_NAME] = loaded_taxonomy_hash(session)
        for use_case in use_cases:
            for model in use_case.steps.models if use_case.steps is not None else (use_case.model,):
                if model:
                    llm.ensure_loaded(model)
            first = use_case.steps.step(use_case.steps.start) if use_case.steps is not None else None
            if first is not None and first.is_script:  # the tagger loads its model on first use
                with suppress(Exception):
                    first.function(dict(rows[0]), work.step_context())
        load_cpu = _cpu_seconds() - load_started
        stages.seconds = dict.fromkeys(stages.seconds, 0.0)  # the loads' calls are not the work
        figures: dict[str, dict[str, Any]] = {}
        for use_case in use_cases:
            cpu_started, started = _cpu_seconds(), time.perf_counter()
            if use_case.steps is not None:
                failed = _floor_chain(work, use_case)
            elif use_case.model:
                failed = _floor_llm_calls(work, use_case)
            else:
                failed = _floor_script(work, use_case)
            figures[use_case.name] = {
                "cpu_seconds": round(_cpu_seconds() - cpu_started, 2),
                "seconds": round(time.perf_counter() - started, 2),
                "failed": failed,
            }
    total = sum(entry["cpu_seconds"] for entry in figures.values())
    return {
        "cpu_seconds": round(total, 2),
        "cpu_seconds_per_posting": round(total / len(rows), 4),
        "load_cpu_seconds": round(load_cpu, 2),
        "by_use_case": figures,
        "by_stage_per_posting": stages.per_posting(len(rows)),
    }


def _template_values(row: dict[str, Any]) -> dict[str, Any]:
    """A posting's fields as a run reads them (`appdb.inputs.load_inputs`): a field missing or empty
    is "not stated" (a user's postings and SkillSpan's name no company)."""
    from appdb.inputs import NOT_STATED
    from plugins.postings.store.ingest import POSTING_FIELDS

    values = {name: row.get(name) for name in POSTING_FIELDS}
    return {**row, **{name: NOT_STATED if value in (None, "") else value for name, value in values.items()}}


def _floor_script(work: _FloorWork, use_case: Any) -> int:
    """A script use case per posting (the resolver); its output checked as a run checks it."""
    from domain.language.declaration_parts import ScriptContext
    from domain.language.output_parsing import final_output

    context = ScriptContext(resources=work.resources, app_db=work.app_db, log=LOG, references=work.references)
    failed = 0
    for inputs in work.values.values():
        try:
            output = json.loads(json.dumps(use_case.function(inputs, context)))
            inputs[use_case.name] = final_output(use_case, output, inputs)
        except Exception:  # noqa: BLE001 - an item error, counted as a run counts it
            failed += 1
    return failed


def _floor_llm_calls(work: _FloorWork, use_case: Any) -> int:
    """One LLM call per posting, as many in flight as a run keeps; each answer parsed and checked."""
    from assets.llm_calls import LLMRequest, generate_in_order
    from domain.language.output_parsing import parse_output

    style = work.llm.resolve_style(use_case.model, use_case.prompt_style)
    requests = []
    for key, inputs in work.values.items():
        call = use_case.prepare(inputs, work.references, style)
        request = LLMRequest(
            use_case.model,
            call.prompt,
            call.system_prompt,
            use_case.grammar_schema,
            dict(use_case.options),
            call.messages,
        )
        requests.append((key, request))
    failed = 0
    for key, result in generate_in_order(work.llm, requests):
        try:
            work.values[key][use_case.name] = parse_output(use_case, result.text, work.values[key])
        except Exception:  # noqa: BLE001 - a failed call or a bad answer: an item error
            failed += 1
    return failed


def _floor_chain(work: _FloorWork, use_case: Any) -> int:
    """A chain, step by step for every posting at that step (as the chain runner takes it)."""
    from domain.language.output_parsing import final_output
    from domain.language.steps import END

    chain, failed = use_case.steps, 0
    at = {key: chain.start for key in work.values}
    state: dict[str, dict[str, Any]] = {key: {} for key in work.values}
    visits: dict[str, dict[str, int]] = {key: {} for key in work.values}
    while at:
        step = next(s for s in chain.steps if s.name in at.values())
        batch = [key for key, name in at.items() if name == step.name]
        answers = (
            _floor_script_step(work, step, batch, state)
            if step.is_script
            else _floor_llm_step(work, use_case, step, batch, state)
        )
        for key, value, raw in answers:
            if value is None:
                failed += 1
                del at[key]
                continue
            state[key][step.output_name] = value
            visits[key][step.name] = visits[key].get(step.name, 0) + 1
            decision = chain.decide(step, state[key], raw, visits[key], sum(visits[key].values()))
            if decision.to != END:
                at[key] = decision.to
                continue
            del at[key]
            try:
                work.values[key][use_case.name] = final_output(use_case, value, work.values[key])
            except Exception:  # noqa: BLE001 - an item error
                failed += 1
    return failed


def _floor_script_step(
    work: _FloorWork, step: Any, batch: list[str], state: dict[str, dict[str, Any]]
) -> list[tuple[str, Any, str]]:
    answers: list[tuple[str, Any, str]] = []
    for key in batch:
        try:
            value = step.function({**work.values[key], **state[key]}, work.step_context())
            answers.append((key, value, value if isinstance(value, str) else json.dumps(value)))
        except Exception:  # noqa: BLE001 - an item error
            answers.append((key, None, ""))
    return answers


def _floor_llm_step(
    work: _FloorWork, use_case: Any, step: Any, batch: list[str], state: dict[str, dict[str, Any]]
) -> list[tuple[str, Any, str]]:
    from assets.llm_calls import LLMRequest, generate_in_order
    from domain.language.chat_prompts import CHAT_STYLE, messages_text
    from domain.language.output_parsing import parse_output

    chat = step.chat is not None and work.llm.resolve_style(step.model, use_case.prompt_style) == CHAT_STYLE
    requests = []
    for key in batch:
        inputs = {**work.values[key], **state[key]}
        messages = None
        if chat:
            messages, _ = step.render_chat(inputs)
            prompt, system_prompt = messages_text(messages), ""
        else:
            prompt, system_prompt, _ = step.render(inputs)
        requests.append(
            (key, LLMRequest(step.model, prompt, system_prompt, step.output_schema, step.options, messages))
        )
    answers: list[tuple[str, Any, str]] = []
    for key, result in generate_in_order(work.llm, requests):
        try:
            raw = result.text
            inputs = {**work.values[key], **state[key]}
            value = parse_output(step, raw, inputs) if step.output_schema is not None else raw.strip()
            answers.append((key, value, raw))
        except Exception:  # noqa: BLE001 - a failed call or a bad answer: an item error
            answers.append((key, None, ""))
    return answers


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Daemon-path throughput (`pipeline ui`; a simulated server, or your own with `--own-server`)",
        "",
        "| label | storage | postings | hosts x slots x ms | LLM calls | all current s | tables made s "
        "| first output s "
        "| first LLM output s | first run s | first LLM run s | runs | efficiency | LLM window eff. "
        "| slot busy | max gap s | gaps > 1 s | calls/s | dup. | attempts | load avg "
        "| path CPU s/posting | floor CPU s/posting | ratio to floor | runs started (CPU s each) "
        "| entities behind skills: first / last / per posting median / max s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        runs = row.get("runs", {})
        cells = [
            row["label"],
            row["storage"],
            row["postings"],
            f"{row['hosts']} x {row['parallel']} x {_call_time(row)}"
            + (
                f" (own server; a call {row.get('mean_call_latency_ms')} ms)"
                if row.get("server") == "own"
                else ""
            ),
            row.get("llm_calls_needed"),
            row.get("all_current_seconds"),
            row.get("tables_made_seconds"),
            row.get("first_output_seconds"),
            row.get("first_llm_output_seconds"),
            runs.get("first_run_started_seconds"),
            runs.get("first_llm_run_started_seconds"),
            runs.get("count"),
            row.get("efficiency"),
            row.get("llm_efficiency_in_window"),
            row.get("slot_busy_share"),
            row.get("max_gap_seconds"),
            row.get("gaps_over_1s"),
            row.get("throughput_calls_per_second"),
            row.get("duplicate_outputs"),
            row.get("attempts_spent"),
            " ".join(f"{x:.1f}" for x in row["load_average"]),
            *_cpu_cells(row),
        ]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return (
        "\n".join(lines)
        + "\n"
        + _stage_table(rows)
        + _by_kind_table(rows)
        + _footprint_table(rows)
        + _idle_table(rows)
    )


def _stage_table(rows: list[dict[str, Any]]) -> str:
    """A posting's CPU by stage, the model server's time a posting, and the cores that keep it busy."""
    measured = [row for row in rows if row.get("stages")]
    if not measured:
        return ""
    names = list(dict.fromkeys(name for row in measured for name in row["stages"]))
    header = ["label", "storage", "postings (texts)", "server", *names]
    body = []
    for row in measured:
        texts = row.get("posting_texts") or {}
        rates = row.get("token_rates") or {}
        server = (
            f"{row['hosts']} x {row['parallel']} slots, {rates.get('prefill_tokens_per_second', 0):g} / "
            f"{rates.get('decode_tokens_per_second', 0):g} tokens/s, +{row.get('latency_ms') or 0:g} ms"
            if rates
            else "own"
        )
        body.append(
            [
                row["label"],
                row["storage"],
                f"{row['postings']} ({texts.get('source', '?')}, {texts.get('mean_words', '?')} words)",
                server,
                *(row["stages"].get(name, "") for name in names),
            ]
        )
    title = (
        "## CPU seconds a posting by stage; the model server's time; the cores that keep its slots busy\n\n"
        "Tagger, linker, faithfulness check and the rest of the summary work: the floor (in process); "
        "orchestration: the path's CPU a posting less the floor's; cores: the path's CPU a posting x the "
        "server's postings a second at its slots (its least wall time a posting)."
    )
    return _section_table(title, header, body)


def _call_time(row: dict[str, Any]) -> str:
    """A call's time at the server: its fixed latency, a 7-8B model's tokens, or unknown (own server)."""
    rates = row.get("token_rates") or {}
    tokens = (
        "tokens" if rates.get("prefill_tokens_per_second") or rates.get("decode_tokens_per_second") else ""
    )
    fixed = f"{row['latency_ms']:g} ms" if row.get("latency_ms") else ""
    return " + ".join(part for part in (fixed, tokens) if part) or "?"


def _cpu_cells(row: dict[str, Any]) -> list[Any]:
    cpu, floor = row.get("cpu") or {}, row.get("floor") or {}
    lag = (row.get("trailing_upstream") or {}).get("skill_entities")
    return [
        cpu.get("path_cpu_seconds_per_posting"),
        floor.get("cpu_seconds_per_posting"),
        cpu.get("ratio_to_floor"),
        f"{cpu.get('runs_started', cpu.get('run_worker_processes_started'))} "
        f"({cpu.get('cpu_seconds_per_run_worker')})"
        if cpu
        else None,
        " / ".join(
            str(lag[name])
            for name in (
                "first_behind_first_s",
                "last_behind_last_s",
                "per_posting_median_s",
                "per_posting_max_s",
            )
        )
        if lag
        else None,
    ]


def _section_table(title: str, header: list[str], body: list[list[Any]]) -> str:
    """A titled Markdown table after the main one: a header cell per column, a row of cells each."""
    lines = ["", title, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def _by_kind_table(rows: list[dict[str, Any]]) -> str:
    """CPU seconds per posting of each kind of process, and the floor's per use case."""
    measured = [row for row in rows if row.get("cpu")]
    if not measured:
        return ""
    kinds = sorted({kind for row in measured for kind in row["cpu"]["cpu_seconds_per_posting_by_kind"]})
    use_cases = sorted({name for row in measured for name in (row.get("floor") or {}).get("by_use_case", {})})
    header = [
        "label",
        "storage",
        "postings",
        "whole path",
        *kinds,
        "between samples",
        "PostgreSQL server (not in the path)",
        *(f"floor: {name}" for name in use_cases),
        "floor",
        "ratio",
        "ingest CPU s",
        "`pipeline ui` lifetime CPU s (kernel)",
    ]
    body = []
    for row in measured:
        cpu, floor, postings = row["cpu"], row.get("floor") or {}, row["postings"]
        body.append(
            [
                row["label"],
                row["storage"],
                postings,
                cpu["path_cpu_seconds_per_posting"],
                *(cpu["cpu_seconds_per_posting_by_kind"].get(kind, 0.0) for kind in kinds),
                round(cpu["between_samples_cpu_seconds"] / postings, 4),
                cpu.get("database_server_cpu_seconds_per_posting"),
                *(
                    round(
                        floor.get("by_use_case", {}).get(name, {}).get("cpu_seconds", 0.0)
                        / floor.get("postings", postings),
                        4,
                    )
                    for name in use_cases
                ),
                floor.get("cpu_seconds_per_posting"),
                cpu.get("ratio_to_floor"),
                cpu["ingest_cpu_seconds"],
                cpu["ui_lifetime_cpu_seconds_kernel"],
            ]
        )
    title = "## CPU seconds per posting, from ingest to every output current and the tables remade after it"
    return _section_table(title, header, body)


def _idle_table(rows: list[dict[str, Any]]) -> str:
    """`--idle-seconds`: what each kind of process spent with nothing to do, in CPU seconds a minute."""
    measured = [row for row in rows if row.get("idle")]
    if not measured:
        return ""
    kinds = sorted({kind for row in measured for kind in row["idle"]["cpu_seconds_by_kind"]})
    body = []
    for row in measured:
        idle = row["idle"]
        per_minute = 60 / max(idle["seconds"], 1e-9)
        by_kind = [round(idle["cpu_seconds_by_kind"].get(kind, 0.0) * per_minute, 2) for kind in kinds]
        whole = round(idle["cpu_seconds"] * per_minute, 2)
        body.append([row["label"], row["storage"], idle["seconds"], *by_kind, whole, idle["share_of_a_core"]])
    header = ["label", "storage", "idle s", *kinds, "whole tree", "share of a core"]
    return _section_table("Idle, before the ingest (CPU seconds a minute):", header, body)


def _footprint_table(rows: list[dict[str, Any]]) -> str:
    """Peak memory of the largest process of each kind, storage growth, and the asset page's query."""
    measured = [row for row in rows if (row.get("cpu") or {}).get("peak_rss_mb_by_kind")]
    if not measured:
        return ""
    kinds = sorted({kind for row in measured for kind in row["cpu"]["peak_rss_mb_by_kind"]})
    header = [
        "label",
        "storage",
        "postings",
        *(f"peak MB: {kind}" for kind in kinds),
        "Dagster storage growth MB",
        "app DB growth MB",
        "asset page: partitions / s / KB",
        "`pipeline retire`: s / CPU s / Dagster MB before, after",
    ]
    body = []
    for row in measured:
        growth, page = row.get("storage_growth_mb") or {}, row.get("asset_page") or {}
        body.append(
            [
                row["label"],
                row["storage"],
                row["postings"],
                *(row["cpu"]["peak_rss_mb_by_kind"].get(kind, "") for kind in kinds),
                growth.get("dagster"),
                growth.get("app_db"),
                page.get("error")
                or f"{page.get('partitions')} / {page.get('median_seconds')} / {page.get('answer_kb')}",
                _retire_cell(row.get("retire")),
            ]
        )
    return _section_table("## Memory, storage and the asset page", header, body)


def _retire_cell(retire: dict[str, Any] | None) -> str:
    if not retire:
        return ""
    before, after = retire["dagster_storage_mb_before_after"]
    return f"{retire['seconds']} / {retire['cpu_seconds']} / {before}, {after}"


def token_rates(args: argparse.Namespace, tiny: bool) -> TokenRates:
    """The simulated server's token rates: a 7-8B model on one GPU with real postings, none with tiny
    ones (a fixed latency), each overridden by its option."""
    base = NO_TOKENS if tiny else GPU_7B
    given = {
        "prefill_tokens_per_second": args.prefill_tokens_per_second,
        "decode_tokens_per_second": args.decode_tokens_per_second,
        "min_output_tokens": args.min_output_tokens,
    }
    return dataclasses.replace(base, **{name: value for name, value in given.items() if value is not None})


def options(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line read and checked: with the postings (`rows`) and the server's token rates."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=1000)
    add_posting_options(parser)
    parser.add_argument("--data-dir", help="the shared data folder (else the PIPELINE_SHARED_DATA setting)")
    parser.add_argument(
        "--latency-ms",
        type=float,
        default=None,
        help="a call's fixed time at the simulated server (default 100 with tiny postings, else 0, beside "
        "the tokens' time); with --own-server, your server's own time a call if you know it (for the "
        "efficiency), else none is computed",
    )
    parser.add_argument(
        "--prefill-tokens-per-second",
        type=float,
        default=None,
        help=f"the simulated server's prompt tokens a second, one prompt at a time (default "
        f"{GPU_7B.prefill_tokens_per_second:g} with real postings, 0 with tiny ones)",
    )
    parser.add_argument(
        "--decode-tokens-per-second",
        type=float,
        default=None,
        help=f"the simulated server's answer tokens a second in each slot (default "
        f"{GPU_7B.decode_tokens_per_second:g} with real postings, 0 with tiny ones)",
    )
    parser.add_argument(
        "--min-output-tokens",
        type=int,
        default=None,
        help=f"an answer is decoded as at least this many tokens (default {GPU_7B.min_output_tokens} with "
        "real postings)",
    )
    parser.add_argument("--parallel", type=int, default=4, help="slots per simulated host")
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--dagster-storage", default="sqlite,postgres")
    parser.add_argument("--kill-host-after", type=float, default=None)
    parser.add_argument(
        "--own-server",
        action="store_true",
        help="the model server this shell's OLLAMA_*/PIPELINE_* variables configure, not a simulated "
        "one; --hosts and --parallel say how many hosts and slots it has",
    )
    parser.add_argument("--project-root", type=Path, default=PROJECT_ROOT)
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for `pipeline ui` (repeatable)"
    )
    parser.add_argument("--postgres-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--name", default="daemon_throughput", help="report name in results/")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--keep-log", type=Path, default=None, help="copy each dagster dev log here")
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the plain loop of the same work (the CPU floor)"
    )
    parser.add_argument(
        "--no-tables",
        action="store_true",
        help="end the CPU window when every output is current, not when the enriched postings tables "
        "have been remade after the last one",
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=0,
        help="first measure N seconds of the tree's CPU with nothing to do (sensors on an empty database)",
    )
    parser.add_argument(
        "--retire", action="store_true", help="then `pipeline retire` every finished posting, timed"
    )
    parser.add_argument(
        "--floor-postings",
        type=int,
        default=None,
        help="measure the floor on the first N postings only (its figure is per posting)",
    )
    args = parser.parse_args(argv)
    if args.own_server and args.kill_host_after is not None:
        parser.error("--kill-host-after kills a simulated host: not with --own-server")
    tiny = args.fixed_latency or (args.posting_set == TINY and args.postings_file is None)
    if args.latency_ms is None and not args.own_server:
        args.latency_ms = 100.0 if tiny else 0.0
    args.rates = token_rates(args, tiny)
    try:
        args.rows = benchmark_postings(args.postings, args.posting_set, args.postings_file, args.data_dir)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    args.posting_texts = describe(args.rows, args.posting_set, args.postings_file)
    args.project_root = args.project_root.resolve()
    return args


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
    _byte_compile(args.project_root)
    rows = []
    previous = args.out or PROJECT_ROOT / "results"
    existing = previous / f"{args.name}.json"
    if existing.exists():  # several invocations (before, after, hosts) add to one table
        rows = json.loads(existing.read_text())["results"]["rows"]
    for storage in [s.strip() for s in args.dagster_storage.split(",") if s.strip()]:
        server = "own server" if args.own_server else f"{args.hosts} simulated host(s)"
        print(f"{args.label}: {storage}, {args.postings} postings, {server} ...", flush=True)
        row = {"label": args.label, **measure(args, storage)}
        print(json.dumps(row, indent=1), flush=True)
        rows.append(row)
        write_report(args.name, {"rows": rows}, markdown(rows), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
