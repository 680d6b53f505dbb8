"""Liveness of `pipeline run`: a run killed with SIGKILL mid-batch does not block the next one on the
`llm` pool; SIGTERM and Ctrl-C stop it at once with its claims given back; the circuit breaker stops
it; `pipeline status` names what blocks work that stopped moving.

The subprocess tests run the real command against a fake Ollama over HTTP with the pool one slot wide
(as on the embedded model), a 1 s heartbeat (a run is dead after 6 s) and a 30 s lease.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus
from sqlalchemy import func, select, update

from appdb.database import dispose, session_scope
from appdb.models import UseCaseOutput, WorkItem, utcnow
from appdb.process_identity import ProcessIdentity, state_and_start, this_process
from assets.factory import build_work_groups
from pipeline_defs.cli.in_process_runs import run_pending
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.dagster_home import dagster_yaml
from pipeline_defs.settings import PROJECT_ROOT, Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.app_database import AppDatabase
from tests.integration.test_outage import FlakyBackend
from tests.support.fake_ollama_server import FakeOllamaServer
from tests.support.live_pipeline import make_postings
from tests.support.postings import seed_postings

LEASE_SECONDS = 30
HEARTBEAT_SECONDS = 1
BATCH_SIZE = 3
USE_CASES = ("posting_summary", "posting_skills")
STOP_WITHIN_SECONDS = 10


def _env(tmp_path: Path, url: str, ollama_url: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINE_", "DAGSTER_"))}
    env.update(
        PYTHONPATH=str(PROJECT_ROOT),
        PIPELINE_DATA_DIR=str(tmp_path / "data"),
        PIPELINE_DATABASE_URL=url,
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        OLLAMA_HOST=ollama_url,
        PIPELINE_LLM_BACKEND="ollama",
        PIPELINE_LLM_PARALLEL="1",
        PIPELINE_SKILLS_STYLE="llm",
        PIPELINE_EMBEDDING_BACKEND="none",
        PIPELINE_JUDGE_SAMPLE="0",
        PIPELINE_BATCH_SIZE=str(BATCH_SIZE),
        PIPELINE_HEARTBEAT_SECONDS=str(HEARTBEAT_SECONDS),
        PIPELINE_LEASE_SECONDS=str(LEASE_SECONDS),
    )
    return env


def _one_slot_pool(env: dict[str, str]) -> None:
    """The Dagster home with the `llm` pool one step wide, as the embedded model has it."""
    home = Path(env["DAGSTER_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        text = dagster_yaml(Settings.from_env())
    finally:
        os.environ.clear()
        os.environ.update(saved)
    lines = [
        "    default_limit: 1" if line.strip().startswith("default_limit:") else line
        for line in text.splitlines()
    ]
    (home / "dagster.yaml").write_text("\n".join(lines) + "\n")


def _start_run(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline_defs.cli.main", "run"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _count(url: str, model: type, *where: object) -> int:
    with session_scope(url) as session:
        return session.scalar(select(func.count()).select_from(model).where(*where)) or 0


def _claimed(url: str) -> int:
    return _count(url, WorkItem, WorkItem.status == "claimed")


def _wait(condition, timeout: float, what: str, process: subprocess.Popen, log: Path) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, (
            f"`pipeline run` ended early ({process.returncode}):\n{log.read_text()}"
        )
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


@pytest.fixture
def setting_up(tmp_path: Path, app_db_url: str):  # noqa: ANN201
    """Postings, a fake Ollama (0.4 s a call) and the environment of `pipeline run`."""
    rows = make_postings("live", 8)
    seed_postings(app_db_url, tmp_path, rows)
    with FakeOllamaServer(delay_seconds=0.4) as fake:
        env = _env(tmp_path, app_db_url, fake.url)
        _one_slot_pool(env)
        yield env, [row["key"] for row in rows], fake
    dispose(app_db_url)


def test_a_run_killed_mid_batch_does_not_block_the_next_run_on_the_pool(setting_up, tmp_path: Path) -> None:
    env, keys, _ = setting_up
    url = env["PIPELINE_DATABASE_URL"]
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = _start_run(env, first_log)
    _wait(
        lambda: _count(url, UseCaseOutput) >= 1 and _claimed(url) > 0,
        120,
        "the first run to store an output while holding claims",
        first,
        first_log,
    )
    os.killpg(first.pid, signal.SIGKILL)  # mid-batch: it holds the pool's one slot and claims
    first.wait()
    assert _claimed(url) > 0

    started = time.monotonic()
    second = _start_run(env, second_log)
    try:
        code = second.wait(timeout=LEASE_SECONDS + 60)
    except subprocess.TimeoutExpired:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
        pytest.fail(
            "the second `pipeline run` did not finish within one lease + 60 s:\n"
            + second_log.read_text()[-3000:]
        )
    elapsed = time.monotonic() - started
    output = second_log.read_text()
    assert code == 0, output
    missing = len(keys) * len(USE_CASES) - _count(
        url, UseCaseOutput, UseCaseOutput.use_case.in_(USE_CASES), UseCaseOutput.subject_key.in_(keys)
    )
    assert missing == 0, output
    assert "is dead (heartbeat stopped" in output, output
    assert _claimed(url) == 0
    with session_scope(url) as session:
        assert {row.attempts for row in session.scalars(select(WorkItem))} == {0}  # no attempt spent
    print(f"second run finished everything {elapsed:.1f}s after the kill")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("app_db_url", ["sqlite"], indirect=True)
def test_a_stop_signal_ends_pipeline_run_at_once_with_its_claims_given_back(
    setting_up, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    env, _, fake = setting_up
    url = env["PIPELINE_DATABASE_URL"]
    log = tmp_path / "run.log"
    fake.hold()  # the run stays inside its model calls
    process = _start_run(env, log)
    _wait(lambda: _claimed(url) > 0 and fake.in_flight > 0, 120, "claims and a model call", process, log)

    started = time.monotonic()
    process.send_signal(stop_signal)
    try:
        code = process.wait(timeout=STOP_WITHIN_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(
            f"`pipeline run` still running {STOP_WITHIN_SECONDS}s after {stop_signal.name}:\n"
            + log.read_text()
        )
    finally:
        fake.release()
    seconds = time.monotonic() - started
    output = log.read_text()

    assert code == 128 + stop_signal, (code, output)
    last = output.strip().splitlines()[-1]
    assert last.startswith(f"pipeline run: stopped by {stop_signal.name}: run "), output
    assert "claims given back" in last
    assert _claimed(url) == 0, output  # given back, not left to the lease
    with session_scope(url) as session:
        assert {row.attempts for row in session.scalars(select(WorkItem))} == {0}
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    with DagsterInstance.get() as instance:
        statuses = {run.status for run in instance.get_runs() if run.job_name.endswith("_batch_job")}
        assert DagsterRunStatus.CANCELED in statuses, statuses
        assert not statuses & {DagsterRunStatus.STARTED, DagsterRunStatus.STARTING}, statuses
        assert not instance.event_log_storage.get_concurrency_info("llm").claimed_slots
    print(f"{stop_signal.name}: exited {seconds:.1f}s after the signal")


def test_pipeline_run_stops_after_the_circuit_breaker_trips(app_db_url: str, tmp_path: Path) -> None:
    FlakyBackend.up, FlakyBackend.calls, FlakyBackend.serve_before_outage = False, 0, 0
    FlakyBackend.bad_output_for = set()
    seed_postings(app_db_url, tmp_path)  # three postings, one per run
    settings = Settings.from_env().changed(database_url=app_db_url, batch_size_override=1)
    built = build_use_cases(settings, [POSTING_SUMMARY])
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups, llm=FlakyBackend())
    with DagsterInstance.ephemeral() as instance:
        [report] = run_pending(defs, groups, instance, AppDatabase(url=app_db_url), source="test")
    assert len(report.runs) == 1, f"{len(report.runs)} runs started after the breaker tripped"
    assert "circuit breaker tripped" in report.stopped


def test_status_names_what_blocks_work_that_stopped_moving(
    app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    seed_postings(app_db_url, tmp_path)
    long_ago = utcnow() - timedelta(minutes=15)
    with session_scope(app_db_url) as session:  # a run claimed p-1 15 minutes ago, and nothing moved since
        session.add(
            WorkItem(
                use_case="posting_summary",
                subject_key="p-1",
                status="claimed",
                claimed_by="deadbeef-run",
                lease_expires_at=utcnow() + timedelta(minutes=5),
                created_at=long_ago,
                updated_at=long_ago,
            )
        )
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))

    def stuck_line() -> str:
        assert main(["status"]) == 0
        out = capsys.readouterr().out
        stuck = [line for line in out.splitlines() if line.startswith("stuck: posting_summary")]
        assert stuck, out
        assert "2 pending and nothing stored for 15 min" in stuck[0]
        return stuck[0]

    assert "1 claims held by run deadbeef (no heartbeat, lease ends" in stuck_line()

    from appdb import heartbeats  # the run's heartbeat, 12 minutes old
    from appdb.models import RunHeartbeat

    with session_scope(app_db_url) as session:
        heartbeats.start_heartbeat(
            session, "deadbeef-run", job="gemma3_270m_batch_job", source="cli", host="h", pid=1
        )
    with session_scope(app_db_url) as session:
        session.execute(update(RunHeartbeat).values(beat_at=utcnow() - timedelta(minutes=12)))
    assert "1 claims held by run deadbeef (heartbeat 12 min old, lease ends" in stuck_line()


@pytest.mark.parametrize("app_db_url", ["sqlite"], indirect=True)
def test_pipeline_run_waits_for_a_run_that_stopped_beating_and_does_its_work_too(
    app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run killed moments ago on another host (its process cannot be checked from here) holds one
    posting: `pipeline run` does the other, waits for the holder's heartbeat to time out, reaps it and
    does its posting too, instead of exiting 0 with it undone (issue 39, item 2)."""
    from appdb import claims, heartbeats

    rows = make_postings("silent", 2)
    seed_postings(app_db_url, tmp_path, rows)
    keys = [row["key"] for row in rows]
    dead_run = "0000dead-0000-4000-8000-000000000000"
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, "posting_summary", keys[:1], dead_run) == keys[:1]
        heartbeats.start_heartbeat(
            session, dead_run, job="gemma3_270m_batch_job", source="sensor", host="another-host", pid=4242
        )
    other_done = threading.Event()

    def beat_until_the_other_posting_is_done() -> None:
        """The holder is alive while the command does the other posting (however long that takes on a
        loaded machine), and dies just as it is done: the command must wait for it, not find it reaped."""
        while not other_done.is_set():
            done = _count(
                app_db_url,
                UseCaseOutput,
                UseCaseOutput.use_case == "posting_summary",
                UseCaseOutput.subject_key == keys[1],
            )
            if done:
                return
            with session_scope(app_db_url) as session:
                heartbeats.beat(session, dead_run)
            other_done.wait(0.5)

    with FakeOllamaServer(delay_seconds=0.0) as fake:
        # beats every 5 s, dead after 25 s once the beating thread stops
        env = _env(tmp_path, app_db_url, fake.url) | {"PIPELINE_HEARTBEAT_SECONDS": "5"}
        for name in os.environ:
            if name.startswith(("PIPELINE_", "DAGSTER_")):
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        beating = threading.Thread(target=beat_until_the_other_posting_is_done, daemon=True)
        beating.start()
        try:
            code = main(["run", "--use-case", "posting_summary"])
        finally:
            other_done.set()
            beating.join()
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"waiting up to 25s for run {dead_run} (gemma3_270m_batch_job, pid 4242 on another-host)" in err
    assert f"run {dead_run} (gemma3_270m_batch_job) is dead" in err
    done = _count(
        app_db_url,
        UseCaseOutput,
        UseCaseOutput.use_case == "posting_summary",
        UseCaseOutput.subject_key.in_(keys),
    )
    assert done == 2, err
    assert _claimed(app_db_url) == 0
    dispose(app_db_url)


