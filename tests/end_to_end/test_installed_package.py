"""The project as a package, not a clone: the wheel built from the sources, installed into a fresh venv,
used from another directory against a model server, as an Ollama user who ran `pip install .` would.

The fresh venv gets its dependencies (Dagster, pandas, ...) from this test run's own environment through
a `.pth` line, so the test needs no network; the project itself comes only from the wheel."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx
import pytest
from pytest_httpserver import HTTPServer

from pipeline_defs.settings import PROJECT_ROOT
from tests.support.fakes import FakeOllama
from tests.support.live_pipeline import free_port

pytestmark = pytest.mark.live_dagster

UI_BOUND_SECONDS = 240.0  # dagster dev's webserver, daemon and code server on a loaded 2-core machine


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the project's wheel in it; its bin directory."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, tracked):  # the sources as committed: no data/, no .venv, no egg-info
        if (PROJECT_ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / name, source / name)
    wheels = root / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            wheels,
            source,
        ],
        check=True,
    )
    [wheel] = wheels.glob("posting_enrichment-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    site = Path(
        subprocess.run(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([venv / "bin" / "pip", "install", "--quiet", "--no-deps", "--no-index", wheel], check=True)
    return venv / "bin"


def _environment(home: Path, ollama: str) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    return {**env, "HOME": str(home), "OLLAMA_HOST": ollama, "PIPELINE_DOMAINS": "postings"}


def test_pip_installed_pipeline_runs_the_demo_from_any_directory(
    installed: Path, httpserver: HTTPServer, tmp_path: Path
) -> None:
    fake = FakeOllama(httpserver)
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    env = _environment(home, httpserver.url_for("/").rstrip("/"))

    where = subprocess.run(
        [installed / "python", "-c", "import pipeline_defs; print(pipeline_defs.__file__)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert str(installed.parent) in where, f"the package, not the clone, is imported: {where}"

    demo = subprocess.run(
        [installed / "pipeline", "demo"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "demo-001" in demo.stdout and "pipeline trace demo-001" in demo.stdout
    assert len(fake.generations) >= 25
    data = home / ".local" / "share" / "posting-enrichment"
    assert (data / "app.db").is_file(), "the data directory is the user's, not site-packages"
    assert not (Path(where.strip()).parents[1] / "data").exists(), "nothing written into site-packages"
    assert not list(elsewhere.iterdir()), "nothing written into the working directory"

    status = subprocess.run(
        [installed / "pipeline", "status"], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert status.returncode == 0 and "posting_summary" in status.stdout


def test_pip_installed_pipeline_ui_serves_the_code_location(
    installed: Path, httpserver: HTTPServer, tmp_path: Path
) -> None:
    FakeOllama(httpserver)
    home = tmp_path / "home"
    home.mkdir()
    env = _environment(home, httpserver.url_for("/").rstrip("/"))
    port = free_port()
    log = (tmp_path / "ui.log").open("w")
    ui = subprocess.Popen(
        [installed / "pipeline", "ui", "--port", str(port)], cwd=tmp_path, env=env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    query = {"query": "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"}
    try:
        deadline = time.monotonic() + UI_BOUND_SECONDS
        while True:
            assert ui.poll() is None, (tmp_path / "ui.log").read_text()[-3000:]
            try:
                answer = httpx.post(f"http://127.0.0.1:{port}/graphql", json=query, timeout=5).json()
                entries = answer["data"]["workspaceOrError"]["locationEntries"]
                if entries and entries[0]["loadStatus"] == "LOADED":
                    break
            except (httpx.HTTPError, KeyError, TypeError, ValueError):
                pass
            assert time.monotonic() < deadline, (
                f"the UI did not load the code location in {UI_BOUND_SECONDS} s"
            )
            time.sleep(1)
        assert entries[0]["name"] == "posting_enrichment"
        workspace = home / ".local" / "share" / "posting-enrichment" / "dagster_home" / "workspace.yaml"
        assert "pipeline_defs.definitions" in workspace.read_text()
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        try:
            ui.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
            ui.wait()
        log.close()
