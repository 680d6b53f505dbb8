"""Bad arguments get one line, not a traceback: `events --hours` out of range, `trace --markdown` to a
place a file cannot be written (issue 39, item 8)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline_defs.cli.main import main
from tests.support.postings import POSTINGS, seed_postings


@pytest.fixture
def cli(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    seed_postings(sqlite_url, tmp_path)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    return sqlite_url


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:") or ": error:" in line]
    assert len(errors) == 1, err  # argparse prints its usage lines above the one error
    assert err.rstrip().endswith(errors[0]), err
    return errors[0]


@pytest.mark.parametrize("hours", ["nan", "inf", "-1", "0", "soon"])
def test_events_hours_out_of_range_is_a_one_line_error(
    cli: str, hours: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["events", "--hours", hours])
    assert exited.value.code == 2
    assert "--hours" in one_line_error(capsys)


def test_events_hours_beyond_a_century_shows_the_whole_log(
    cli: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["events", "--hours", "1e308"]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("where", ["directory", "missing directory", "unwritable"])
def test_trace_markdown_to_a_place_it_cannot_write_is_a_one_line_error(
    cli: str, tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = {
        "directory": tmp_path,
        "missing directory": tmp_path / "no" / "such" / "trace.md",
        "unwritable": tmp_path / "locked" / "trace.md",
    }[where]
    if where == "unwritable":
        target.parent.mkdir()
        target.parent.chmod(0o500)
        if os.access(target.parent, os.W_OK):  # root writes anywhere: /proc takes no new file
            target = Path("/proc/trace.md")
    assert main(["trace", POSTINGS[0]["key"], "--markdown", str(target)]) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"error: cannot write the markdown report to {target}"), line