def test_an_outage_prints_the_one_line_not_dagsters_stack_traces(
    app_db_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    FlakyBackend.up, FlakyBackend.calls, FlakyBackend.serve_before_outage = False, 0, 0
    FlakyBackend.bad_output_for = set()
    seed_postings(app_db_url, tmp_path)
    settings = Settings.from_env().changed(database_url=app_db_url, batch_size_override=1)
    built = build_use_cases(settings, [POSTING_SUMMARY])
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups, llm=FlakyBackend())
    capfd.readouterr()
    with DagsterInstance.ephemeral() as instance:
        [report] = run_pending(defs, groups, instance, AppDatabase(url=app_db_url), source="test")
    printed = "".join(capfd.readouterr())
    assert "circuit breaker tripped" in report.stopped
    assert 'File "' not in printed and "Stack Trace" not in printed and "Traceback" not in printed, printed
    assert len(printed.splitlines()) <= 5, printed


def test_stuck_work_names_the_run_that_died_not_the_daemon(app_db_url: str, tmp_path: Path) -> None:
    """The daemon's liveness sensor reaped a run; nothing was requested since and work stands still:
    the stuck line names the dead run and does not ask whether the daemon (itself) is running."""
    from appdb import heartbeats
    from appdb.models import RunHeartbeat
    from sensors.run_liveness import stuck_work

    seed_postings(app_db_url, tmp_path)
    app_db = AppDatabase(url=app_db_url)
    long_ago = utcnow() - timedelta(minutes=15)
    with session_scope(app_db_url) as session:
        heartbeats.start_heartbeat(
            session, "deadbeef-run", job="gemma3_270m_batch_job", source="sensor", host="h", pid=1
        )
        heartbeats.mark_dead(session, "deadbeef-run", "its process (pid 1 on h) is gone")
        session.execute(update(RunHeartbeat).values(beat_at=utcnow() - timedelta(minutes=12)))
        session.add(
            WorkItem(
                use_case="posting_summary",
                subject_key="p-1",
                status="pending",
                created_at=long_ago,
                updated_at=long_ago,
            )
        )
    line = stuck_work(
        lambda: None, app_db, ["posting_summary"], 3, 600, jobs=["gemma3_270m_batch_job"], in_daemon=True
    )
    assert line is not None
    assert "the last run to hold work, deadbeef (gemma3_270m_batch_job), died at" in line, line
    assert "its process (pid 1 on h) is gone" in line, line
    assert "is the daemon running" not in line, line
    dispose(app_db_url)


