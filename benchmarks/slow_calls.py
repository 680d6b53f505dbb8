"""Slow model calls against a short lease under `pipeline ui`: is any posting answered twice?

    python -m benchmarks.slow_calls [--lease 20] [--latency-ms 10000] [--batch 4] [--postings 24]
        [--parallel 4] [--server-slots N] [--app-db sqlite|postgres] [--project-root DIR] [--python PATH]
        [--label NAME]

Issue 66, item 1: with PIPELINE_LEASE_SECONDS=20, PIPELINE_BATCH_SIZE=4 and a model server taking 10 s a
call, the runs the daemon started waited their turn at the server while their leases ran out; a second
run took a live run's claims and the same postings were answered twice (32 calls for 24 postings). Here
`pipeline ui` (the daemon's sensors and run queue, runs launched by the code server) works on `--postings`
postings ingested at once, against one `benchmarks.simulated_ollama` server (`--latency-ms` a call,
`--parallel` slots, judge off), until every posting has its summary and skills (or `--timeout`).

Reported: the model calls the server served, the calls the work needed (one per use case and posting),
the postings answered twice (`duplicate_outputs`: a second stored answer for one use case and posting),
attempts spent, the wall time and the CPU seconds of the whole `pipeline ui` tree. Simulated: the figures
are the orchestration's, not a model's. `--project-root`/`--python` run another checkout (a `git worktree`
of an older commit) for a before/after; each invocation adds a row to `results/slow_calls.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.crash_recovery import AppDb, _free_port_in, _ports
from benchmarks.daemon_throughput import (
    Ui,
    _get,
    _integrity,
    _pipeline,
    postgres_databases,
    simulated_hosts,
    ui_env,
)
from benchmarks.process_tree_cpu import ProcessTreeCpu, become_subreaper, reap_orphans
from benchmarks.report import write_report
from benchmarks.skillspan_postings import tiny_postings
from pipeline_defs.settings import PROJECT_ROOT

LLM_USE_CASES = ("posting_summary", "posting_skills")
POLL_SECONDS = 1.0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    taken: set[int] = set()
    ports = _ports(args.port_range)
    data_root = args.project_root / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="slow-calls-", dir=data_root)))
        slots = args.server_slots or args.parallel
        host = stack.enter_context(
            simulated_hosts(1, args.latency_ms, slots, ports=[_free_port_in(ports, taken)])
        )[0]
        if args.app_db == "postgres":
            app_url, dagster_url = stack.enter_context(
                postgres_databases(args.postgres_admin_url, 2, prefix=args.db_prefix)
            )
        else:
            app_url, dagster_url = f"sqlite:///{work / 'app.db'}", None
        env = ui_env(args.project_root, work, app_url, dagster_url, host.url, args.parallel)  # type: ignore[attr-defined]
        env.update(PIPELINE_LEASE_SECONDS=str(args.lease), PIPELINE_BATCH_SIZE=str(args.batch))
        _pipeline(args.project_root, env, "migrate", python=args.python)
        become_subreaper()
        log_path = work / "dagster_dev.log"
        ui = Ui(args.project_root, env, log_path, port=_free_port_in(ports, taken), python=args.python)
        db = AppDb(app_url)
        tree = ProcessTreeCpu(ui.process.pid)
        try:
            ui.wait_loaded()
            ui.wait_idle()
            served_before = _get(f"{host.url}/stats")["generations"]  # type: ignore[attr-defined]
            postings_file = work / "postings.jsonl"
            postings_file.write_text("".join(json.dumps(row) + "\n" for row in tiny_postings(args.postings)))
            tree.start_window()
            tree.start()
            _pipeline(args.project_root, env, "ingest", str(postings_file), python=args.python)
            started = time.time()
            done_after = None
            while time.time() - started < args.timeout:
                outputs = db.outputs()
                if all(outputs.get(name, 0) >= args.postings for name in LLM_USE_CASES):
                    done_after = time.time() - started
                    break
                if ui.process.poll() is not None:
                    raise RuntimeError(f"`pipeline ui` exited ({ui.process.returncode}); see {log_path}")
                time.sleep(POLL_SECONDS)
            tree.stop_window()
            stats = _get(f"{host.url}/stats")  # type: ignore[attr-defined]
            outputs = db.outputs()
        except BaseException:
            kept = Path(tempfile.mkdtemp(prefix="slow-calls-log-", dir=data_root)) / "dagster_dev.log"
            kept.write_text(log_path.read_text(errors="replace"))
            print(f"  (dagster dev log kept at {kept})", file=sys.stderr)
            raise
        finally:
            tree.stop()
            db.close()
            ui.stop()
            reap_orphans()
        result = _integrity(app_url, args.postings)
        result.update(
            label=args.label,
            app_db=args.app_db,
            postings=args.postings,
            lease_seconds=args.lease,
            latency_ms=args.latency_ms,
            batch=args.batch,
            server_slots=slots,
            client_parallel=args.parallel,
            calls_served=stats["generations"] - served_before,
            outputs={name: outputs.get(name, 0) for name in LLM_USE_CASES},
            all_done_seconds=None if done_after is None else round(done_after, 1),
            cpu=tree.figures(),
        )
        return result


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| checkout | app DB | lease | call | batch | slots | postings | calls served | calls needed "
        "| answered twice | attempts spent | all done | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",  # slots: the server's (the pipeline's told)
    ]
    for row in rows:
        done = "not in time" if row["all_done_seconds"] is None else f"{row['all_done_seconds']} s"
        cpu = row.get("cpu", {}).get("total_cpu_seconds")
        lines.append(
            f"| {row['label']} | {row['app_db']} | {row['lease_seconds']} s | {row['latency_ms'] / 1000:g} s "
            f"| {row['batch']} | {row['server_slots']} ({row.get('client_parallel', row['server_slots'])}) "
            f"| {row['postings']} | {row['calls_served']} "
            f"| {row['llm_calls_needed']} | {row['duplicate_outputs']} | {row['attempts_spent']} | {done} "
            f"| {cpu if cpu is not None else '-'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lease", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=10_000.0)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--postings", type=int, default=24)
    parser.add_argument(
        "--parallel", type=int, default=4, help="the server's slots as the pipeline is told them"
    )
    parser.add_argument("--server-slots", type=int, default=0, help="the slots it really has (0: --parallel)")
    parser.add_argument("--app-db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--project-root", type=Path, default=PROJECT_ROOT)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--port-range", default="23900-23999", help="ports for the servers started")
    parser.add_argument("--postgres-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-prefix", default="bench_slow_calls")
    parser.add_argument("--name", default="slow_calls", help="report name in results/")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    result = measure(args)
    print(json.dumps(result, indent=2))
    out_dir = args.out or PROJECT_ROOT / "results"
    previous = out_dir / f"{args.name}.json"
    rows = json.loads(previous.read_text())["results"]["rows"] if previous.exists() else []
    rows.append(result)
    write_report(args.name, {"rows": rows}, markdown(rows), out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
