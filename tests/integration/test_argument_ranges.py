"""A whole number out of range is a one-line usage error (exit 2): `events --limit` and `review show ID`
past the database's 64-bit integers raised OverflowError with a traceback, and `ui --port 99999`
listened on another port (issue 66, item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_defs.cli.main import build_parser, main
from tests.support.postings import seed_postings

HUGE = "99999999999999999999999"


@pytest.fixture
def cli(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    seed_postings(sqlite_url, tmp_path)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    return sqlite_url


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["events", "--limit", "99999999999999999999"], "--limit: a number of rows must be from 1 to "),
        (["events", "--limit", "0"], "--limit: a number of rows must be from 1 to "),
        (["review", "show", HUGE], "ID: an id must be from 1 to 9223372036854775807, not " + HUGE),
        (["review", "accept", HUGE], "ID: an id must be from 1 to "),
        (["review", "correct", "-1"], "ID: an id must be from 1 to "),
        (["events", "--limit", "ten"], "--limit: not a whole number: 'ten'"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else None,
)
def test_a_whole_number_out_of_range_is_a_one_line_usage_error(
    cli: str, command: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(command)
    assert exited.value.code == 2
    assert expected in one_usage_error(capsys)


@pytest.mark.parametrize(
    "command",
    [["ui", "--port", "99999"], ["ui", "--port", "0"], ["webserver", "--port", "65536"]],
    ids=" ".join,
)
def test_a_port_out_of_range_is_a_one_line_usage_error(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Only parsed here: a port the parser let through would start the servers."""
    with pytest.raises(SystemExit) as exited:
        build_parser(command).parse_args(command)
    assert exited.value.code == 2
    assert f"--port: a port must be from 1 to 65535, not {command[-1]}" in one_usage_error(capsys)


def one_usage_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line argparse prints below its usage lines (and no traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if ": error:" in line]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    return errors[0]


def test_the_largest_limit_and_id_are_answered(cli: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["events", "--limit", str(2**63 - 1)]) == 0
    assert main(["review", "show", str(2**63 - 1)]) == 2  # no such item: its own one-line error
    assert capsys.readouterr().err.startswith("error: no review item 9223372036854775807")
