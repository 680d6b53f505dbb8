"""Every command, when the application database cannot be opened (a server down, a database URL of a
kind the project does not run on) or the data directory cannot be made, says so in one line naming the
setting, with no traceback; and a reader that closes the output early (`| head -c 200`) gets one line
too, not a BrokenPipeError traceback (issue 64, item 3).

The commands run in this process (`main`), except the three servers, which run as a command in a session
of their own with a timeout, so that a server which did start is killed with its children rather than
hanging the suite or outliving it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.ports import free_port
from pipeline_defs.cli.main import all_commands, main
from tests.support.postings import POSTINGS, seed_postings

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# The arguments each command runs with: the least that makes it touch what it needs.
ARGUMENTS: dict[str, list[str]] = {
    "migrate": [],
    "config": [],
    "ui": ["--port", "{port}"],
    "webserver": ["--port", "{port}"],
    "daemon": [],
    "ingest": ["{postings}"],
    "run": ["--progress", "never"],
    "demo": ["--progress", "never"],
    "status": [],
    "failures": [],
    "retry": ["--all"],
    "pauses": [],
    "resume": [],
    "trace": [POSTINGS[0]["key"]],
    "discover": ["--shadow"],
    "review": [],
    "reprocess": ["--stale", "--dry-run"],
    "retire": ["--finished-before", "2020-01-01", "--dry-run"],
    "events": [],
    "export": [],
    "autodo": ["list"],
    "worker": ["--queue", "cpu"],
}
SERVERS = ("ui", "webserver", "daemon")  # they would keep running if they did start
NEEDS_NO_DATABASE = ("config",)  # prints the settings: it opens neither the database nor the directory
# refuses first, in one line, what it needs before any database (the Celery executor, Dagster's shared
# PostgreSQL, the broker: tests/integration/test_celery_executor.py)
OWN_PRECONDITIONS_FIRST = ("worker",)
BROKEN = {
    "an unreachable PostgreSQL": ("PIPELINE_DATABASE_URL", "postgresql://postgres@127.0.0.1:{port}/x"),
    "a MySQL URL": ("PIPELINE_DATABASE_URL", "mysql://someone:secret@127.0.0.1/x"),
    "an unusable data directory": ("PIPELINE_DATA_DIR", "/proc/no-such-directory"),
}


def test_every_command_is_covered() -> None:
    assert set(ARGUMENTS) == set(all_commands())


@pytest.fixture
def postings_file(tmp_path: Path) -> Path:
    path = tmp_path / "postings.jsonl"
    path.write_text('{"key": "x-1", "title": "Cook", "description": "Cook lunch."}\n')
    return path


def _broken_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, broken: str) -> tuple[str, str]:
    variable, value = BROKEN[broken]
    value = value.format(port=free_port())  # nothing listens on a port that was free a moment ago
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv(variable, value)
    return variable, value


def _arguments(command: str, postings_file: Path) -> list[str]:
    words = ARGUMENTS[command]
    port = free_port() if any("{port}" in word for word in words) else 0  # a server's, should it start
    return [command, *(word.format(postings=postings_file, port=port) for word in words)]


def _assert_one_line_naming(err: str, variable: str, value: str) -> None:
    """One line, `error: ...`, naming the setting or the place it points at (a command that writes a
    file into the data directory names that file), and no password."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert variable in lines[0] or value.split("@")[-1] in lines[0], err
    assert "secret" not in lines[0], err  # a password in the URL stays masked


@pytest.mark.parametrize("broken", list(BROKEN))
@pytest.mark.parametrize("command", [name for name in all_commands() if name not in SERVERS])
def test_a_database_or_data_directory_that_cannot_be_used_is_one_line(
    command: str,
    broken: str,
    postings_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    variable, value = _broken_environment(monkeypatch, tmp_path, broken)
    code = main(_arguments(command, postings_file))
    err = capsys.readouterr().err
    if command in NEEDS_NO_DATABASE and code == 0:  # opens nothing (the settings still refuse MySQL)
        assert "Traceback" not in err, err
        return
    assert code != 0, err
    if command in OWN_PRECONDITIONS_FIRST:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
        return
    _assert_one_line_naming(err, variable, value)


@pytest.mark.parametrize("broken", list(BROKEN))
@pytest.mark.parametrize("command", SERVERS)
def test_a_server_does_not_start_on_a_database_or_data_directory_it_cannot_use(
    command: str, broken: str, postings_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable, value = _broken_environment(monkeypatch, tmp_path, broken)
    finished = _run_or_kill(
        [sys.executable, "-m", "pipeline_defs.cli.main", *_arguments(command, postings_file)]
    )
    assert finished.returncode == 2, finished.stderr
    assert finished.stdout == "", finished.stdout
    _assert_one_line_naming(finished.stderr, variable, value)


def _run_or_kill(command: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`command` to its end; a server that started anyway is killed with every process it started (its
    own session), failing the test instead of hanging it or leaving a webserver and daemon behind."""
    process = subprocess.Popen(
        command,
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"`{' '.join(command[2:])}` was still running after {timeout:.0f}s: it started\n{err}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@contextlib.contextmanager
def closed_stdout() -> Iterator[None]:
    """stdout a pipe whose reader has gone (`| head -c 200` after its 200 bytes): writes raise EPIPE.
    Set inside the test, not by a fixture: pytest's own capture takes sys.stdout back before the test."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = open(write_end, "w", encoding="utf-8")  # noqa: SIM115 - closed below, after main
    real, sys.stdout = sys.stdout, stream
    try:
        yield
    finally:
        sys.stdout = real
        with contextlib.suppress(OSError):
            stream.close()


LISTINGS = ["status", "failures", "pauses", "trace", "discover", "review", "events", "config", "autodo"]


@pytest.mark.parametrize("command", LISTINGS)
def test_a_closed_output_pipe_is_one_line(
    command: str,
    sqlite_url: str,
    postings_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed_postings(sqlite_url, tmp_path)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    with closed_stdout():
        code = main(_arguments(command, postings_file))
    err = capsys.readouterr().err
    assert code == 1, err
    assert "Traceback" not in err, err
    assert err.strip() == "error: the output was closed before all of it was written (broken pipe)", err


@pytest.mark.parametrize(
    "command", [["events", "--json", "--limit", "5000"], ["discover", "--shadow", "--json"]]
)
def test_head_closing_the_pipe_early_leaves_one_line_and_no_traceback(
    command: list[str], sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's commands, as a shell runs them: more output than a pipe holds, `head` reading 200 bytes."""
    keys = [{"key": f"k-{n:05d}", "title": "Cook", "description": "Cook lunch."} for n in range(5000)]
    seed_postings(sqlite_url, tmp_path, keys)
    _many_events(sqlite_url, 2000)
    env = {**os.environ, "PIPELINE_DATA_DIR": str(tmp_path / "data"), "PIPELINE_DATABASE_URL": sqlite_url}
    pipeline = " ".join([sys.executable, "-m", "pipeline_defs.cli.main", *command])
    finished = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {pipeline} 2>{tmp_path / 'err'} | head -c 200 >/dev/null"],
        cwd=PROJECT_ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    err = (tmp_path / "err").read_text()
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err.strip() == "error: the output was closed before all of it was written (broken pipe)", err
    assert finished.returncode == 1


def _many_events(url: str, count: int) -> None:
    from appdb import events
    from appdb.database import session_scope

    with session_scope(url) as session:
        for n in range(count):
            events.record_event(session, "discovery", use_case="posting_summary", count=n)