def test_the_lease_sweep_leaves_the_claims_of_a_run_whose_heartbeat_is_alive(
    app_db_url: str, tmp_path: Path
) -> None:
    """One model call outlasted the lease (a slow server, a loaded machine): the run still beats, so the
    sweep must not give its claims away and fail it; a holder with no heartbeat is swept as before."""
    from appdb import claims, heartbeats
    from sensors.run_liveness import sweep_expired_leases

    seed_postings(app_db_url, tmp_path)
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, "posting_summary", ["p-1"], "alive-run") == ["p-1"]
        assert claims.claim_items(session, "posting_summary", ["p-2"], "silent-run") == ["p-2"]
        heartbeats.start_heartbeat(session, "alive-run", job="j", source="cli", host="h", pid=1)
        session.execute(update(WorkItem).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    with DagsterInstance.ephemeral() as instance:
        freed, _ = sweep_expired_leases(instance, AppDatabase(url=app_db_url))
    assert freed == 1
    with session_scope(app_db_url) as session:
        held = {item.subject_key: item.claimed_by for item in session.scalars(select(WorkItem))}
    assert held["p-1"] == "alive-run" and held["p-2"] is None, held
    dispose(app_db_url)


def _beating(url: str, run_id: str, process: ProcessIdentity, *, silent_for: timedelta) -> None:
    """A heartbeat row of `run_id` for `process`, silent for `silent_for`."""
    from appdb import heartbeats
    from appdb.models import RunHeartbeat

    with session_scope(url) as session:
        heartbeats.start_heartbeat(session, run_id, job="j", source="sensor", process=process)
    with session_scope(url) as session:
        session.execute(
            update(RunHeartbeat).where(RunHeartbeat.run_id == run_id).values(beat_at=utcnow() - silent_for)
        )


def _another_process_here(pid: int, started: int | None) -> ProcessIdentity:
    """`pid` as a process in this PID namespace on this boot would name itself (its own instance id)."""
    return replace(this_process(), instance_id=f"other-{pid}", pid=pid, started=started)


@pytest.mark.parametrize("app_db_url", ["sqlite"], indirect=True)
def test_a_working_run_whose_heartbeat_is_late_keeps_its_claims_while_its_process_lives(
    app_db_url: str, tmp_path: Path
) -> None:
    """On a loaded machine a run's beat thread can stall past the minute. Its process on this host is
    alive, so its claims stay with it (reaping it let a second run answer its postings again while it
    went on calling the model); a silence as long as the lease means it is hung, and it is reaped."""
    from appdb import claims
    from appdb.models import RunHeartbeat
    from sensors.run_liveness import LIVE_PROCESS_PATIENCE_SECONDS, reap_dead_runs

    seed_postings(app_db_url, tmp_path)
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, "posting_summary", ["p-1"], "late-run") == ["p-1"]
    # this test's own process stands for the run's: alive
    _beating(app_db_url, "late-run", this_process(), silent_for=timedelta(minutes=3))
    app_db = AppDatabase(url=app_db_url)
    with DagsterInstance.ephemeral() as instance:
        assert reap_dead_runs(instance, app_db, dead_after_seconds=60) == []
        with session_scope(app_db_url) as session:
            assert session.scalar(select(WorkItem.claimed_by)) == "late-run"
            session.execute(
                update(RunHeartbeat).values(
                    beat_at=utcnow() - timedelta(seconds=LIVE_PROCESS_PATIENCE_SECONDS + 5)
                )
            )
        reaped = reap_dead_runs(instance, app_db, dead_after_seconds=60)
    assert [(run.run_id, run.claims_released) for run in reaped] == [("late-run", 1)]
    dispose(app_db_url)


