"""The production path, timed: N postings ingested into an idle `pipeline ui`, until every output is current.

    python -m benchmarks.daemon_throughput [--postings 1000] [--latency-ms 100] [--parallel 4]
        [--hosts 1] [--dagster-storage sqlite,postgres] [--kill-host-after SECONDS]
        [--project-root DIR] [--label NAME]

What users run: `pipeline ui` (dagster dev: the daemon's sensors, its run queue, runs launched as
subprocesses) against `benchmarks.simulated_ollama` servers (one process each, `--latency-ms` per
generation, `--parallel` slots), judge off. Once the code location is up and the sensors have ticked on
an empty database, N postings are ingested with `pipeline ingest`; the clock starts when it returns.
Measured: the first output, every output of the three use cases current (summary and skills: LLM;
skill_entities: a script), the runs, and at the servers the idle gaps between generations and the
busy share of their slots. Efficiency = the backend's own time for the calls (calls x latency /
(slots x hosts)) / the time from ingest to every output current.

`--project-root` runs another checkout (e.g. a `git worktree` of an older commit) with this
benchmark and this simulated server, so before and after are measured by the same command.
`--kill-host-after S` kills the second host's server S seconds after ingest: its postings must be
finished by the others, with no duplicate outputs and no attempts spent.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select, text

from appdb.database import normalize_url
from appdb.models import Interaction, UseCaseOutput, WorkItem
from benchmarks.report import write_report
from domain.language.declaration import SCRIPT_BACKEND
from pipeline_defs.settings import PROJECT_ROOT

USE_CASES = ("posting_summary", "posting_skills", "skill_entities")
PROJECT_PACKAGES = ("appdb", "assets", "domain", "pipeline_defs", "resources", "sensors")
STARTUP_TIMEOUT_SECONDS = 300
IDLE_SECONDS = 12  # after the location is up: the sensors' first ticks find an empty database
POLL_SECONDS = 0.25
GAP_SECONDS = 1.0
FINISHED = ("SUCCESS", "FAILURE", "CANCELED")
TOOLS = ["Python and SQL", "Excel", "Docker", "Java", "dbt and Python", "Kubernetes"]
LOCATION_QUERY = """
{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { __typename } } } } }
"""
RUNS_QUERY = """
{ runsOrError(limit: 1000) { ... on Runs { results { runId jobName status startTime endTime
  tags { key value } } } } }
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
def simulated_hosts(count: int, latency_ms: float, parallel: int) -> Iterator[list[subprocess.Popen]]:
    """`count` simulated Ollama servers, each its own process (so one can be killed like a dead host)."""
    processes = []
    try:
        for _ in range(count):
            port = _free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.simulated_ollama", "--port", str(port)]
                + ["--latency-ms", str(latency_ms), "--parallel", str(parallel)],
                cwd=PROJECT_ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            process.url = process.stdout.readline().strip()  # type: ignore[attr-defined]
            processes.append(process)
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)


@contextmanager
def postgres_databases(admin_url: str, count: int) -> Iterator[list[str]]:
    """Fresh PostgreSQL databases, dropped afterwards."""
    admin_url = normalize_url(admin_url)  # psycopg2: with SQLAlchemy 2.1 a bare postgresql:// picks psycopg 3
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    names = [f"bench_daemon_{uuid.uuid4().hex[:8]}" for _ in range(count)]
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


def _postings(count: int) -> list[dict[str, str]]:
    return [
        {
            "key": f"bench-{index:05d}",
            "title": f"Data Analyst {index}",
            "company": "Brightwave Energy",
            "location": "Berlin",
            "description": f"Analyse turbine data with {TOOLS[index % len(TOOLS)]}; report weekly.",
        }
        for index in range(count)
    ]


