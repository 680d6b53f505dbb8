"""The pacer's measured rate against its setting: several processes share one bucket in the database.

Each worker process waits at a common start line, then takes `--per-worker` tokens one at a time from
the same bucket and prints the wall-clock time of each grant. The parent measures the rate (grants
after the initial burst over the time they took), the most grants in any 1-second window, and
checks every window against `burst + rate * T`.

    python -m benchmarks.pacer_rate --url postgresql://postgres@127.0.0.1:5432/DB \\
        [--rate 20] [--burst 5] [--workers 4] [--per-worker 25]

Writes results/pacer_rate.json and .md. (`tests/integration/test_pacer_processes.py` runs the same
workers on PostgreSQL and asserts the window bound.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from appdb.database import migrate
from appdb.pacer import Pacer
from benchmarks.report import write_report


def worker(url: str, bucket: str, rate: float, burst: float, count: int, start_file: Path) -> None:
    while not start_file.exists():
        time.sleep(0.005)
    pacer = Pacer(url, bucket, rate, burst)
    for _ in range(count):
        pacer.acquire()
        print(json.dumps({"scheduled": pacer.last_grant_at, "granted": time.time()}), flush=True)


def run_workers(
    url: str, *, rate: float, burst: float, workers: int, per_worker: int, work_dir: Path, bucket: str
) -> tuple[list[float], list[float]]:
    """Start the workers together; (the bucket's scheduled grant times, the times the workers woke and
    went on), each sorted."""
    migrate(url)
    start_file = work_dir / f"go-{bucket.replace(':', '_').replace('/', '_')}"
    command = [sys.executable, "-m", "benchmarks.pacer_rate", "--worker", "--url", url, "--bucket", bucket]
    command += ["--rate", str(rate), "--burst", str(burst), "--per-worker", str(per_worker)]
    command += ["--start-file", str(start_file)]
    processes = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(workers)
    ]
    time.sleep(1.0)  # let every interpreter start and wait at the line
    start_file.touch()
    scheduled: list[float] = []
    woke: list[float] = []
    for process in processes:
        out, err = process.communicate(timeout=600)
        if process.returncode != 0:
            raise RuntimeError(f"a pacer worker failed: {err.strip()[-2000:]}")
        for line in out.splitlines():
            if line.startswith("{"):
                scheduled.append(json.loads(line)["scheduled"])
                woke.append(json.loads(line)["granted"])
    return sorted(scheduled), sorted(woke)


def measure(grants: list[float], *, rate: float, burst: float, jitter: float = 0.0) -> dict[str, Any]:
    """The rate after the initial burst, the busiest 1-second window, and the worst window excess over
    `burst + rate * (T + jitter)` (zero or less: within the limit)."""
    worst_excess = float("-inf")
    busiest_second = 0
    for i, first in enumerate(grants):
        for j in range(i, len(grants)):
            span = grants[j] - first
            worst_excess = max(worst_excess, (j - i + 1) - (burst + rate * (span + jitter)))
            if span <= 1.0:
                busiest_second = max(busiest_second, j - i + 1)
    # Grants beyond the initial burst over the time they took: never above the rate (the window bound
    # for the whole run), and equal to it while the workers keep the bucket empty.
    span = grants[-1] - grants[0] if len(grants) > 1 else 0.0
    measured = (len(grants) - burst) / span if span > 0 else 0.0
    return {
        "grants": len(grants),
        "seconds": round(grants[-1] - grants[0], 3),
        "rate_setting": rate,
        "burst_setting": burst,
        "measured_rate_after_burst": round(measured, 3),
        "busiest_1s_window": busiest_second,
        "allowed_in_1s": burst + rate * 1.0,
        "worst_window_excess": round(worst_excess, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="the application database (PostgreSQL or SQLite)")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--burst", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--per-worker", type=int, default=25)
    parser.add_argument("--bucket", default=f"benchmark:{time.time_ns()}")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out-dir", type=Path)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.url, args.bucket, args.rate, args.burst, args.per_worker, args.start_file)
        return 0
    import tempfile

    with tempfile.TemporaryDirectory() as work_dir:
        scheduled, woke = run_workers(
            args.url,
            rate=args.rate,
            burst=args.burst,
            workers=args.workers,
            per_worker=args.per_worker,
            work_dir=Path(work_dir),
            bucket=args.bucket,
        )
    results = {
        "workers": args.workers,
        "per_worker": args.per_worker,
        "scheduled": measure(scheduled, rate=args.rate, burst=args.burst),
        "woke": measure(woke, rate=args.rate, burst=args.burst),
        "load_average": os.getloadavg()[0],
    }
    sched, real = results["scheduled"], results["woke"]
    markdown = (
        "# Pacer: measured rate against its setting\n\n"
        f"{args.workers} processes, {args.per_worker} requests each, one bucket in the database "
        f"({args.url.split('://')[0]}).\n\n"
        "Scheduled: the grant times the shared bucket gave out. Woke: when each worker's sleep ended "
        f"(the machine's load average was {results['load_average']:.1f}).\n\n"
        "| setting | scheduled | woke |\n|---|---|---|\n"
        f"| rate {args.rate:g}/s | {sched['measured_rate_after_burst']}/s (after the burst) | "
        f"{real['measured_rate_after_burst']}/s |\n"
        f"| at most {sched['allowed_in_1s']:g} in any 1 s window | busiest: {sched['busiest_1s_window']} | "
        f"busiest: {real['busiest_1s_window']} |\n"
        f"| excess over burst + rate x T (any window) | {sched['worst_window_excess']} | "
        f"{real['worst_window_excess']} |\n"
    )
    json_path, _ = write_report("pacer_rate", results, markdown, args.out_dir)
    print(markdown)
    print(f"written: {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