@pytest.mark.parametrize("app_db_url", ["sqlite"], indirect=True)
def test_a_run_whose_pid_now_names_another_process_or_a_zombie_is_reaped_at_once(
    app_db_url: str, tmp_path: Path
) -> None:
    """The pid check must not mistake a reused pid (a process started after the heartbeat) or a killed
    worker its parent has not waited for (a zombie) for the run: both are reaped at the next look."""
    from appdb import claims
    from sensors.run_liveness import reap_dead_runs

    seed_postings(app_db_url, tmp_path)
    newer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.05)  # exited; not waited for, so a zombie
        with session_scope(app_db_url) as session:
            assert claims.claim_items(session, "posting_summary", ["p-1"], "reused-run") == ["p-1"]
            assert claims.claim_items(session, "posting_summary", ["p-2"], "zombie-run") == ["p-2"]
        # the heartbeat's process started earlier than the one now at `newer.pid`
        newer_started = state_and_start(newer.pid)[1]
        reused = _another_process_here(newer.pid, newer_started - 1000)
        _beating(app_db_url, "reused-run", reused, silent_for=timedelta(seconds=5))
        zombie_itself = _another_process_here(zombie.pid, state_and_start(zombie.pid)[1])
        _beating(app_db_url, "zombie-run", zombie_itself, silent_for=timedelta(seconds=5))
        with DagsterInstance.ephemeral() as instance:
            reaped = reap_dead_runs(instance, AppDatabase(url=app_db_url), dead_after_seconds=60)
    finally:
        newer.kill()
        newer.wait()
        zombie.wait()
    released = sorted((run.run_id, run.claims_released) for run in reaped)
    assert released == [("reused-run", 1), ("zombie-run", 1)]
    dispose(app_db_url)
