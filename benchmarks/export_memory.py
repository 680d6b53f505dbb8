"""Export at scale: peak memory and CPU of `pipeline export` over many enriched postings.

    python -m benchmarks.export_memory --postings 1000000 --engine sqlite [--format parquet]

For each engine: a fresh application database holding N generated postings, each with the three
outputs a run leaves (a summary, 5 skills with spans, 5 resolved concepts), inserted directly; then
`pipeline export` in a child process, whose peak resident memory (ru_maxrss from wait4) and CPU
seconds (user + sys) are reported, first over the first N/10 postings' worth of database (`--baseline`
fraction, same code, same chunk size) and then over all N: memory that stays flat between the two is
bounded by the chunk, not by the table. It measures and reports; it asserts nothing (the target for
1,000,000 postings is < 500 MB peak RSS, docs/outputs.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from appdb.database import dispose, get_engine, migrate
from appdb.models import UseCaseOutput
from benchmarks.ingest_memory import DEFAULT_POSTGRES_ADMIN_URL, drop_database, fresh_database
from plugins.postings.store.tables import Posting

_SKILLS = ("Python", "SQL", "Dagster", "data modelling", "Kubernetes")
BATCH = 20_000
T0 = datetime(2026, 11, 1)


def _outputs(key: str, index: int, at: datetime) -> list[dict[str, Any]]:
    skills = [
        {
            "mention": name,
            "kind": "knowledge",
            "evidence": name,
            "field": "description",
            "start": 10 * n,
            "end": 10 * n + len(name),
        }
        for n, name in enumerate(_SKILLS)
    ]
    entities = [
        {
            "mention": name,
            "source_mention": name,
            "kind": "knowledge",
            "concept_uri": f"http://data.europa.eu/esco/skill/bench-{(index + n) % 500}",
            "concept_label": f"{name} (concept {(index + n) % 500})",
            "confidence": 0.9,
            "stage": "linker",
        }
        for n, name in enumerate(_SKILLS)
    ]
    made = {
        "posting_summary": {
            "summary": f"Company {index % 1013} hires an engineer in City {index % 211} to build "
            "pipelines in Python and SQL; it asks for three years of experience."
        },
        "posting_skills": {"skills": skills, "ungrounded": []},
        "skill_entities": {"entities": entities, "matched": 5, "unmatched": 0},
    }
    return [
        {
            "use_case": use_case,
            "subject_key": key,
            "value": value,
            "model": "bench-model",
            "backend": "bench",
            "use_case_version": "1",
            "input_hash": "0" * 64,
            "subject_hash": "0" * 64,
            "run_id": "bench",
            "interaction_id": None,
            "created_at": at,
            "updated_at": at,
        }
        for use_case, value in made.items()
    ]


def seed(url: str, count: int) -> None:
    """N postings and their three outputs each, in batches of BATCH rows."""
    migrate(url)
    engine = get_engine(url)
    for start in range(0, count, BATCH):
        postings, outputs = [], []
        for index in range(start, min(start + BATCH, count)):
            key = f"bench-{index:07d}"
            at = T0 + timedelta(seconds=index)
            postings.append(
                {
                    "key": key,
                    "title": f"Engineer {index % 97}",
                    "company": f"Company {index % 1013}",
                    "location": f"City {index % 211}",
                    "description": f"Posting {index}: build pipelines in Python and SQL.",
                    "url": None,
                    "posted_at": at,
                    "content_hash": "0" * 64,
                    "ingested_at": at,
                    "updated_at": at,
                }
            )
            outputs += _outputs(key, index, at)
        with engine.begin() as connection:
            connection.execute(insert(Posting), postings)
            connection.execute(insert(UseCaseOutput), outputs)
    dispose(url)


def run_export(url: str, data_dir: Path, out: Path, fmt: str, since: str | None) -> dict[str, Any]:
    """`pipeline export` in a child process: exit code, wall and CPU seconds, peak RSS, its line."""
    env = {**os.environ, "PIPELINE_DATABASE_URL": url, "PIPELINE_DATA_DIR": str(data_dir)}
    command = [sys.executable, "-m", "pipeline_defs.cli.main", "export", "--format", fmt, "--out", str(out)]
    if since:
        command += ["--since", since]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    output, error = process.stdout.read(), process.stderr.read()  # type: ignore[union-attr]
    return {
        "exit_code": os.waitstatus_to_exitcode(status),
        "wall_seconds": round(seconds, 1),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: kilobytes
        "file_mb": round(out.stat().st_size / 1e6, 1) if out.exists() else None,
        "output": output.strip().splitlines()[-1:] or error.strip().splitlines()[-3:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=1_000_000)
    parser.add_argument("--engine", default="sqlite", help="sqlite, postgres or both (comma)")
    parser.add_argument("--format", choices=("parquet", "csv", "jsonl"), default="parquet")
    parser.add_argument("--baseline", type=float, default=0.1, help="the baseline's share of the postings")
    parser.add_argument("--postgres-admin-url", default=DEFAULT_POSTGRES_ADMIN_URL)
    parser.add_argument("--workdir", type=Path, help="where the database and files go (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="export-bench-", dir=args.workdir) as temp:
        workdir = Path(temp)
        for engine in args.engine.split(","):
            url = fresh_database(engine, workdir, args.postgres_admin_url)
            try:
                started = time.perf_counter()
                seed(url, args.postings)
                result: dict[str, Any] = {"engine": engine, "postings": args.postings, "format": args.format}
                result["seed_seconds"] = round(time.perf_counter() - started, 1)
                print(f"{engine}: seeded {args.postings:,} postings in {result['seed_seconds']}s", flush=True)
                # the baseline: the newest share of the postings (--since), same process, same chunks
                cut = T0 + timedelta(seconds=int(args.postings * (1 - args.baseline)))
                baseline = run_export(
                    url, workdir / "data", workdir / f"base.{args.format}", args.format, cut.isoformat()
                )
                print(f"{engine}: baseline ({args.baseline:.0%}) {json.dumps(baseline)}", flush=True)
                full = run_export(url, workdir / "data", workdir / f"all.{args.format}", args.format, None)
                print(f"{engine}: all {json.dumps(full)}", flush=True)
                result.update(baseline=baseline, all=full)
                result["rss_ratio"] = round(full["peak_rss_mb"] / baseline["peak_rss_mb"], 2)
                result["cpu_ratio"] = round(full["cpu_seconds"] / max(baseline["cpu_seconds"], 0.1), 2)
                print(
                    f"{engine}: peak RSS all/baseline {result['rss_ratio']}, CPU {result['cpu_ratio']}",
                    flush=True,
                )
                results.append(result)
            finally:
                dispose(url)
                drop_database(url, args.postgres_admin_url)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
