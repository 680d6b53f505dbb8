"""Progress of the long commands on a terminal: `pipeline ingest`, `export` and `autodo scan` show their
counts, rate and time left on stderr (here forced with `--progress always`, the terminal's default),
and nothing of it when stderr is not a terminal; a task's cost note is the one line that remains."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from console import progress as cli_progress
from console.progress import NotesReporter, RunProgress, StatusLine, TerminalReporter
from domain.core.progress import progress_task, reporting_to
from pipeline_defs.cli.main import main
from tests.support.autodo_tree import write_sample_tree

POSTINGS = 1_200


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> Path:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setattr(cli_progress, "SHOW_AFTER", 0.0)  # a quick task shows its counts too
    assert main(["migrate"]) == 0
    return tmp_path


def postings_file(folder: Path) -> Path:
    path = folder / "postings.jsonl"
    rows = (
        {"key": f"p-{n}", "title": "Data Engineer", "description": f"Build pipelines {n}."}
        for n in range(POSTINGS)
    )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def last_line(stderr: str) -> str:
    return stderr.split("\r")[-1]


def test_ingest_and_export_show_their_counts_on_a_terminal_only(
    cli: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = postings_file(cli)
    capsys.readouterr()
    assert main(["ingest", str(source), "--progress", "always"]) == 0
    final = last_line(capsys.readouterr().err)
    assert final.startswith(f"ingest {POSTINGS:,}/{POSTINGS:,} lines (") and "/s, done) in " in final

    assert main(["export", "--format", "jsonl", "--out", str(cli / "out.jsonl"), "--progress", "always"]) == 0
    final = last_line(capsys.readouterr().err)
    assert final.startswith(f"export {POSTINGS:,}/{POSTINGS:,} postings (") and "/s, done) in " in final

    assert main(["ingest", str(source)]) == 0  # stderr is not a terminal here
    assert main(["export", "--format", "csv", "--out", str(cli / "out.csv")]) == 0
    quiet = capsys.readouterr()
    assert "\r" not in quiet.err and "/s" not in quiet.err
    assert f"ingested {POSTINGS} postings" in quiet.out


def test_autodo_scan_counts_the_files_it_reads(
    cli: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings,autodo")
    monkeypatch.chdir(write_sample_tree(cli))
    capsys.readouterr()
    main(["autodo", "scan", "docs", "--progress", "always"])  # exits 1: the sample tree has bad input
    final = last_line(capsys.readouterr().err).split("\n")[0]
    done, total = final.split()[2].split("/")
    assert final.startswith("autodo scan ") and " files (" in final and done == total and int(done) > 1


def test_a_task_and_a_run_share_the_line_and_the_note_stays_above(sqlite_url: str) -> None:
    """The first embedding of a taxonomy happens inside a run: its counts join the run's on one line."""
    from appdb.database import migrate

    migrate(sqlite_url)
    screen = io.StringIO()
    line = StatusLine(screen)
    run = RunProgress(sqlite_url, enabled=True, stream=screen, poll_seconds=60)
    run.line = line
    with (
        reporting_to(TerminalReporter(line, redraw_seconds=0.0, show_after=0.0)),
        run.track("skill_entities", {"skill_entities": 3}, "postings"),
        progress_task("label vectors", 10, "labels", note="about 1 min, once") as task,
    ):
        task.advance(4)
    shown = screen.getvalue().split("\r")
    assert "label vectors: about 1 min, once\x1b[K\n" in shown
    assert any(
        part.startswith("skill_entities: skill_entities 0/3 (starting) · label vectors 4/10 labels (")
        for part in shown
    )
    assert any(part.startswith("label vectors 4/10 labels (") and part.endswith("\n") for part in shown)

    notes = io.StringIO()
    with (
        reporting_to(NotesReporter(notes)),
        progress_task("label vectors", 10, "labels", note="about 1 min, once") as task,
    ):
        task.advance(10)
    assert notes.getvalue() == "label vectors: about 1 min, once\n"


def test_a_command_called_in_process_puts_back_the_progress_reporter_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`main()` is called in process (tests, notebooks): a status line bound to that call's stderr must
    not outlive it, or the next ingest in the process writes to a closed stream."""
    from domain.core import progress
    from pipeline_defs.cli.main import main as cli_main

    monkeypatch.setenv("PIPELINE_DATABASE_URL", f"sqlite:///{tmp_path / 'app.db'}")
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    mine = progress.LoggingReporter()
    previous = progress.use_reporter(mine)
    try:
        cli_main(["pauses"])
        assert progress.use_reporter(mine) is mine
    finally:
        progress.use_reporter(previous)