class Ui:
    """`pipeline ui` in a process group of its own, from `project_root`, with the given environment."""

    def __init__(self, project_root: Path, env: dict[str, str], log_path: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pipeline_defs.cli.main", "ui", "--port", str(self.port)],
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


def _byte_compile(project_root: Path) -> None:
    """Compile the checkout's modules once, as a normal install leaves them: every run is a new process,
    and where PYTHONDONTWRITEBYTECODE is set (this machine; many container images) each would compile
    the project anew (0.25-0.3 s of a run's start)."""
    packages = [str(project_root / name) for name in PROJECT_PACKAGES if (project_root / name).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True, capture_output=True)


def _pipeline(project_root: Path, env: dict[str, str], *command: str) -> None:
    """One `pipeline` command of the checkout under test; its output in the error if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "pipeline_defs.cli.main", *command],
        cwd=project_root,
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise RuntimeError(f"`pipeline {' '.join(command)}` failed:\n{done.stdout}\n{done.stderr}")


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
        hosts = stack.enter_context(simulated_hosts(args.hosts, args.latency_ms, args.parallel))
        if storage == "postgres":
            app_url, dagster_url = stack.enter_context(postgres_databases(args.postgres_admin_url, 2))
        else:
            app_url, dagster_url = f"sqlite:///{work / 'app.db'}", None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIPELINE_", "DAGSTER_", "OLLAMA_"))}
        env.update(
            PYTHONPATH=str(args.project_root),
            PIPELINE_DATA_DIR=str(work / "data"),
            PIPELINE_DATABASE_URL=app_url,
            DAGSTER_HOME=str(work / "dagster_home"),
            PIPELINE_LLM_BACKEND="ollama",
            OLLAMA_HOST=hosts[0].url,
            OLLAMA_NUM_PARALLEL=str(args.parallel),
            PIPELINE_JUDGE_SAMPLE="0",
        )
        if args.hosts > 1:
            env["PIPELINE_LLM_HOSTS"] = "; ".join(f"{h.url} parallel={args.parallel}" for h in hosts)
        if dagster_url:
            env["PIPELINE_DAGSTER_POSTGRES_URL"] = dagster_url.replace(
                "postgresql://", "postgresql+psycopg2://"
            )
        for pair in args.env:
            name, _, value = pair.partition("=")
            env[name] = value
        _pipeline(args.project_root, env, "migrate")
        ui = Ui(args.project_root, env, work / "dagster_dev.log")
        try:
            ui.wait_loaded()
            ui.wait_idle()
            for host in hosts:
                _post(f"{host.url}/stats/reset", {})
            rows = _postings(args.postings)
            postings_file = work / "postings.jsonl"
            postings_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
            _pipeline(args.project_root, env, "ingest", str(postings_file))
            ingested = time.time()
            result = _watch(args, app_url, hosts, ingested)
            result["runs"] = _runs_summary(ui.runs(), ingested)
        except BaseException:
            kept = Path(tempfile.mkdtemp(prefix="daemon-bench-log-")) / "dagster_dev.log"
            ui.stop()
            kept.write_text((work / "dagster_dev.log").read_text(errors="replace"))
            print(f"  (dagster dev log kept at {kept})", file=sys.stderr)
            raise
        ui.stop()
        if args.keep_log is not None:
            args.keep_log.mkdir(parents=True, exist_ok=True)
            kept = args.keep_log / f"dagster_dev-{storage}-{int(ingested)}.log"
            kept.write_text((work / "dagster_dev.log").read_text(errors="replace"))
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
        result["postings"] = args.postings
        result["load_average"] = os.getloadavg()
        return result


def _watch(
    args: argparse.Namespace, app_url: str, hosts: list[subprocess.Popen], ingested: float
) -> dict[str, Any]:
    """Poll the application database until every output is current (or the timeout)."""
    engine = create_engine(normalize_url(app_url))
    expected = args.postings * len(USE_CASES)
    first: dict[str, float] = {}
    killed_at = None
    deadline = ingested + args.timeout
    count = 0
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
        "expected_outputs": expected,
        "first_output_seconds": round(min(first.values()), 2) if first else None,
        "first_output_by_use_case": {name: round(seconds, 2) for name, seconds in first.items()},
        "killed_host_at_seconds": round(killed_at, 2) if killed_at is not None else None,
    }


def _runs_summary(runs: list[dict[str, Any]], ingested: float) -> dict[str, Any]:
    runs = [run for run in runs if run.get("startTime") is None or run["startTime"] >= ingested]
    by_job: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for run in runs:
        by_job[run["jobName"]] = by_job.get(run["jobName"], 0) + 1
        statuses[run["status"]] = statuses.get(run["status"], 0) + 1
    starts = [run["startTime"] for run in runs if run.get("startTime")]
    llm_runs = [run for run in runs if "gemma3" in run["jobName"] and run.get("startTime")]
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
    capacity_seconds = llm_calls * args.latency_ms / 1000 / (args.parallel * args.hosts)
    figures: dict[str, Any] = {
        "generations": calls,
        "peak_in_flight_per_host": [s.get("peak_concurrent_generations") for s in stats],
        "backend_capacity_seconds": round(capacity_seconds, 2),
    }
    if result.get("all_current_seconds"):
        figures["efficiency"] = round(capacity_seconds / result["all_current_seconds"], 3)
    if intervals and args.kill_host_after is None:
        first, last = min(s for s, _ in intervals), max(e for _, e in intervals)
        busy = sum(end - start for start, end in intervals)
        gaps = idle_gaps(intervals)
        figures.update(
            first_generation_seconds=round(first - ingested, 2),
            llm_window_seconds=round(last - first, 2),
            slot_busy_share=round(busy / ((last - first) * args.parallel * args.hosts), 3),
            llm_efficiency_in_window=round(capacity_seconds / (last - first), 3),
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
    engine = create_engine(normalize_url(app_url))
    try:
        with engine.connect() as conn:
            answered = conn.execute(
                select(
                    Interaction.use_case, Interaction.subject_key, Interaction.backend, Interaction.options
                ).where(Interaction.status == "ok")
            ).all()
            attempts = conn.execute(select(func.coalesce(func.sum(WorkItem.attempts), 0))).scalar_one()
            failed_calls = conn.execute(
                select(func.count()).select_from(Interaction).where(Interaction.status != "ok")
            ).scalar_one()
    finally:
        engine.dispose()
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


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Daemon-path throughput (`pipeline ui`, simulated Ollama)",
        "",
        "| label | storage | postings | hosts x slots x ms | LLM calls | all current s | first output s "
        "| first LLM output s | first run s | first LLM run s | runs | efficiency | LLM window eff. "
        "| slot busy | max gap s | gaps > 1 s | calls/s | dup. | attempts | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        runs = row.get("runs", {})
        cells = [
            row["label"],
            row["storage"],
            row["postings"],
            f"{row['hosts']} x {row['parallel']} x {row['latency_ms']:g}",
            row.get("llm_calls_needed"),
            row.get("all_current_seconds"),
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
        ]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--parallel", type=int, default=4, help="slots per simulated host")
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--dagster-storage", default="sqlite,postgres")
    parser.add_argument("--kill-host-after", type=float, default=None)
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
    args = parser.parse_args(argv)
    args.project_root = args.project_root.resolve()
    _byte_compile(args.project_root)
    rows = []
    previous = args.out or PROJECT_ROOT / "results"
    existing = previous / f"{args.name}.json"
    if existing.exists():  # several invocations (before, after, hosts) add to one table
        rows = json.loads(existing.read_text())["results"]["rows"]
    for storage in [s.strip() for s in args.dagster_storage.split(",") if s.strip()]:
        print(f"{args.label}: {storage}, {args.postings} postings, {args.hosts} host(s) ...", flush=True)
        row = {"label": args.label, **measure(args, storage)}
        print(json.dumps(row, indent=1), flush=True)
        rows.append(row)
        write_report(args.name, {"rows": rows}, markdown(rows), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
