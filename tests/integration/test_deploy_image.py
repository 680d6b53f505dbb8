"""deploy/Dockerfile's install steps, run as a script: Docker is absent here, so the RUN lines of the
image's last stage run in a shell into a fresh venv, with the wheel built from the committed sources.

The fresh venv sees this test run's own packages through a `.pth` line (as in
tests/end_to_end/test_installed_package.py), standing for the image's network: pip finds every
dependency already there (PIP_NO_INDEX: it may fetch nothing), so the test costs a wheel build and one
install (~18 CPU s, 2026-12-07), and still fails when the Dockerfile asks for an extra the project does
not declare, a wheel that is not there, or a command the installed package does not have."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from pipeline_defs.settings import PROJECT_ROOT

DOCKERFILE = PROJECT_ROOT / "deploy" / "Dockerfile"


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(instruction, arguments) of each line, continuation lines joined, comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in dockerfile.splitlines() if not line.startswith("#"))
    )
    return [
        (parts[0].upper(), parts[1] if len(parts) > 1 else "")
        for parts in (line.strip().split(None, 1) for line in joined.splitlines())
        if parts
    ]


def last_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    start = max(index for index, (name, _) in enumerate(steps) if name == "FROM")
    return steps[start + 1 :]


def build_wheel(into: Path) -> Path:
    """The project's wheel from the files git tracks (no data/, no .venv)."""
    source = into / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        if (PROJECT_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, source / name)
    wheels = into / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", wheels, source], check=True)
    return wheels


def run_step(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-ec", command], env=env, capture_output=True, text=True, timeout=600)


def test_dockerfile_install_steps_make_a_working_install(tmp_path: Path) -> None:
    stage = last_stage(instructions(DOCKERFILE.read_text()))
    arguments = dict(arg.split("=", 1) for name, arg in stage if name == "ARG" and "=" in arg)
    runs = [command for name, command in stage if name == "RUN"]
    assert runs and "venv" in runs[0], "the last stage makes its venv first"

    venv = tmp_path / "venv"
    env = {
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "VENV": str(venv),
        "WHEELS": str(build_wheel(tmp_path)),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "PIPELINE_DATA_DIR": str(tmp_path / "data"),
        "PIP_NO_INDEX": "1",  # nothing from a registry: every dependency comes through the .pth below
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **arguments,
    }
    made = run_step(runs[0], env)
    assert made.returncode == 0, made.stderr[-2000:]
    purelib = subprocess.run(
        [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(purelib, "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    for command in runs[1:]:
        step = run_step(command, env)
        assert step.returncode == 0, f"RUN {command}\n{step.stdout[-2000:]}\n{step.stderr[-3000:]}"

    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import pipeline_defs; print(pipeline_defs.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert where.startswith(purelib), f"the wheel's package, not the clone, is imported: {where}"
    version = subprocess.run(
        [venv / "bin" / "pipeline", "--version"], env=env, capture_output=True, text=True
    )
    assert version.stdout.strip() == "pipeline 0.1.0", version.stdout + version.stderr


def test_the_parser_reads_the_last_stages_runs() -> None:
    """The parsing the test above relies on: continuation lines joined, comments and earlier stages
    left out."""
    text = "FROM a AS b\nRUN one\n# note\nFROM c\nARG X=1\nRUN two \\\n && three\n"
    assert last_stage(instructions(text)) == [("ARG", "X=1"), ("RUN", "two   && three")]
