"""Discovery at scale: a sensor tick with 100,000 postings in the application database.

    python -m benchmarks.discovery_scale '<config as JSON>'   (one database engine per process)

A fresh application database gets `postings` postings (bulk insert), of which all but
`pending_share` have current outputs of every use case (and `done` work items), plus a
loaded taxonomy; the Dagster instance (fresh DAGSTER_HOME, same engine) already knows
the done postings as partitions. Then each work group's real sensor function is
evaluated (`build_sensor_context`), three times:

- `first`: no cursor, the pending postings are new partitions (registers them, requests runs);
- `steady`: the partitions known, the cursor of the first tick, the pending work still there
  (what every 30 s tick costs while a backlog is being worked off);
- `idle`: nothing pending and nothing changed since the last tick (the cheap path).

Every SQL statement the first tick sends to the application database (the first tick always
runs every query) is captured with its time, and its query plan is recorded (SQLite `EXPLAIN
QUERY PLAN`, PostgreSQL `EXPLAIN (ANALYZE, BUFFERS)` for SELECTs, `EXPLAIN` for writes), so
scans show up.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert, select

from benchmarks.throughput_harness import (
    DEFAULT_POSTGRES_ADMIN_URL,
    ensure_model_indexes,
    fresh_postgres_database,
)
from sensors.discovery_sensor import build_discovery_sensor

_INSERT_CHUNK = 5000


@dataclass
class ScaleConfig:
    engine: str = "sqlite"  # sqlite | postgres (app database and Dagster storage alike)
    postings: int = 100_000
    pending_share: float = 0.10
    repeats: int = 3
    postgres_admin_url: str = DEFAULT_POSTGRES_ADMIN_URL
    # Real posting texts (SkillSpan's, about 4.5 kB each, cycled) so table scans read what they
    # would in production; None: one short line per posting.
    text_data_dir: str | None = "default"


def posting_texts(config: ScaleConfig) -> list[str]:
    """The SkillSpan postings' texts from the shared data folder (none when not asked for)."""
    if config.text_data_dir is None:
        return []
    from benchmarks.report import shared_data_dir
    from benchmarks.skills_extraction import load_postings

    folder = shared_data_dir(None if config.text_data_dir == "default" else config.text_data_dir)
    postings = [
        posting
        for split in ("train", "dev")
        for posting in load_postings(folder / "skillspan" / f"{split}.json")
    ]
    return [" ".join(posting.sentences) for posting in postings]


def populate(url: str, config: ScaleConfig, use_cases: list[Any]) -> tuple[list[str], list[str], list[str]]:
    """Bulk insert the postings, their outputs and work items; returns (done keys, pending keys,
    indexes the models declare ahead of the migrations, created here)."""
    from appdb.database import get_engine, migrate
    from appdb.models import ReferenceData, UseCaseOutput, WorkItem, utcnow
    from plugins.postings.store.ingest import content_hash
    from plugins.postings.store.tables import Posting

    migrate(url)
    indexes_added = ensure_model_indexes(url)
    engine = get_engine(url)
    now = utcnow()
    earlier = now - timedelta(hours=1)
    pending_every = round(1 / config.pending_share) if config.pending_share else 0
    texts = posting_texts(config)
    done_keys, pending_keys = [], []
    with engine.begin() as connection:
        connection.execute(
            insert(ReferenceData),
            [
                {
                    "name": "skills_taxonomy",
                    "content_hash": "x",
                    "source": "bench",
                    "row_count": 0,
                    "updated_at": earlier,
                }
            ],
        )
        for start in range(0, config.postings, _INSERT_CHUNK):
            postings, outputs, items = [], [], []
            for index in range(start, min(start + _INSERT_CHUNK, config.postings)):
                key = f"scale-{index:06d}"
                fields = {
                    "key": key,
                    "title": f"Job {index}",
                    "description": f"Posting number {index}: "
                    + (texts[index % len(texts)] if texts else "build things with Python and SQL."),
                    "company": None,
                    "location": None,
                    "url": None,
                    "posted_at": None,
                }
                digest = content_hash(fields)
                postings.append(
                    {**fields, "content_hash": digest, "ingested_at": earlier, "updated_at": earlier}
                )
                if pending_every and index % pending_every == pending_every - 1:
                    pending_keys.append(key)
                    continue
                done_keys.append(key)
                for use_case in use_cases:
                    outputs.append(_current_output(use_case, use_cases, key, digest, earlier))
                    items.append(
                        {
                            "use_case": use_case.name,
                            "subject_key": key,
                            "status": "done",
                            "attempts": 0,
                            "created_at": earlier,
                            "updated_at": earlier,
                        }
                    )
            connection.execute(insert(Posting), postings)
            if outputs:
                connection.execute(insert(UseCaseOutput), outputs)
                connection.execute(insert(WorkItem), items)
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql("ANALYZE")
    else:
        with engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE")
    return done_keys, pending_keys, indexes_added


