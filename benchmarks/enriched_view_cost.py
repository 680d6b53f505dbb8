"""What reading the `enriched_postings` SQL view costs, with the view of migration 0013 (each skill and
concept built from the table's fields) against migration 0011's (the stored lists as they are).

    python -m benchmarks.enriched_view_cost --postings 20000 --engine sqlite,postgres --rounds 3

For each engine: a fresh application database with N postings and their three outputs each (as
`benchmarks.export_memory` seeds them: 5 skills, 5 concepts a posting), then `SELECT * FROM
enriched_postings`, every row fetched, alternating the two views (Alembic down to 0012 and up to
0013 between reads) `--rounds` times. CPU seconds are the reader's process (SQLite runs in it) plus,
on PostgreSQL, the server backend that ran the query (`/proc/<pg_backend_pid()>/stat`, the server on
this machine). It measures and reports; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from alembic import command
from sqlalchemy import text

from appdb.database import alembic_config, dispose, get_engine
from benchmarks.export_memory import seed
from benchmarks.ingest_memory import DEFAULT_POSTGRES_ADMIN_URL, drop_database, fresh_database

VIEWS = {"0013": "head", "0011": "0012"}  # the view's migration -> the revision that has it
TICKS = os.sysconf("SC_CLK_TCK")


def _backend_cpu(pid: int | None) -> float:
    """A local PostgreSQL backend's CPU seconds so far (utime + stime); 0 for SQLite (no backend)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _set_view(url: str, revision: str) -> None:
    config = alembic_config(url)
    with get_engine(url).begin() as connection:
        config.attributes["connection"] = connection
        current = connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        if revision == "head":
            command.upgrade(config, "head")
        elif current != revision:
            command.downgrade(config, revision)


def read_view(url: str) -> dict[str, Any]:
    """Every row of the view: rows, wall seconds, CPU seconds of the reader and of the server backend."""
    with get_engine(url).connect() as connection:
        postgres = connection.dialect.name == "postgresql"
        backend = connection.execute(text("SELECT pg_backend_pid()")).scalar_one() if postgres else None
        cpu, server, wall = time.process_time(), _backend_cpu(backend), time.perf_counter()
        rows = len(connection.execute(text("SELECT * FROM enriched_postings")).all())
        wall = time.perf_counter() - wall
        server = _backend_cpu(backend) - server
        cpu = time.process_time() - cpu
    return {
        "rows": rows,
        "wall_seconds": round(wall, 2),
        "reader_cpu_seconds": round(cpu, 2),
        "server_cpu_seconds": round(server, 2),
        "cpu_seconds": round(cpu + server, 2),
    }


def measure(engine: str, postings: int, rounds: int, admin_url: str, workdir: Path) -> list[dict[str, Any]]:
    url = fresh_database(engine, workdir, admin_url)
    try:
        seed(url, postings)
        results = []
        for round_number in range(1, rounds + 1):
            for view, revision in VIEWS.items():
                _set_view(url, revision)
                dispose(url)
                results.append({"engine": engine, "round": round_number, "view": view, **read_view(url)})
                print(json.dumps(results[-1]), flush=True)
        return results
    finally:
        dispose(url)
        drop_database(url, admin_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=20_000)
    parser.add_argument("--engine", default="sqlite,postgres", help="sqlite, postgres or both (comma)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres-admin-url", default=DEFAULT_POSTGRES_ADMIN_URL)
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for engine in args.engine.split(","):
            results += measure(
                engine.strip(), args.postings, args.rounds, args.postgres_admin_url, Path(folder)
            )
    print("\n| engine | view | CPU s (reader + server), each round | wall s, each round |\n|---|---|---|---|")
    for engine in dict.fromkeys(row["engine"] for row in results):
        for view in VIEWS:
            mine = [row for row in results if row["engine"] == engine and row["view"] == view]
            cpu = ", ".join(f"{row['cpu_seconds']:.2f}" for row in mine)
            wall = ", ".join(f"{row['wall_seconds']:.2f}" for row in mine)
            print(f"| {engine} ({mine[0]['rows']:,} postings) | {view} | {cpu} | {wall} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
