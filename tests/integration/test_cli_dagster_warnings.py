"""Dagster's warnings about its own APIs stay off the command line unless asked for (`--verbose`).

`pipeline ui` printed, on every start, "SupersessionWarning: Function `dev_command` is superseded and
its usage is discouraged. Use 'dg dev' instead." (with a line of click's source): advice about Dagster's
CLI that a user of `pipeline` cannot act on. Other warnings still print.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
from dagster._utils.warnings import BetaWarning, SupersessionWarning

from pipeline_defs.cli.main import main
from pipeline_defs.settings import PROJECT_ROOT
from tests.support.live_pipeline import free_port

SERVICES_STARTING = "Launching Dagster services"
START_BOUND_SECONDS = 180  # a hang guard: the line comes within seconds on a quiet machine


def _ui_output_until_services_start(tmp_path: Path, *options: str) -> str:
    """What `pipeline ui` prints up to the line that says dagster dev starts its services; then stopped."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINE_", "DAGSTER_"))}
    env.update(PIPELINE_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(PROJECT_ROOT))
    env.pop("PYTHONWARNINGS", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline_defs.cli.main", "ui", "--port", str(free_port()), *options],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in process.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if SERVICES_STARTING in line:
                started.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(START_BOUND_SECONDS), (
            f"`pipeline ui` did not start its services within {START_BOUND_SECONDS}s: "
            f"{''.join(lines)[-3000:]}"
        )
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return "".join(lines)


def test_pipeline_ui_starts_without_dagsters_superseded_warning(tmp_path: Path) -> None:
    output = _ui_output_until_services_start(tmp_path)
    assert "Warning" not in output, output
    assert "dg dev" not in output, output


def _to_stderr(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """Python's own way of showing a warning (pytest records them instead)."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _warn_from_a_command(settings, args) -> int:  # noqa: ANN001 - a stand-in command handler
    warnings.warn("Function `dev_command` is superseded. Use 'dg dev' instead.", SupersessionWarning, 1)
    warnings.warn("`backfill_policy` is currently in beta", BetaWarning, 1)
    warnings.warn("the project's own warning", UserWarning, 1)
    return 0


@pytest.mark.parametrize("verbose", [False, True])
def test_a_command_prints_other_warnings_and_dagsters_only_when_verbose(
    verbose: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import pipeline_defs.cli.run_commands as run_commands

    monkeypatch.setattr(run_commands, "cmd_run", _warn_from_a_command)
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as a fresh process shows each warning once
        warnings.showwarning = _to_stderr
        assert main(["run", *(["--verbose"] if verbose else [])]) == 0
    err = capsys.readouterr().err
    assert "the project's own warning" in err
    assert ("SupersessionWarning" in err) is verbose, err
    assert ("BetaWarning" in err) is verbose, err
