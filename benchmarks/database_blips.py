"""The application database cut off under `pipeline run` for a few seconds: does the work still finish?

    python -m benchmarks.database_blips [--cuts 2,15,30] [--postings 40] [--latency-ms 300] [--parallel 2]
        [--batch 4] [--retry-seconds 120] [--how kill|proxy] [--project-root DIR] [--python PATH]
        [--label NAME]

Issue 66, item 4: 2 s of refused connections ended `pipeline run` with rc 1 and a 100-150-line
traceback, its claims and an "alive" heartbeat left behind. For each cut length, the application
database goes away for that many seconds while `pipeline run --use-case posting_summary --use-case
posting_skills` works on `--postings` postings against one `benchmarks.simulated_ollama` server
(Dagster's own storage in SQLite, so only the application database goes away), once `--cut-after`
summaries are stored:

- `--how kill` (the default): a throwaway PostgreSQL server (initdb and pg_ctl of the PostgreSQL on
  PATH, on its own port in a temporary folder) killed with `pg_ctl stop -m immediate` (its processes
  end at once, as with SIGKILL) and started again (crash recovery) after that many seconds;
- `--how proxy`: a fresh database on the shared server behind a TCP proxy that is cut
  (`benchmarks/tcp_proxy.py`: new connections refused, open ones dropped).

Reported per cut: the command's exit code and wall time, whether every posting got both outputs, answers
stored twice for one use case and posting, attempts spent, claims and "alive" heartbeats left after the
command, the lines it printed about the database, whether a traceback was printed, and the CPU seconds of
the command (user + system, of it and the processes it waited for: `getrusage`). Rows go to
`results/database_blips.{json,md}`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from appdb.database import normalize_url
from benchmarks.crash_recovery import _free_port_in, _ports
from benchmarks.daemon_throughput import (
    _integrity,
    _pipeline,
    postgres_databases,
    simulated_hosts,
    ui_env,
)
from benchmarks.report import write_report
from benchmarks.skillspan_postings import tiny_postings
from benchmarks.tcp_proxy import CuttableProxy
from pipeline_defs.settings import PROJECT_ROOT

USE_CASES = ("posting_summary", "posting_skills")


class ThrowawayPostgres:
    """A PostgreSQL server of its own (initdb, pg_ctl) in a temporary folder on `port`, that can be killed
    (`pg_ctl stop -m immediate`: the server processes end at once, as with SIGKILL; it recovers on start)
    and started again. As root the server runs as the `postgres` user, as PostgreSQL demands."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.data = folder / "pgdata"
        self.url = f"postgresql+psycopg2://postgres@127.0.0.1:{port}/blips"

    def _as_server_user(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run([*prefix, *command], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:2])} failed: {done.stderr.strip()[-500:]}")

    def __enter__(self) -> ThrowawayPostgres:
        self.folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self._as_server_user("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        engine = create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres")
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("CREATE DATABASE blips"))
        engine.dispose()
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1"
        self._as_server_user(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start"
        )

    def kill(self) -> None:
        self._as_server_user("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")

    def __exit__(self, *exc: object) -> None:
        with suppress(RuntimeError):
            self._as_server_user("pg_ctl", "-D", str(self.data), "-m", "fast", "stop")


def _count(url: str, sql: str) -> int:
    engine = create_engine(normalize_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql)).scalar() or 0)
    finally:
        engine.dispose()


