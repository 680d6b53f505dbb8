"""Two first `pipeline run`s at once on a new Dagster home (after `pipeline migrate`): both finish."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PIPELINE = str(Path(sys.executable).with_name("pipeline"))


def test_two_first_runs_at_once_on_a_new_dagster_home_both_succeed(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIPELINE_", "DAGSTER_"))}
    env.update(PIPELINE_DATA_DIR=str(tmp_path / "data"), PIPELINE_LLM_BACKEND="embedded")
    subprocess.run([PIPELINE, "migrate"], env=env, check=True, capture_output=True, timeout=120)

    runs = [
        subprocess.Popen(
            [PIPELINE, "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0] for run in runs]

    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-2000:]
        assert "already exists" not in output
