"""The demo's listing says why a posting has no summary yet, not only "(none yet)".

With the faithfulness check blocking invented details, a third of the embedded model's first attempts
on the demo set end blocked; the listing names the phrase and when the posting is retried."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from appdb.database import session_scope
from appdb.models import WorkItem
from pipeline_defs.cli import run_commands
from pipeline_defs.cli.main import main
from plugins.postings.commands.demo_command import render_postings
from tests.support.postings import POSTINGS, seed_postings

BLOCKED = "blocked by check summary_faithful: summary states what the posting does not: 'France'"


def test_a_posting_without_a_summary_shows_why_and_what_happens_next(sqlite_url: str, tmp_path: Path) -> None:
    seed_postings(sqlite_url, tmp_path)
    with session_scope(sqlite_url) as session:
        session.add(
            WorkItem(
                use_case="posting_summary",
                subject_key="p-3",
                status="pending",
                attempts=1,
                last_error=BLOCKED,
                next_attempt_at=datetime(2026, 11, 23, 19, 50, 12),
            )
        )
        session.add(
            WorkItem(
                use_case="posting_summary",
                subject_key="p-2",
                status="failed",
                attempts=3,
                last_error="bad JSON",
            )
        )
    with session_scope(sqlite_url) as session:
        listing = render_postings(session, [posting["key"] for posting in POSTINGS])

    lines = listing.splitlines()  # each posting: its title line, then its summary line
    summary_of = {
        line.split()[0]: lines[number + 1] for number, line in enumerate(lines) if line.startswith("p-")
    }
    assert "retried by a run after 19:50:12 UTC" in summary_of["p-3"] and "'France'" in summary_of["p-3"]
    assert "parked after 3 attempts" in summary_of["p-2"] and "bad JSON" in summary_of["p-2"]
    assert summary_of["p-1"].endswith("(none yet)")  # never tried: nothing to explain


def test_the_demo_ends_by_writing_its_enriched_postings_to_parquet_and_says_where(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make demo`'s last lines name the Parquet file of its postings (no model here: the runs are
    skipped, so every output column is null, and every posting is still a row)."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    monkeypatch.setattr(run_commands, "run_all", lambda *args, **kwargs: run_commands.RunOutcome())

    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    path = tmp_path / "data" / "exports" / "enriched_postings.parquet"
    assert f"enriched postings: 25 rows in {path}" in out
    assert f"pd.read_parquet('{path}')" in out
    frame = pd.read_parquet(path)
    assert len(frame) == 25 and frame["key"].iloc[0] == "demo-001" and frame["summary"].isna().all()