def measure(args: argparse.Namespace, cut_seconds: float) -> dict[str, Any]:
    taken: set[int] = set()
    ports = _ports(args.port_range)
    data_root = args.project_root / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="db-blips-", dir=data_root)))
        host = stack.enter_context(
            simulated_hosts(1, args.latency_ms, args.parallel, ports=[_free_port_in(ports, taken)])
        )[0]
        if args.how == "kill":  # a server of its own, killed and started again
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="db-blips-postgres-")))
            server = stack.enter_context(ThrowawayPostgres(folder, _free_port_in(ports, taken)))
            app_url = through_proxy = server.url
            cut, restore = server.kill, server.start
        else:  # the shared server through a proxy that is cut
            [app_url] = stack.enter_context(
                postgres_databases(args.postgres_admin_url, 1, prefix=args.db_prefix)
            )
            direct = make_url(normalize_url(app_url))
            proxy = stack.enter_context(
                CuttableProxy(
                    direct.host or "127.0.0.1", direct.port or 5432, port=_free_port_in(ports, taken)
                )
            )
            through_proxy = direct.set(host="127.0.0.1", port=proxy.port).render_as_string(
                hide_password=False
            )
            cut, restore = proxy.cut, proxy.restore
        env = ui_env(args.project_root, work, app_url, None, host.url, args.parallel)  # type: ignore[attr-defined]
        env.update(
            PIPELINE_BATCH_SIZE=str(args.batch), PIPELINE_DATABASE_RETRY_SECONDS=str(args.retry_seconds)
        )
        _pipeline(args.project_root, env, "migrate", python=args.python)
        postings_file = work / "postings.jsonl"
        postings_file.write_text("".join(json.dumps(row) + "\n" for row in tiny_postings(args.postings)))
        _pipeline(args.project_root, env, "ingest", str(postings_file), python=args.python)
        env["PIPELINE_DATABASE_URL"] = through_proxy
        log = work / "run.log"
        command = [args.python, "-m", "pipeline_defs.cli.main", "run"]
        for name in USE_CASES:
            command += ["--use-case", name]
        started = time.monotonic()
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with log.open("w") as out:
            process = subprocess.Popen(
                command, cwd=args.project_root, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        cut_at = None
        try:
            while process.poll() is None:
                stored = _count(app_url, "SELECT count(*) FROM outputs WHERE use_case = 'posting_summary'")
                if stored >= args.cut_after:
                    break
                time.sleep(0.2)
            if process.poll() is None:
                cut_at = time.monotonic() - started
                cut()
                time.sleep(cut_seconds)
                restore()
            code = process.wait(timeout=args.timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        wall = time.monotonic() - started
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command's, once waited for
        cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        printed = log.read_text(errors="replace")
        outputs = {
            name: _count(app_url, f"SELECT count(*) FROM outputs WHERE use_case = '{name}'")
            for name in USE_CASES
        }
        result = _integrity(app_url, args.postings)
        result.update(
            label=args.label,
            how=args.how,
            cut_seconds=cut_seconds,
            cut_after_seconds=None if cut_at is None else round(cut_at, 1),
            postings=args.postings,
            rc=code,
            wall_seconds=round(wall, 1),
            outputs=outputs,
            all_current=all(count == args.postings for count in outputs.values()),
            claims_left=_count(app_url, "SELECT count(*) FROM work_items WHERE status = 'claimed'"),
            alive_heartbeats_left=_count(
                app_url, "SELECT count(*) FROM run_heartbeats WHERE state = 'alive'"
            ),
            database_lines=[line for line in printed.splitlines() if "application database" in line][:6],
            traceback=("Traceback" in printed),
            printed_lines=len(printed.splitlines()),
            cpu_seconds=round(cpu, 1),
            last_lines=printed.splitlines()[-12:],
        )
        kept = Path(tempfile.mkdtemp(prefix="db-blips-log-", dir=data_root)) / "run.log"
        kept.write_text(printed)
        result["log_kept"] = str(kept)
        return result


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| checkout | how | cut | postings | rc | every posting current | stored twice | attempts spent "
        "| claims left | alive left | traceback | wall | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['label']} | {row.get('how', 'proxy')} | {row['cut_seconds']:g} s | {row['postings']} "
            f"| {row['rc']} "
            f"| {'yes' if row['all_current'] else 'no: ' + json.dumps(row['outputs'])} "
            f"| {row['duplicate_outputs']} | {row['attempts_spent']} | {row['claims_left']} "
            f"| {row['alive_heartbeats_left']} | {'yes' if row['traceback'] else 'no'} "
            f"| {row['wall_seconds']} s | {row['cpu_seconds']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", default="2,15,30", help="seconds the database is cut off, comma-separated")
    parser.add_argument("--postings", type=int, default=40)
    parser.add_argument("--latency-ms", type=float, default=300.0)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--cut-after", type=int, default=8, help="summaries stored before the cut")
    parser.add_argument("--retry-seconds", type=int, default=120)
    parser.add_argument(
        "--how",
        choices=("kill", "proxy"),
        default="kill",
        help="kill: a throwaway PostgreSQL of its own (initdb, pg_ctl), killed and started again; "
        "proxy: the shared server behind a TCP proxy that is cut",
    )
    parser.add_argument("--project-root", type=Path, default=PROJECT_ROOT)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--port-range", default="23900-23999", help="ports for the servers started")
    parser.add_argument("--postgres-admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--db-prefix", default="bench_db_blips")
    parser.add_argument("--name", default="database_blips", help="report name in results/")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    out_dir = args.out or PROJECT_ROOT / "results"
    previous = out_dir / f"{args.name}.json"
    rows = json.loads(previous.read_text())["results"]["rows"] if previous.exists() else []
    for cut in [float(value) for value in args.cuts.split(",") if value.strip()]:
        result = measure(args, cut)
        print(json.dumps(result, indent=2), flush=True)
        rows.append(result)
        write_report(args.name, {"rows": rows}, markdown(rows), out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
