"""One measured configuration of the throughput benchmark, run in a process of its own.

    python -m benchmarks.throughput_harness '<config as JSON>'

prints the measurement as JSON on its last line. `pipeline_throughput` starts one such
process per configuration, so every figure (peak memory above all) belongs to that
configuration alone, and every configuration starts from a fresh application
database and a fresh DAGSTER_HOME (on PostgreSQL: fresh databases, dropped afterwards).

Two modes:
- `raw`: the physical limit. The same prompts the pipeline sends (rendered by the
  pipeline's own code from the same postings), straight to the backend in a plain
  loop (with `in_flight` > 1, a pool of that many threads), model loaded beforehand.
- `pipeline`: the discovery sensor of the LLM work group is evaluated (the real
  sensor function, as the daemon would), its dynamic-partition requests applied and
  each run it requests executed in process, tick after tick until it reports no work.
"""

from __future__ import annotations

import cProfile
import json
import os
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg2
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from benchmarks.stage_cpu import StageCpu, timed_use_cases
from sensors.discovery_sensor import build_discovery_sensor

POSTGRES_ADMIN_ENV = "PIPELINE_TEST_POSTGRES_URL"
RETRY_DEFERRED_SECONDS = 24 * 3600
DEFAULT_POSTGRES_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass
class RunConfig:
    """What one worker measures."""

    mode: str  # raw | pipeline
    backend: str  # embedded | simulated-ollama
    postings: int
    storage: str = "sqlite"  # Dagster storage: sqlite | postgres
    app_db: str = "sqlite"  # application database: sqlite | postgres
    in_flight: int = 1
    batch_size: int | None = None  # None: the use cases' declared batch size
    ollama_host: str | None = None
    shared: str | None = None  # the shared data folder (SkillSpan's postings)
    posting_set: str = "skillspan"  # skillspan: real postings, cycled and made unique; tiny: 8-word ones
    postings_file: str | None = None  # a user's own postings (JSON lines), cycled and made unique
    postgres_admin_url: str = DEFAULT_POSTGRES_ADMIN_URL
    profile_path: str | None = None  # write cProfile stats of the pipeline phase here
    env: dict[str, str] = field(default_factory=dict)  # extra environment (e.g. DAGSTER_EVENT_BATCH_SIZE)


# --- postings ----------------------------------------------------------------------------------


def config_postings(config: RunConfig) -> list[dict[str, Any]]:
    """The configuration's postings (`benchmarks/skillspan_postings.py`): SkillSpan's, a user's file or
    tiny ones, `config.postings` of them, each unique."""
    from benchmarks.skillspan_postings import benchmark_postings

    file = Path(config.postings_file) if config.postings_file else None
    return benchmark_postings(config.postings, config.posting_set, file, config.shared)


# --- fresh databases ---------------------------------------------------------------------------


@contextmanager
def fresh_postgres_database(admin_url: str, purpose: str) -> Iterator[str]:
    """A new, empty PostgreSQL database (psycopg2 URL), dropped afterwards."""
    name = f"bench_{purpose}_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    with admin.cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{name}"')
    url = make_url(admin_url).set(drivername="postgresql+psycopg2", database=name)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@dataclass
class Environment:
    settings: Any
    app_db_url: str


@contextmanager
def fresh_environment(config: RunConfig, workdir: Path) -> Iterator[Environment]:
    """A fresh app database and DAGSTER_HOME (with its dagster.yaml) for one configuration."""
    from appdb.database import dispose
    from pipeline_defs.settings import Settings

    with (
        _maybe_postgres(config.app_db == "postgres", config, "app") as pg_app,
        _maybe_postgres(config.storage == "postgres", config, "dagster") as pg_dagster,
    ):
        app_db_url = pg_app or f"sqlite:///{workdir / 'app.db'}"
        settings = replace(
            Settings.from_env(),
            data_dir=workdir,
            database_url=app_db_url,
            llm_backend="embedded" if config.backend == "embedded" else "ollama",
            ollama_host=config.ollama_host,
            batch_size_override=config.batch_size,
            dagster_home=workdir / "dagster_home",
            dagster_postgres_url=pg_dagster,
            # as a deployment gets by default: stock storages on the embedded model, pooled on Ollama
            dagster_storage=os.environ.get("PIPELINE_DAGSTER_STORAGE")
            or ("stock" if config.backend == "embedded" else "pooled"),
        )
        try:
            yield Environment(settings, app_db_url)
        finally:
            dispose(app_db_url)


