"""Three runs starting at once on a fresh PostgreSQL Dagster storage: none fails on the `llm` pool's
limit row (issue 39, item 5); `pipeline ui` writes the row before it starts anything, also on a home
set up before against another database. A run's first step writes that row when it finds none
(`InstanceConcurrencyContext.claim`: no pool info and a default limit, then
`initialize_concurrency_limit_to_default`); three at once each inserted it and two failed
(`UniqueViolation ... concurrency_limits_concurrency_key_key`, then `InFailedSqlTransaction`). The
home's set-up now writes the row once, so no run has to."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

from appdb.database import dispose, session_scope
from appdb.models import UseCaseOutput
from pipeline_defs.cli.main import main
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import PROJECT_ROOT, Settings
from tests.support.fake_ollama_server import FakeOllamaServer
from tests.support.live_pipeline import free_port, make_postings
from tests.support.postings import seed_postings

pytestmark = pytest.mark.postgres
RUNS_AT_ONCE = 3


def _first_step_claims_the_pool(home: str, start: multiprocessing.synchronize.Barrier, out) -> None:  # noqa: ANN001
    """What a run's first LLM step does with the pool, in a process of its own, at the same moment."""
    os.environ["DAGSTER_HOME"] = home
    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        start.wait()
        try:
            limits = {pool.name: pool for pool in storage.get_pool_limits()}
            if "llm" not in limits and instance.global_op_concurrency_default_limit is not None:
                storage.initialize_concurrency_limit_to_default("llm")  # as Dagster's claim does
            status = storage.claim_concurrency_slot("llm", str(uuid.uuid4()), "posting_summary")
            out.put(f"claimed: {status.slot_status.value}")
        except Exception as error:  # noqa: BLE001 - reported to the test
            out.put(f"failed: {type(error).__name__}: {str(error).splitlines()[0]}")


def _first_step_takes_a_host_turn(home: str, start: multiprocessing.synchronize.Barrier, out) -> None:  # noqa: ANN001
    """What a run's first step at a host does with the host's pool, at the same moment as others."""
    os.environ["DAGSTER_HOME"] = home
    from dagster import DagsterInstance

    from assets.host_turns import ensure_host_pool, host_pool

    with DagsterInstance.get() as instance:
        storage, pool = instance.event_log_storage, host_pool("http://127.0.0.1:11434")
        start.wait()
        try:
            ensure_host_pool(storage, pool)
            status = storage.claim_concurrency_slot(pool, str(uuid.uuid4()), "posting_summary")
            out.put(f"claimed: {status.slot_status.value}")
        except Exception as error:  # noqa: BLE001 - reported to the test
            out.put(f"failed: {type(error).__name__}: {str(error).splitlines()[0]}")


def _at_once(home: Path, target) -> list[str]:  # noqa: ANN001
    """`target` in RUNS_AT_ONCE processes released together; what each reported."""
    spawn = multiprocessing.get_context("spawn")
    start, out = spawn.Barrier(RUNS_AT_ONCE), spawn.Queue()
    runs = [spawn.Process(target=target, args=(str(home), start, out)) for _ in range(RUNS_AT_ONCE)]
    for run in runs:
        run.start()
    outcomes = sorted(out.get(timeout=300) for _ in runs)  # a hang guard: each takes a few seconds
    for run in runs:
        run.join(timeout=60)
    return outcomes


