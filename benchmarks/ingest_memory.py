"""Ingest at scale: peak memory and time of `pipeline ingest` for a large generated file.

    python -m benchmarks.ingest_memory --postings 1000000 --engine sqlite,postgres [--changed]
    python -m benchmarks.ingest_memory --postings 0 --bad-lines 3000000 --engine sqlite

With --bad-lines N the file also holds N lines that are rejected (invalid JSON, a missing field, a key
that is not text, a date that is not one, in turn, each reason naming its line's own details): every
rejection is printed on stderr (to a file here) and the peak shows whether they are held in memory
(issue 66: 3,000,000 bad lines took 795 MB; the target is under 250 MB).

For each engine: a fresh application database, a generated JSONL (or --format csv) file of N postings
(a title, a company, a location and a description of --description-chars characters), then
`pipeline ingest FILE` in a child process, whose peak resident memory (ru_maxrss, from wait4) and wall
time are reported. With --changed, the same keys are ingested again with every description changed:
the update path (every posting's content hash differs), also timed. It measures and reports; it
asserts nothing (the target for 1,000,000 postings is < 500 MB peak RSS, docs/ingest.md).

Run it from another checkout's root with `--code-dir DIR` to measure that code instead (the child
process imports from DIR first): how the before-figures of the current main were taken.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
_WORDS = ("data", "pipeline", "python", "sql", "nurse", "ward", "cook", "kitchen", "deliver", "build", "team")


def write_postings(path: Path, count: int, description_chars: int, fmt: str, variant: str = "") -> int:
    """Write `count` generated postings; returns the file's size in bytes."""
    filler = (" ".join(_WORDS) + " ") * (description_chars // 80 + 1)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle) if fmt == "csv" else None
        if writer:
            writer.writerow(["key", "title", "company", "location", "description"])
        for index in range(count):
            row = {
                "key": f"bench-{index:07d}",
                "title": f"{_WORDS[index % len(_WORDS)].title()} engineer {index % 97}",
                "company": f"Company {index % 1013}",
                "location": f"City {index % 211}",
                "description": f"{variant}Posting {index}: {filler[: description_chars - 20]}",
            }
            if writer:
                writer.writerow(row.values())
            else:
                handle.write(json.dumps(row) + "\n")
    return path.stat().st_size


def write_bad_lines(path: Path, count: int) -> int:
    """Append `count` lines that ingest rejects, four kinds in turn; returns the file's size in bytes."""
    with path.open("a", encoding="utf-8") as handle:
        for index in range(count):
            kind = index % 4
            if kind == 0:
                handle.write(f'{{"key": "bad-{index}", "title": "Cook {index}", "description": \n')
            elif kind == 1:
                handle.write(json.dumps({"key": f"bad-{index}", "title": f"Cook {index}"}) + "\n")
            elif kind == 2:
                row = {"key": [index], "title": "Cook", "description": "Cooks."}
                handle.write(json.dumps(row) + "\n")
            else:
                row = {
                    "key": f"bad-{index}",
                    "title": "Cook",
                    "description": "Cooks.",
                    "posted_at": f"day {index}",
                }
                handle.write(json.dumps(row) + "\n")
    return path.stat().st_size


def fresh_database(engine: str, workdir: Path, admin_url: str) -> str:
    if engine == "sqlite":
        return f"sqlite:///{workdir / 'app.db'}"
    import psycopg2
    from sqlalchemy.engine import make_url

    name = f"bench_ingest_{os.getpid()}_{int(time.time())}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
        cursor.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str, admin_url: str) -> None:
    if not url.startswith("postgresql"):
        return
    import psycopg2
    from sqlalchemy.engine import make_url

    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    admin.close()


def run_ingest(path: Path, url: str, data_dir: Path, code_dir: Path) -> dict[str, Any]:
    """`pipeline ingest path` in a child process: exit code, wall and CPU time, peak RSS, its summary
    line and how many rejections it printed. Its output goes to files (a pipe would fill with the
    rejections and stop the child while this process waits for it)."""
    env = {**os.environ, "PIPELINE_DATABASE_URL": url, "PIPELINE_DATA_DIR": str(data_dir)}
    env["PYTHONPATH"] = str(code_dir)
    command = [sys.executable, "-m", "pipeline_defs.cli.main", "ingest", str(path)]
    out_path, err_path = path.with_suffix(".out"), path.with_suffix(".err")
    started = time.perf_counter()
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        process = subprocess.Popen(command, cwd=code_dir, env=env, stdout=out_file, stderr=err_file)
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    out = out_path.read_text(errors="replace")
    rejections, last_errors = 0, []
    with err_path.open(errors="replace") as err:
        for line in err:
            rejections += line.startswith("rejected ")
            if not line.startswith("rejected "):
                last_errors = [*last_errors[-2:], line.rstrip()]
    out_path.unlink()
    err_path.unlink()
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "seconds": round(seconds, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: kilobytes
        "rejections_printed": rejections,
        "output": out.strip().splitlines()[-1:] or last_errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=1_000_000)
    parser.add_argument("--engine", default="sqlite,postgres", help="sqlite, postgres or both (comma)")
    parser.add_argument("--format", choices=("jsonl", "csv"), default="jsonl")
    parser.add_argument("--description-chars", type=int, default=400)
    parser.add_argument("--changed", action="store_true", help="ingest again with every posting changed")
    parser.add_argument("--bad-lines", type=int, default=0, help="also this many rejected lines (JSONL only)")
    parser.add_argument("--code-dir", type=Path, default=Path.cwd(), help="the checkout to measure")
    parser.add_argument("--postgres-admin-url", default=DEFAULT_POSTGRES_ADMIN_URL)
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as temp:
        workdir = Path(temp)
        first = workdir / f"postings.{args.format}"
        size = write_postings(first, args.postings, args.description_chars, args.format)
        if args.bad_lines:
            if args.format != "jsonl":
                parser.error("--bad-lines writes JSONL lines: use --format jsonl")
            size = write_bad_lines(first, args.bad_lines)
        second = workdir / f"changed.{args.format}"
        if args.changed:
            write_postings(second, args.postings, args.description_chars, args.format, variant="v2 ")
        print(
            f"{args.postings:,} postings and {args.bad_lines:,} bad lines, {size / 1e6:.1f} MB "
            f"({args.format}); code: {args.code_dir}"
        )
        for engine in args.engine.split(","):
            url = fresh_database(engine, workdir, args.postgres_admin_url)
            try:
                result = {
                    "engine": engine,
                    "postings": args.postings,
                    "bad_lines": args.bad_lines,
                    "file_mb": round(size / 1e6, 1),
                }
                result["first"] = run_ingest(first, url, workdir / "data", args.code_dir)
                print(f"{engine}: ingest {json.dumps(result['first'])}", flush=True)
                if args.changed:
                    result["changed"] = run_ingest(second, url, workdir / "data", args.code_dir)
                    print(f"{engine}: every posting changed {json.dumps(result['changed'])}", flush=True)
                results.append(result)
            finally:
                drop_database(url, args.postgres_admin_url)
                if engine == "sqlite":
                    for leftover in workdir.glob("app.db*"):
                        leftover.unlink()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
