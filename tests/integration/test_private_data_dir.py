"""The data directory is its owner's: created 0700, the SQLite database in it 0600 (issue 66, item 8:
it was world-readable, 0755 and 0644 under the usual umask). An existing directory is left as it is,
and `pipeline migrate` says when others can read it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from appdb.database import dispose
from pipeline_defs.cli.main import main


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """022, as on most systems: what the process creates is readable by others unless it says not."""
    before = os.umask(0o022)
    yield
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_data_directory_and_database_are_the_owners_alone(
    usual_umask: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "new" / "data"
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(data))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    try:
        assert main(["migrate"]) == 0
        assert main(["export", "--format", "csv"]) == 0
    finally:
        dispose(f"sqlite:///{data / 'app.db'}")
    assert "warning" not in capsys.readouterr().err
    assert {
        name: oct(mode(path))
        for name, path in {
            "parent made for it": tmp_path / "new",
            "data directory": data,
            "database": data / "app.db",
            "Dagster home": data / "dagster_home",
            "exports": data / "exports",
        }.items()
    } == {
        "parent made for it": "0o700",
        "data directory": "0o700",
        "database": "0o600",
        "Dagster home": "0o700",
        "exports": "0o700",
    }


def test_an_existing_data_directory_keeps_its_mode_and_migrate_says_others_can_read_it(
    usual_umask: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(data))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    try:
        assert main(["migrate"]) == 0
    finally:
        dispose(f"sqlite:///{data / 'app.db'}")
    assert mode(data) == 0o755  # the user's directory: not changed behind their back
    assert mode(data / "app.db") == 0o600
    assert capsys.readouterr().err.splitlines() == [
        f"warning: the data directory {data} is open to other users (mode 0755): `chmod 700 {data}` keeps "
        "its databases and outputs yours (pipeline does not change the mode of a directory that exists)"
    ]