@pytest.mark.parametrize("storage", ["stock", "pooled"])
def test_three_first_runs_at_once_on_a_fresh_postgres_storage_all_get_the_pool(
    storage: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    monkeypatch.setenv("PIPELINE_DAGSTER_POSTGRES_URL", postgres_url)
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home", dagster_storage=storage)
    home = ensure_dagster_home(replace(settings, dagster_postgres_url=postgres_url))
    outcomes = _at_once(home, _first_step_claims_the_pool)
    assert all(outcome.startswith("claimed:") for outcome in outcomes), outcomes


def test_three_first_steps_at_one_host_at_once_on_a_fresh_postgres_storage_all_take_a_turn(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host's pool (`assets/host_turns.py`) is written by the first step that sends to it: three at
    once each inserted it and two runs failed on its unique key (seen in CI as `UniqueViolation ...
    concurrency_limits_concurrency_key_key` in `pipeline run`). Now none fails and the pool has its
    HOST_TURNS slots. (Which of the three get a turn is Dagster's: on PostgreSQL its claim selects a
    free slot `FOR UPDATE SKIP LOCKED` outside a transaction, so two claims at the same instant can
    both get the same slot, seen 3 times in 10; a turn is pacing, not a limit the server relies on.)"""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    monkeypatch.setenv("PIPELINE_DAGSTER_POSTGRES_URL", postgres_url)
    settings = Settings.from_env().changed(dagster_home=tmp_path / "home")
    home = ensure_dagster_home(replace(settings, dagster_postgres_url=postgres_url))
    outcomes = _at_once(home, _first_step_takes_a_host_turn)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    from dagster import DagsterInstance

    from assets.host_turns import HOST_TURNS, host_pool

    with DagsterInstance.get() as instance:
        slots = instance.event_log_storage.get_concurrency_info(
            host_pool("http://127.0.0.1:11434")
        ).slot_count
    assert all(outcome.startswith("claimed:") for outcome in outcomes), outcomes
    assert slots == HOST_TURNS


def _pool_rows(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text("SELECT concurrency_key FROM concurrency_limits")).scalars())
    finally:
        engine.dispose()


def test_pipeline_ui_on_an_existing_home_and_a_fresh_postgres_database_writes_the_pool_row_first(
    postgres_database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dagster.yaml names the URL's variable, not the URL: the home's "storage ready" marker is the same
    for a fresh database, and `pipeline ui` used to leave the row to the daemon's runs (which raced)."""
    from dagster._cli import dev as dagster_dev

    used_before, fresh = postgres_database(), postgres_database()
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PIPELINE_DAGSTER_POSTGRES_URL", used_before)
    ensure_dagster_home(Settings.from_env())  # the home, set up on the first database
    monkeypatch.setenv("PIPELINE_DAGSTER_POSTGRES_URL", fresh)
    seen_when_dagster_dev_starts: list[list[str]] = []
    monkeypatch.setattr(  # what `pipeline ui` calls to start Dagster's processes (runtime/dev.py)
        dagster_dev, "dev_command_impl", lambda **_: seen_when_dagster_dev_starts.append(_pool_rows(fresh))
    )

    assert main(["ui", "--port", str(free_port())]) == 0

    assert seen_when_dagster_dev_starts == [["llm"]]


def test_three_pipeline_runs_at_once_on_fresh_postgres_storages_all_succeed(
    postgres_database, tmp_path: Path
) -> None:
    """The real command, three times at once, on a fresh PostgreSQL app database and a fresh Dagster
    storage behind a new home: each exits 0, none meets the pool row's unique key, and every posting
    gets its outputs (one of them failed with `UniqueViolation ... concurrency_limits` and exit 1)."""
    app_url, dagster_url = postgres_database(), postgres_database()
    rows = make_postings("three-runs", 6)
    seed_postings(app_url, tmp_path, rows)
    with FakeOllamaServer(delay_seconds=0.2) as fake:
        env = {
            key: value for key, value in os.environ.items() if not key.startswith(("PIPELINE_", "DAGSTER_"))
        }
        env.update(
            PYTHONPATH=str(PROJECT_ROOT),
            PIPELINE_DATA_DIR=str(tmp_path / "data"),
            PIPELINE_DATABASE_URL=app_url,
            PIPELINE_DAGSTER_POSTGRES_URL=dagster_url,
            OLLAMA_HOST=fake.url,
            PIPELINE_LLM_BACKEND="ollama",
            PIPELINE_EMBEDDING_BACKEND="none",
            PIPELINE_JUDGE_SAMPLE="0",
            PIPELINE_BATCH_SIZE="2",
        )
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "pipeline_defs.cli.main", "run"],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(RUNS_AT_ONCE)
        ]
        outputs = [run.communicate(timeout=600)[0] for run in runs]  # a hang guard
    dispose(app_url)
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-3000:]
        assert "UniqueViolation" not in output and "concurrency_limits" not in output, output[-3000:]
    with session_scope(app_url) as session:
        stored = set(session.execute(select(UseCaseOutput.use_case, UseCaseOutput.subject_key)).all())
    dispose(app_url)
    wanted = {(name, row["key"]) for name in ("posting_summary", "posting_skills") for row in rows}
    assert wanted <= stored, sorted(wanted - stored)
