"""CPU seconds of light `pipeline` commands: what a user pays before a command answers.

Each command runs `--runs` times in a fresh interpreter (the installed `pipeline` script); the CPU of
each run is the kernel's account of the finished child (user + system, `RUSAGE_CHILDREN` before and
after), so a loaded machine changes the wall time but hardly the figure. Prints the median, min and
max per command; `--json` for the same as JSON.

    python -m benchmarks.cli_startup                       # --help, status, pauses, failures, events
    python -m benchmarks.cli_startup --command "status --json" --runs 9
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_COMMANDS = ("--help", "--version", "status", "pauses", "failures", "events")


def user_env() -> dict[str, str]:
    """This environment as a user's shell has it: Python writes and reuses bytecode. (This machine's
    sessions set PYTHONDONTWRITEBYTECODE=1, which recompiled the project's ~80 modules on every command:
    ~0.3 s of CPU no user pays.)"""
    return {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def cpu_of_run(argv: list[str]) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, exit code) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=user_env()
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.returncode


def measure(pipeline: str, command: str, runs: int) -> dict[str, object]:
    argv = [pipeline, *shlex.split(command)]
    cpu_of_run(argv)  # warm the file cache and the bytecode: a user's second command, not the first ever
    samples = [cpu_of_run(argv) for _ in range(runs)]
    cpus = [cpu for cpu, _, _ in samples]
    return {
        "command": f"pipeline {command}",
        "runs": runs,
        "cpu_median_s": round(statistics.median(cpus), 3),
        "cpu_min_s": round(min(cpus), 3),
        "cpu_max_s": round(max(cpus), 3),
        "wall_median_s": round(statistics.median(wall for _, wall, _ in samples), 3),
        "exit_codes": sorted({code for _, _, code in samples}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--command", action="append", dest="commands", help="pipeline's arguments (repeatable)"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pipeline", default=str(Path(sys.executable).with_name("pipeline")))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = [measure(args.pipeline, command, args.runs) for command in args.commands or DEFAULT_COMMANDS]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for row in results:
        print(
            f"{row['command']:<28} CPU median {row['cpu_median_s']:.2f}s "
            f"(min {row['cpu_min_s']:.2f}, max {row['cpu_max_s']:.2f}; {row['runs']} runs), "
            f"wall median {row['wall_median_s']:.2f}s, exit {row['exit_codes']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