@contextmanager
def _maybe_postgres(wanted: bool, config: RunConfig, purpose: str) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    with fresh_postgres_database(config.postgres_admin_url, purpose) as url:
        yield url


def ensure_model_indexes(url: str) -> list[str]:
    """Create the indexes `appdb/models.py` declares that the migrations do not create yet.

    The models may declare an index ahead of the migration that adds it; the benchmark measures
    the schema as it will be, and reports which indexes it added.
    """
    from sqlalchemy import inspect

    from appdb.database import get_engine, migrate
    from appdb.models import Base

    migrate(url)
    engine = get_engine(url)
    created = []
    with engine.begin() as connection:
        inspector = inspect(connection)
        for table in Base.metadata.sorted_tables:
            existing = {index["name"] for index in inspector.get_indexes(table.name)}
            for index in sorted(table.indexes, key=lambda index: index.name or ""):
                if index.name not in existing:
                    index.create(connection)
                    created.append(index.name)
    return created


# --- instrumentation ---------------------------------------------------------------------------


class LoadCounter:
    """Counts model loads by patching the backend class's `_load` (every backend loads through it)."""

    def __init__(self, resource_class: type) -> None:
        self.loads: list[str] = []
        original = resource_class._load

        def counting_load(instance: Any, model: str) -> Any:
            self.loads.append(model)
            return original(instance, model)

        resource_class._load = counting_load


class Timers:
    """Wall and CPU time spent inside chosen functions (wrapped in place), for the overhead breakdown.

    CPU time is the calling thread's (`time.thread_time`): the engine calls these on one thread.
    """

    def __init__(self) -> None:
        self.figures: dict[str, dict[str, float]] = {}
        self.intervals: dict[str, list[tuple[float, float]]] = {}

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started, cpu_started = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                figures = self.figures.setdefault(label, {"seconds": 0.0, "cpu_seconds": 0.0, "calls": 0})
                figures["seconds"] += time.perf_counter() - started
                figures["cpu_seconds"] += time.thread_time() - cpu_started
                figures["calls"] += 1
                self.intervals.setdefault(label, []).append((started, time.perf_counter()))

        setattr(owner, name, timed)

    def report(self) -> dict[str, dict[str, float]]:
        return self.figures


def instrument() -> Timers:
    """Time Dagster's event writes, the app-database work per posting, run creation and sensor ticks."""
    from dagster import DagsterInstance

    import assets.single_call as single_call_module
    from appdb import claims, discovery
    from resources.llm import LLMResource

    timers = Timers()
    timers.wrap(DagsterInstance, "handle_new_event", "dagster_event_writes")
    timers.wrap(DagsterInstance, "create_run", "dagster run creation (includes its planned events)")
    timers.wrap(single_call_module, "_store_group", "store_group (parse, validate, app db)")
    timers.wrap(LLMResource, "generate", "LLM calls")
    timers.wrap(discovery, "find_pending_work", "app db: find_pending_work")
    timers.wrap(claims, "claim_items", "app db: claim_items")
    return timers


def build_llm(config: RunConfig, settings: Any) -> Any:
    from resources.embedded_backend import EmbeddedLLMResource
    from resources.ollama_backend import OllamaResource

    if config.backend == "embedded":
        return EmbeddedLLMResource(max_in_flight=config.in_flight)
    return OllamaResource(host=settings.ollama_host, max_in_flight=config.in_flight)


def ingest(app_db_url: str, postings: Sequence[dict[str, str]], workdir: Path) -> list[str]:
    from appdb.database import session_scope
    from plugins.postings.store.ingest import ingest_files

    path = workdir / "postings.jsonl"
    path.write_text("".join(json.dumps(posting) + "\n" for posting in postings), encoding="utf-8")
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    if report.rejected:
        raise RuntimeError(f"benchmark postings rejected: {report.rejected[:3]}")
    return [posting["key"] for posting in postings]


def llm_group(groups: Sequence[Any]) -> Any:
    [group] = [group for group in groups if group.model is not None]
    return group