class StatementLog:
    """Every statement sent to one engine while active, with its time."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.entries: list[dict[str, Any]] = []
        self.active = False
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _before(self, conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        conn.info["bench_started"] = time.perf_counter()

    def _after(self, conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        if self.active:
            seconds = time.perf_counter() - conn.info.pop("bench_started", time.perf_counter())
            self.entries.append({"statement": statement, "parameters": parameters, "seconds": seconds})

    @contextmanager
    def capture(self) -> Iterator[list[dict[str, Any]]]:
        self.entries = []
        self.active = True
        try:
            yield self.entries
        finally:
            self.active = False


def explain_all(engine: Any, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The query plan of each captured statement, replayed in order on one connection (so a
    `SET LOCAL` before a query shapes its plan as it did in the tick), and for a SELECT the
    seconds it takes to run and fetch every row (the captured time misses the fetch, where SQLite
    does most of its work). Rolled back afterwards."""
    raw = engine.raw_connection()
    plans = []
    try:
        cursor = raw.cursor()
        for entry in entries:
            statement, parameters = entry["statement"], entry["parameters"]
            verb = statement.lstrip().split(None, 1)[0].upper()
            if verb == "SET":  # a planner setting for the statements that follow: apply it
                cursor.execute(statement, parameters)
                plans.append({"sql": statement, "seconds": round(entry["seconds"], 4), "plan": []})
                continue
            seconds = entry["seconds"]
            if verb == "SELECT":
                started = time.perf_counter()
                cursor.execute(statement, parameters)
                cursor.fetchall()
                seconds = time.perf_counter() - started
            plan = _plan(cursor, engine.dialect.name, statement, parameters, analyze=verb == "SELECT")
            plans.append({"sql": statement, "seconds": round(seconds, 4), "plan": plan})
    finally:
        raw.rollback()
        raw.close()
    return plans


def _plan(cursor: Any, dialect: str, statement: str, parameters: Any, *, analyze: bool) -> list[str]:
    """SQLite's `EXPLAIN QUERY PLAN` as an indented tree; PostgreSQL's `EXPLAIN`, run (ANALYZE) when
    `analyze`."""
    if dialect == "sqlite":
        cursor.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)
        depth = {0: 0}
        lines = []
        for node, parent, _, detail in cursor.fetchall():
            depth[node] = depth.get(parent, 0) + 1
            lines.append("  " * (depth[node] - 1) + detail)
        return lines
    prefix = "EXPLAIN (ANALYZE, BUFFERS) " if analyze else "EXPLAIN "
    cursor.execute(prefix + statement, parameters)
    return [row[0] for row in cursor.fetchall()]


def measure(config: ScaleConfig) -> dict[str, Any]:
    from dagster import DagsterInstance, SensorResult, build_sensor_context

    from appdb.database import dispose, get_engine
    from assets.factory import build_work_groups
    from pipeline_defs.runtime.dagster_home import ensure_dagster_home
    from pipeline_defs.settings import Settings
    from pipeline_defs.wiring import build_use_cases
    from resources.app_database import AppDatabase

    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="pipeline-scale-") as tmp,
        _databases(config, Path(tmp)) as (
            app_url,
            dagster_url,
        ),
    ):
        workdir = Path(tmp)
        settings = replace(
            Settings.from_env(),
            data_dir=workdir,
            database_url=app_url,
            dagster_home=workdir / "dagster_home",
            dagster_postgres_url=dagster_url,
        )
        groups = build_work_groups(build_use_cases(settings))
        use_cases = [member.use_case for group in groups for member in group.members]
        started = time.perf_counter()
        done, pending, indexes_added = populate(app_url, config, use_cases)
        populate_seconds = time.perf_counter() - started
        ensure_dagster_home(settings)
        instance = DagsterInstance.get()
        started = time.perf_counter()
        instance.add_dynamic_partitions("postings", done)
        partitions_seconds = time.perf_counter() - started
        engine = get_engine(app_url)
        log = StatementLog(engine)
        app_db = AppDatabase(url=app_url)
        results: dict[str, Any] = {}
        try:
            sensors = {group.name: build_discovery_sensor(group) for group in groups}
            for group in groups:
                name = sensors[group.name].name
                results[name] = figures = {}

                first, seconds, statements, cursor = _tick(sensors[group.name], instance, app_db, None, log)
                figures["first"] = _summary(first, [seconds], statements)
                after = (first.cursor if isinstance(first, SensorResult) else None) or cursor
                found = json.loads(after)["pending"] if after else None
                figures["pending_found"] = found
                # The seeded outputs must count as current, or everything is pending. (The script
                # group's postings wait for their upstream skills, so it finds none.)
                if group.model is not None and found != len(pending):
                    raise RuntimeError(
                        f"{name}: the sensor found {found} postings pending, the benchmark seeded "
                        f"{len(pending)}: the seeded outputs no longer match what discovery calls current"
                    )
                # the first tick always runs every query (steady ticks may take the no-change path)
                figures["first"]["plans"] = plans = explain_all(engine, statements)
                figures["first"]["sql_seconds"] = sum(plan["seconds"] for plan in plans)  # with fetching
                if isinstance(first, SensorResult):
                    cursor = first.cursor or cursor
                    for request in first.dynamic_partitions_requests or []:
                        instance.add_dynamic_partitions(
                            request.partitions_def_name, list(request.partition_keys)
                        )
                steady_times = []
                for _ in range(config.repeats):
                    steady, seconds, statements, _ = _tick(sensors[group.name], instance, app_db, cursor, log)
                    steady_times.append(seconds)
                figures["steady"] = _summary(steady, steady_times, statements)
            # idle: everything current (pending postings given outputs), then two ticks per sensor
            _complete_all(app_url, pending, use_cases)
            for group in groups:
                figures = results[sensors[group.name].name]
                context = build_sensor_context(instance=instance, cursor=None, resources={"app_db": app_db})
                sensors[group.name](context)
                idle_times = []
                for _ in range(config.repeats):
                    idle, seconds, statements, _ = _tick(
                        sensors[group.name], instance, app_db, context.cursor, log
                    )
                    idle_times.append(seconds)
                figures["idle"] = _summary(idle, idle_times, statements)
        finally:
            instance.dispose()
            dispose(app_url)
    return {
        "config": asdict(config),
        "pending": len(pending),
        "indexes_added_beyond_migrations": indexes_added,
        "populate_seconds": populate_seconds,
        "register_partitions_seconds": partitions_seconds,
        "sensors": results,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }


def _tick(sensor: Any, instance: Any, app_db: Any, cursor: str | None, log: StatementLog) -> tuple:
    """Evaluate a group's discovery sensor once: (result, seconds, statements sent, cursor after)."""
    from dagster import build_sensor_context

    context = build_sensor_context(instance=instance, cursor=cursor, resources={"app_db": app_db})
    with log.capture() as statements:
        started = time.perf_counter()
        result = sensor(context)
        seconds = time.perf_counter() - started
    return result, seconds, list(statements), context.cursor


def _current_output(use_case: Any, use_cases: list[Any], key: str, subject_hash: str, at: Any) -> dict:
    """An output row that discovery counts as current (same version, model and posting content)."""
    from domain.language.declaration import model_label

    return {
        "use_case": use_case.name,
        "subject_key": key,
        "value": {},
        "model": model_label(use_case),  # part of an output's identity
        "backend": "bench",
        "use_case_version": use_case.version,
        "input_hash": "x",
        "subject_hash": subject_hash,
        "run_id": "bench",
        "interaction_id": None,
        "created_at": at,
        # upstream first, so no output is older than what it read
        "updated_at": at + timedelta(seconds=use_cases.index(use_case)),
    }


def _complete_all(url: str, keys: list[str], use_cases: list[Any]) -> None:
    """Give the pending postings current outputs, so the next ticks find nothing to do."""
    from appdb.database import get_engine
    from appdb.models import UseCaseOutput, utcnow
    from plugins.postings.store.tables import Posting

    engine = get_engine(url)
    now = utcnow()
    with engine.begin() as connection:
        hashes = dict(connection.execute(select(Posting.key, Posting.content_hash)).all())
        for start in range(0, len(keys), _INSERT_CHUNK):
            chunk = keys[start : start + _INSERT_CHUNK]
            connection.execute(
                insert(UseCaseOutput),
                [
                    _current_output(use_case, use_cases, key, hashes[key], now)
                    for key in chunk
                    for use_case in use_cases
                ],
            )


def _summary(result: Any, times: list[float], statements: list[dict[str, Any]]) -> dict[str, Any]:
    from dagster import SensorResult, SkipReason

    if isinstance(result, SensorResult):
        outcome = f"{len(result.run_requests or [])} run requests"
    elif isinstance(result, SkipReason):
        outcome = f"skipped: {result.skip_message}"
    else:
        outcome = repr(result)
    return {
        "seconds": times,
        "median_seconds": statistics.median(times),
        "outcome": outcome,
        "statements": len(statements),
        "sql_seconds": sum(entry["seconds"] for entry in statements),
    }


@contextmanager
def _databases(config: ScaleConfig, workdir: Path) -> Iterator[tuple[str, str | None]]:
    if config.engine == "sqlite":
        yield f"sqlite:///{workdir / 'app.db'}", None
        return
    with (
        fresh_postgres_database(config.postgres_admin_url, "app") as app,
        fresh_postgres_database(config.postgres_admin_url, "dagster") as dagster,
    ):
        yield app, dagster


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = ScaleConfig(**json.loads(argv[0])) if argv else ScaleConfig()
    print(json.dumps(measure(config), default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
