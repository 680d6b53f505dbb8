"""Progress in the terminal: `pipeline run` shows per use case the subjects done of those planned, the
rate and the time left, on stderr, when stderr is a terminal or `--progress always` says so; piped or
captured output (CI, `> file`) gets no progress line, only the results."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from sqlalchemy import update

from appdb.database import migrate, session_scope
from appdb.models import UseCaseOutput, WorkItem, utcnow
from console.progress import RunProgress, progress_wanted
from pipeline_defs.cli.main import main
from tests.support.autodo_tree import write_sample_tree


@pytest.fixture(autouse=True)
def _a_wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole progress line, whatever terminal runs the tests (an 80-column one would clip it)."""
    monkeypatch.setenv("COLUMNS", "200")


def test_the_progress_line_counts_what_the_run_finished_with_rate_and_time_left(sqlite_url: str) -> None:
    migrate(sqlite_url)
    with session_scope(sqlite_url) as session:  # finished before the run: not counted
        session.add(WorkItem(use_case="posting_summary", subject_key="old", status="done"))
    screen = io.StringIO()
    progress = RunProgress(sqlite_url, enabled=True, stream=screen, poll_seconds=60)
    planned = {"posting_summary": 3, "posting_skills": 3}
    with progress.track("gemma3_270m", planned, "postings"), session_scope(sqlite_url) as session:
        now = utcnow()
        session.add_all(
            [
                WorkItem(use_case="posting_summary", subject_key="p-1", status="done", updated_at=now),
                WorkItem(
                    use_case="posting_summary",
                    subject_key="p-2",
                    status="failed",
                    attempts=3,
                    last_error="the model returned an empty response",
                    updated_at=now,
                ),
                WorkItem(use_case="posting_skills", subject_key="p-1", status="claimed", updated_at=now),
            ]
        )
    lines = screen.getvalue().split("\r")
    assert lines[1].startswith("gemma3_270m: posting_summary 0/3 (starting) · posting_skills 0/3 (starting)")
    final = lines[-1]
    assert final.startswith("gemma3_270m: posting_summary 1/3, 1 failed (") and " postings/s, " in final
    assert " left) · posting_skills 0/3 (starting) in " in final and final.endswith("s\x1b[K\n")


def test_no_progress_line_when_off_or_not_a_terminal(sqlite_url: str) -> None:
    migrate(sqlite_url)
    screen = io.StringIO()
    with RunProgress(sqlite_url, enabled=False, stream=screen).track("g", {"posting_summary": 3}, "postings"):
        pass
    assert screen.getvalue() == ""
    assert not progress_wanted("auto", screen) and progress_wanted("always", screen)
    assert not progress_wanted("never", screen)


@pytest.fixture
def autodo_items(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> None:
    """Work items scanned from a sample tree, the CLI pointed at them (autodo_context is a script: no
    model needed)."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings,autodo")
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.chdir(write_sample_tree(tmp_path))
    main(["autodo", "scan", "docs"])  # exits 1: the sample tree has bad input on purpose


def test_pipeline_run_shows_progress_when_asked_and_none_when_captured(
    autodo_items: None, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["run", "--use-case", "autodo_context", "--progress", "always"]) == 0
    shown = capsys.readouterr()
    final = shown.err.split("\r")[-1]
    assert final.startswith("autodo_context: autodo_context ") and "autodo items/s, done) in " in final
    done, planned = final.split()[2].split("/")
    assert done == planned and int(done) > 0
    assert "run 1 of" not in shown.out  # the progress line replaces the per-run lines

    with session_scope(os.environ["PIPELINE_DATABASE_URL"]) as session:  # outdated: pending again
        session.execute(
            update(UseCaseOutput)
            .where(UseCaseOutput.use_case == "autodo_context")
            .values(use_case_version="2000-01-01.1")
        )
    assert main(["run", "--use-case", "autodo_context"]) == 0  # stderr is not a terminal here
    quiet = capsys.readouterr()
    assert "\r" not in quiet.err and "/s" not in quiet.err
    assert "autodo_context: run 1 of 1 ..." in quiet.out
