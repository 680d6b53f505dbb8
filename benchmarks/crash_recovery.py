"""Crash recovery, timed: `kill -9` in a working `pipeline ui`, until every posting's outputs are current.

    python -m benchmarks.crash_recovery [--kill tree,worker] [--app-db sqlite,postgres]
        [--project-root DIR] [--python PATH] [--label NAME] [--postings 200] [--latency-ms 500]
        [--parallel 4] [--kill-at-outputs 30] [--port-range 23900-23999] [--timeout 1500]

What a user lives through when a machine or the kernel kills part of the pipeline. `pipeline ui`
(dagster dev: the daemon's sensors and queue, runs launched by the code server) works on N postings
ingested at once, against one `benchmarks.simulated_ollama` server (`--latency-ms` per generation,
`--parallel` slots, judge off): simulated, so the figures are the pipeline's own recovery, not a
model's speed. Once a run holds claims and `--kill-at-outputs` summaries are stored, it is killed:

- `tree`: SIGKILL to `pipeline ui`'s whole process group (webserver, daemon, code server, run
  workers), as a host loss or `kill -9 -PGID` does; then `pipeline ui` is started again at once.
- `worker`: SIGKILL to one run process only (the run holding the most claims; its pid from its
  heartbeat row), as the kernel's out-of-memory killer does; the rest of the tree keeps running.

Timed from the `kill -9`: the restarted code location loaded (`tree`), the killed runs' claims given
back (no `work_items` row still claimed by a run that was killed), the killed runs marked failed in
Dagster, and every output of the three use cases current. CPU seconds of the `pipeline ui` process
tree (every process, exact: `process_tree_cpu.py`) over the same stretch, from the kill to every
output current; for `tree`, of the restarted tree from its start. The work left at the kill is the
same for both checkouts, so the difference is the recovery.

App databases: `sqlite` (the default, a file in the data directory, Dagster's storage in SQLite too)
and `postgres` (`PIPELINE_DATABASE_URL` and `PIPELINE_DAGSTER_POSTGRES_URL` on fresh databases named
`<--db-prefix>_<random>`, dropped afterwards). Heartbeat and lease are the defaults (10 s, 600 s).

Before and after with the same script: `--project-root` runs another checkout (a `git worktree` of an
older commit) with its own interpreter (`--python`, its own virtualenv); its data directory is
`<project root>/data/crash-bench-*`. Results are added to `results/crash_recovery.json` and `.md`, so
several invocations (before, after, kill kinds) build one table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from appdb.database import normalize_url
from benchmarks.daemon_throughput import (
    FINISHED,
    LOCATION_QUERY,
    USE_CASES,
    Ui,
    _byte_compile,
    _integrity,
    _pipeline,
    postgres_databases,
    simulated_hosts,
    ui_env,
)
from benchmarks.ports import free_port_in
from benchmarks.process_tree_cpu import ProcessTreeCpu, become_subreaper, reap_orphans
from benchmarks.report import write_report
from benchmarks.skillspan_postings import tiny_postings
from pipeline_defs.settings import PROJECT_ROOT

KILL_KINDS = ("tree", "worker")
APP_DBS = ("sqlite", "postgres")
POLL_SECONDS = 0.5
RUNS_POLL_SECONDS = 3.0
KILL_WAIT_SECONDS = 600  # from ingest until a run is at work (launching run workers is slow under load)
SUMMARY = "posting_summary"


def _ports(spec: str) -> list[int]:
    low, _, high = spec.partition("-")
    return list(range(int(low), int(high or low) + 1))


def _free_port_in(ports: list[int], taken: set[int]) -> int:
    """The first port of the range nothing listens on (a shared machine gives each user a range)."""
    found = free_port_in(ports, taken)
    if found is None:
        raise RuntimeError(f"no free port in {ports[0]}-{ports[-1]}")
    return found


class AppDb:
    """The few reads of the application database the clock needs, in plain SQL (any checkout's schema)."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(normalize_url(url))

    def outputs(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT use_case, count(*) FROM outputs GROUP BY use_case"))
            return {name: count for name, count in rows}

    def claims_by_run(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT claimed_by, count(*) FROM work_items WHERE status = 'claimed' "
                    "AND claimed_by IS NOT NULL GROUP BY claimed_by"
                )
            )
            return {run_id: count for run_id, count in rows}

    def heartbeat_pids(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            rows = conn.execute(text("SELECT run_id, pid FROM run_heartbeats WHERE state = 'alive'"))
            return {run_id: pid for run_id, pid in rows}

    def redone_calls(self, killed_runs: set[str]) -> dict[str, int]:
        """LLM answers stored twice for one (use case, posting): in all, and how many of the first
        answers came from a killed run (work the kill threw away)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT use_case, subject_key, run_id, started_at FROM interactions "
                    "WHERE status = 'ok' AND backend != 'script' ORDER BY id"
                )
            ).all()
        answers: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        for use_case, key, run_id, started_at in rows:
            answers.setdefault((use_case, key), []).append((run_id, started_at))
        redone = {key: runs for key, runs in answers.items() if len(runs) > 1}
        killed_first = sum(1 for runs in redone.values() if runs[0][0] in killed_runs)
        return {
            "llm_calls_redone": sum(len(runs) - 1 for runs in redone.values()),
            "redone_first_answered_by_a_killed_run": killed_first,
        }

    def close(self) -> None:
        self.engine.dispose()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with suppress(OSError):
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    return False


def _location_loaded(ui: Ui) -> bool:
    try:
        entries = ui.graphql(LOCATION_QUERY)["workspaceOrError"]["locationEntries"]
    except (OSError, KeyError, TypeError, ValueError):
        return False
    return bool(entries) and all(
        (entry["locationOrLoadError"] or {}).get("__typename") == "RepositoryLocation" for entry in entries
    )


def _run_statuses(ui: Ui, run_ids: set[str]) -> dict[str, str]:
    try:
        runs = ui.runs()
    except (OSError, KeyError, TypeError, ValueError):
        return {}
    return {run["runId"]: run["status"] for run in runs if run["runId"] in run_ids}


def _wait_for_work_in_flight(
    args: argparse.Namespace, db: AppDb, ui: Ui, started: float
) -> tuple[dict[str, int], dict[str, int]]:
    """Until a run with a live heartbeat holds claims and `--kill-at-outputs` summaries are stored."""
    deadline = started + KILL_WAIT_SECONDS
    while time.time() < deadline:
        if ui.process.poll() is not None:
            raise RuntimeError(f"`pipeline ui` exited ({ui.process.returncode}); see {ui.log.name}")
        claims, outputs = db.claims_by_run(), db.outputs()
        beating = db.heartbeat_pids()
        if outputs.get(SUMMARY, 0) >= args.kill_at_outputs and any(run in beating for run in claims):
            return claims, outputs
        time.sleep(POLL_SECONDS)
    raise TimeoutError(f"no run at work {KILL_WAIT_SECONDS}s after the ingest; see {ui.log.name}")


def measure(args: argparse.Namespace, kill: str, app_db: str) -> dict[str, Any]:
    """One `pipeline ui`, one kill, the clock until every output is current."""
    taken: set[int] = set()
    ports = _ports(args.port_range)
    data_root = args.project_root / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="crash-bench-", dir=data_root)))
        host = stack.enter_context(
            simulated_hosts(1, args.latency_ms, args.parallel, ports=[_free_port_in(ports, taken)])
        )[0]
        if app_db == "postgres":
            app_url, dagster_url = stack.enter_context(
                postgres_databases(args.postgres_admin_url, 2, prefix=args.db_prefix)
            )
        else:
            app_url, dagster_url = f"sqlite:///{work / 'app.db'}", None
        env = ui_env(args.project_root, work, app_url, dagster_url, host.url, args.parallel)  # type: ignore[attr-defined]
        if os.environ.get("PIPELINE_SHARED_DATA"):
            env["PIPELINE_SHARED_DATA"] = os.environ["PIPELINE_SHARED_DATA"]
        _pipeline(args.project_root, env, "migrate", python=args.python)
        become_subreaper()  # the killed tree's orphans are reaped here
        log_path = work / "dagster_dev.log"
        ui = Ui(args.project_root, env, log_path, port=_free_port_in(ports, taken), python=args.python)
        db = AppDb(app_url)
        tree: ProcessTreeCpu | None = None
        try:
            ui.wait_loaded()
            ui.wait_idle()
            postings_file = work / "postings.jsonl"
            postings_file.write_text("".join(json.dumps(row) + "\n" for row in tiny_postings(args.postings)))
            _pipeline(args.project_root, env, "ingest", str(postings_file), python=args.python)
            ingested = time.time()
            claims, outputs_at_kill = _wait_for_work_in_flight(args, db, ui, ingested)
            pids = db.heartbeat_pids()
            if kill == "tree":
                killed_runs = set(claims)
                killed_at = time.time()
                os.killpg(ui.process.pid, signal.SIGKILL)
                ui.process.wait()
                ui.log.close()
                ui = Ui(
                    args.project_root, env, log_path, port=_free_port_in(ports, taken), python=args.python
                )
                tree = ProcessTreeCpu(ui.process.pid)
                tree.start_window()
                tree.start()
            else:
                victim = max((run for run in claims if run in pids), key=lambda run: claims[run])
                killed_runs = {victim}
                tree = ProcessTreeCpu(ui.process.pid)
                tree.start_window()
                tree.start()
                killed_at = time.time()
                os.kill(pids[victim], signal.SIGKILL)
            result = _clock(args, db, ui, killed_at, killed_runs, pids)
            tree.stop_window()
            result.update(db.redone_calls(killed_runs))
            if result["all_current_seconds"] is None:  # why: the log says (a launch, a load, a sensor)
                kept = Path(tempfile.mkdtemp(prefix="crash-bench-log-", dir=data_root)) / "dagster_dev.log"
                kept.write_text(log_path.read_text(errors="replace"))
                result["log_kept"] = str(kept)
            result.update(
                kill=kill,
                app_db=app_db,
                postings=args.postings,
                claims_held_at_kill=sum(claims[run] for run in killed_runs),
                killed_runs=len(killed_runs),
                outputs_at_kill=sum(outputs_at_kill.get(name, 0) for name in args.use_cases),
                kill_after_ingest_seconds=round(killed_at - ingested, 2),
                cpu=tree.figures(),
            )
        except BaseException:
            kept = Path(tempfile.mkdtemp(prefix="crash-bench-log-", dir=data_root)) / "dagster_dev.log"
            kept.write_text(log_path.read_text(errors="replace"))
            print(f"  (dagster dev log kept at {kept})", file=sys.stderr)
            raise
        finally:
            if tree is not None:
                tree.stop()
            db.close()
            ui.stop()
            reap_orphans()
        result.update(_integrity(app_url, args.postings))
        result["load_average"] = [round(x, 1) for x in os.getloadavg()]
        return result


def _clock(
    args: argparse.Namespace, db: AppDb, ui: Ui, killed_at: float, killed_runs: set[str], pids: dict[str, int]
) -> dict[str, Any]:
    """Poll from the kill until every output is current; when each milestone came, in seconds after it."""
    expected = args.postings * len(args.use_cases)
    killed_pids = [pids[run] for run in killed_runs if run in pids]
    seconds: dict[str, float | None] = dict.fromkeys(
        ("processes_gone", "location_loaded", "claims_given_back", "runs_marked_failed", "all_current")
    )
    statuses: dict[str, str] = {}
    next_runs_poll = 0.0
    deadline = killed_at + args.timeout
    outputs = 0
    reported: set[str] = set()
    while time.time() < deadline:
        for name, value in seconds.items():  # each milestone as it comes: a run cut short still says it
            if value is not None and name not in reported:
                reported.add(name)
                print(f"  {name}: {value:.1f}s after the kill", flush=True)
        now = time.time()
        if seconds["processes_gone"] is None and not any(_alive(pid) for pid in killed_pids):
            seconds["processes_gone"] = now - killed_at
        if seconds["location_loaded"] is None and _location_loaded(ui):
            seconds["location_loaded"] = time.time() - killed_at
        claims = db.claims_by_run()
        if seconds["claims_given_back"] is None and not any(run in claims for run in killed_runs):
            seconds["claims_given_back"] = time.time() - killed_at
        if (
            seconds["runs_marked_failed"] is None
            and seconds["location_loaded"] is not None
            and now >= next_runs_poll
        ):
            next_runs_poll = now + RUNS_POLL_SECONDS
            statuses = _run_statuses(ui, killed_runs)
            if len(statuses) == len(killed_runs) and all(s in FINISHED for s in statuses.values()):
                seconds["runs_marked_failed"] = time.time() - killed_at
        counts = db.outputs()
        outputs = sum(counts.get(name, 0) for name in args.use_cases)
        if outputs >= expected:
            seconds["all_current"] = time.time() - killed_at
            break
        time.sleep(POLL_SECONDS)
    if seconds["runs_marked_failed"] is None:
        statuses = _run_statuses(ui, killed_runs)
    return {
        **{
            f"{name}_seconds": round(value, 1) if value is not None else None
            for name, value in seconds.items()
        },
        "killed_run_statuses": sorted(set(statuses.values())),
        "outputs": outputs,
        "expected_outputs": expected,
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Crash recovery (`pipeline ui`, simulated Ollama): seconds after the `kill -9`",
        "",
        "| label | app DB | kill | until | postings | outputs at kill | claims held at kill "
        "| processes gone s "
        "| location loaded s | claims held for s | runs marked failed s | **all current s** "
        "| CPU s, kill to all current | LLM calls redone (first by a killed run) | attempts | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [
            row["label"],
            row["app_db"],
            row["kill"],
            row.get("until", "all"),
            row["postings"],
            f"{row['outputs_at_kill']} / {row['expected_outputs']}",
            row["claims_held_at_kill"],
            row.get("processes_gone_seconds"),
            row.get("location_loaded_seconds") if row["kill"] == "tree" else "-",
            row.get("claims_given_back_seconds"),
            row.get("runs_marked_failed_seconds"),
            f"**{row.get('all_current_seconds') or 'not reached'}**",
            row["cpu"]["total_cpu_seconds"],
            f"{row.get('llm_calls_redone')} ({row.get('redone_first_answered_by_a_killed_run')})",
            row.get("attempts_spent"),
            " ".join(str(x) for x in row["load_average"]),
        ]
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kill", default="tree,worker", help=f"comma-separated: {', '.join(KILL_KINDS)}")
    parser.add_argument("--app-db", default="sqlite,postgres", help=f"comma-separated: {', '.join(APP_DBS)}")
    parser.add_argument("--project-root", type=Path, default=PROJECT_ROOT)
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter of that checkout's virtualenv"
    )
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--postings", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=500.0)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--kill-at-outputs", type=int, default=30, help="summaries stored before the kill")
    parser.add_argument("--port-range", default="23900-23999", help="ports for the servers started")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds after the kill")
    parser.add_argument(
        "--until",
        choices=("all", "summary"),
        default="all",
        help="all: every output of the three use cases current; summary: every posting's summary (the "
        "LLM group's work, which the killed run held; skill resolution is CPU-bound on a loaded machine)",
    )
    parser.add_argument("--postgres-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-prefix", default="bench_crash", help="PostgreSQL databases: <prefix>_<random>")
    parser.add_argument("--name", default="crash_recovery", help="report name in results/")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="NAME",
        help="measure nothing: put the rows of these reports (runs side by side) into --name's",
    )
    args = parser.parse_args(argv)
    out = args.out or PROJECT_ROOT / "results"
    if args.merge:
        merged = [
            row
            for name in args.merge
            for row in json.loads((out / f"{name}.json").read_text())["results"]["rows"]
        ]
        write_report(args.name, {"rows": merged}, markdown(merged), out)
        print(markdown(merged))
        return 0
    args.project_root = args.project_root.resolve()
    args.use_cases = USE_CASES if args.until == "all" else (SUMMARY,)
    kills = [k.strip() for k in args.kill.split(",") if k.strip()]
    dbs = [d.strip() for d in args.app_db.split(",") if d.strip()]
    if not set(kills) <= set(KILL_KINDS) or not set(dbs) <= set(APP_DBS):
        parser.error(f"--kill takes {KILL_KINDS}, --app-db {APP_DBS}")
    _byte_compile(args.project_root, python=args.python)
    existing = out / f"{args.name}.json"
    rows = json.loads(existing.read_text())["results"]["rows"] if existing.exists() else []
    for app_db in dbs:
        for kill in kills:
            print(f"{args.label}: {app_db}, kill {kill}, {args.postings} postings ...", flush=True)
            row = {"label": args.label, "until": args.until, **measure(args, kill, app_db)}
            print(json.dumps({k: v for k, v in row.items() if k != "cpu"}, indent=1), flush=True)
            rows.append(row)
            write_report(args.name, {"rows": rows}, markdown(rows), out)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