def _cpu_seconds() -> float:
    """CPU time of this process (user + system): less sensitive to a busy machine than wall time."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- the two modes -----------------------------------------------------------------------------


def measure_raw(config: RunConfig, env: Environment, workdir: Path) -> dict[str, Any]:
    """The same prompts as the pipeline, straight to the backend: the physical limit."""
    from appdb import inputs
    from appdb.database import session_scope
    from assets.factory import build_work_groups
    from pipeline_defs.wiring import build_use_cases

    keys = ingest(env.app_db_url, config_postings(config), workdir)
    ensure_model_indexes(env.app_db_url)
    group = llm_group(build_work_groups(build_use_cases(env.settings)))
    llm = build_llm(config, env.settings)
    calls: list[tuple[Any, Any]] = []
    with session_scope(env.app_db_url) as session:
        for start in range(0, len(keys), group.batch_size):  # in the order the runs process them
            batch = keys[start : start + group.batch_size]
            for member in group.members:
                use_case = member.use_case
                _, values = inputs.load_inputs(
                    session, use_case.subject.table, batch, use_case.subject_variables, use_case.upstream
                )
                references = inputs.reference_hashes(session, use_case.reference_inputs)
                style = llm.resolve_style(use_case.model, use_case.prompt_style)  # as the runs send them
                for key in batch:
                    calls.append((use_case, use_case.prepare(values[key], references, style)))
    started = time.perf_counter()
    llm.ensure_loaded(group.model)
    load_seconds = time.perf_counter() - started

    def call(item: tuple[Any, Any]) -> float:
        use_case, prepared = item
        generation = llm.generate(
            use_case.model,
            prepared.prompt,
            prepared.system_prompt,
            dict(use_case.grammar_schema),
            dict(use_case.options),
            prepared.messages,
        )
        return generation.latency_ms

    cpu_started = _cpu_seconds()
    started = time.perf_counter()
    if config.in_flight <= 1:
        latencies = [call(item) for item in calls]
    else:
        with ThreadPoolExecutor(max_workers=config.in_flight) as pool:
            latencies = list(pool.map(call, calls))
    seconds = time.perf_counter() - started
    return {
        "postings": len(keys),
        "calls": len(calls),
        "seconds": seconds,
        "cpu_seconds": _cpu_seconds() - cpu_started,
        "model_load_seconds": load_seconds,
        "llm_seconds": sum(latencies) / 1000,
        "assets": len(group.members),
    }


def measure_pipeline(config: RunConfig, env: Environment, workdir: Path) -> dict[str, Any]:
    """Sensor ticks and the runs they request, until no work remains."""
    from dagster import DagsterInstance, SensorResult, SkipReason, build_sensor_context

    from appdb.database import session_scope
    from appdb.models import Interaction, WorkItem
    from appdb.retry_policy import RetryPolicy
    from assets.factory import build_work_groups
    from domain.quality.judge_rubric import JUDGE_SUFFIX
    from pipeline_defs.catalog import declared_use_cases
    from pipeline_defs.cli.in_process_runs import QUIET_LOGS
    from pipeline_defs.definitions import build_definitions
    from pipeline_defs.runtime.dagster_home import ensure_dagster_home
    from pipeline_defs.wiring import build_use_cases
    from resources.app_database import AppDatabase

    keys = ingest(env.app_db_url, config_postings(config), workdir)
    indexes_added = ensure_model_indexes(env.app_db_url)
    # A failed item is retried after a backoff; the raw loop calls each prompt once, so retries are
    # pushed past the end of the benchmark and both sides make the same calls (failures are counted).
    deferred = RetryPolicy(
        backoff_base_seconds=RETRY_DEFERRED_SECONDS, backoff_max_seconds=RETRY_DEFERRED_SECONDS
    )
    ensure_dagster_home(env.settings)
    stages = StageCpu()
    use_cases = timed_use_cases(
        [replace(use_case, retry=deferred) for use_case in declared_use_cases(env.settings)], stages
    )
    built = build_use_cases(env.settings, use_cases)
    groups = build_work_groups(built)
    llm = build_llm(config, env.settings)
    counter = LoadCounter(type(llm))
    timers = instrument()
    defs = build_definitions(env.settings, built=built, groups=groups, llm=llm)
    group = llm_group(groups)
    job = defs.resolve_job_def(group.job.name)
    app_db = AppDatabase(url=env.app_db_url)
    instance = DagsterInstance.get()
    runs: list[dict[str, Any]] = []
    ticks: list[float] = []
    cursor = None
    sensor = build_discovery_sensor(group)
    profiler = cProfile.Profile() if config.profile_path else None
    timing = ExitStack()
    timing.enter_context(stages.faithfulness_timed())  # the summaries' checks, while the runs go
    try:
        if profiler:
            profiler.enable()
        cpu_started, thread_cpu_started = _cpu_seconds(), time.thread_time()
        started = time.perf_counter()
        while True:
            tick_started = time.perf_counter()
            context = build_sensor_context(instance=instance, cursor=cursor, resources={"app_db": app_db})
            result = sensor(context)
            ticks.append(time.perf_counter() - tick_started)
            if isinstance(result, SkipReason) or result is None:
                break
            assert isinstance(result, SensorResult)
            cursor = result.cursor or context.cursor
            for request in result.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            if not result.run_requests:
                continue
            for request in result.run_requests:
                loads_before = len(counter.loads)
                run_started = time.perf_counter()
                outcome = job.execute_in_process(
                    instance=instance, tags=request.tags, run_config=QUIET_LOGS, raise_on_error=False
                )
                runs.append(
                    {
                        "started": run_started,
                        "ended": time.perf_counter(),
                        "run_id": outcome.run_id,
                        "success": outcome.success,
                        "seconds": time.perf_counter() - run_started,
                        "model_loads": len(counter.loads) - loads_before,
                        "loaded_models": counter.loads[loads_before:],
                    }
                )
        seconds = time.perf_counter() - started
        cpu_seconds = _cpu_seconds() - cpu_started
        main_thread_cpu_seconds = time.thread_time() - thread_cpu_started
    finally:
        timing.close()
        if profiler:
            profiler.disable()
            profiler.dump_stats(config.profile_path)
        instance.dispose()
    with session_scope(env.app_db_url) as session:
        llm_ms, calls, item_errors = session.execute(
            select(
                func.coalesce(func.sum(Interaction.latency_ms), 0.0),
                func.count(Interaction.id),
                func.count(Interaction.id).filter(Interaction.status != "ok"),
            ).where(Interaction.backend != "script")
        ).one()
        # The gym's judge grades a sample of each run's outputs: LLM work the raw loop does not do.
        judge_ms, judge_calls = session.execute(
            select(func.coalesce(func.sum(Interaction.latency_ms), 0.0), func.count(Interaction.id)).where(
                Interaction.use_case.endswith(JUDGE_SUFFIX)
            )
        ).one()
        statuses = dict(
            session.execute(select(WorkItem.status, func.count()).group_by(WorkItem.status)).all()
        )
    per_run_loads = [run["model_loads"] for run in runs]
    return {
        "postings": len(keys),
        "assets": len(group.members),
        "use_cases": [member.use_case.name for member in group.members],
        "batch_size": group.batch_size,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "stage_cpu_seconds": stages.seconds,
        "main_thread_cpu_seconds": main_thread_cpu_seconds,
        "llm_seconds": llm_ms / 1000,
        "judge_llm_seconds": judge_ms / 1000,
        "judge_calls": judge_calls,
        "calls": calls,
        "item_errors": item_errors,
        "runs": len(runs),
        "failed_runs": sum(1 for run in runs if not run["success"]),
        "model_loads": len(counter.loads),
        "model_loads_per_run": {"min": min(per_run_loads, default=0), "max": max(per_run_loads, default=0)},
        "max_loads_of_one_model_in_a_run": max(
            (
                max(run["loaded_models"].count(m) for m in set(run["loaded_models"]))
                for run in runs
                if run["loaded_models"]
            ),
            default=0,
        ),
        "sensor_ticks": len(ticks),
        "sensor_tick_seconds": ticks,
        "run_seconds": [run["seconds"] for run in runs],
        "work_items": statuses,
        "indexes_added_beyond_migrations": indexes_added,
        "breakdown": timers.report(),
        "backend_idle": backend_idle(runs, timers.intervals.get("LLM calls", [])),
    }


def backend_idle(runs: list[dict[str, Any]], calls: list[tuple[float, float]]) -> dict[str, float]:
    """Where the backend waited during runs: before the first call, between calls, after the last.

    With requests overlapping (several in flight) only the time with none in flight counts.
    """
    head = tail = between = 0.0
    for run in runs:
        inside = sorted((start, end) for start, end in calls if run["started"] <= start <= run["ended"])
        if not inside:
            continue
        head += inside[0][0] - run["started"]
        busy_until = inside[0][1]
        for start, end in inside[1:]:
            between += max(0.0, start - busy_until)
            busy_until = max(busy_until, end)
        tail += run["ended"] - busy_until
    return {"before_first_call": head, "between_calls": between, "after_last_call": tail}


def measure(config: RunConfig) -> dict[str, Any]:
    os.environ.update(config.env)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        workdir = Path(tmp)
        with fresh_environment(config, workdir) as env:
            figures = (measure_raw if config.mode == "raw" else measure_pipeline)(config, env, workdir)
    return {
        "config": asdict(config),
        **figures,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = RunConfig(**json.loads(argv[0]))
    print(json.dumps(measure(config)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
