"""Ingest: good rows go in, bad rows are reported with file:line and why, nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from appdb import claims, discovery
from appdb.database import session_scope
from appdb.ingest import ingest_files
from appdb.models import Posting
from pipeline_defs.cli.main import main
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from tests.support.postings import POSTINGS, write_jsonl


def _count(url: str) -> int:
    with session_scope(url) as session:
        return session.scalar(select(func.count(Posting.id)))


def test_bad_rows_are_reported_and_good_rows_load(app_db_url: str, tmp_path: Path) -> None:
    good = POSTINGS[0]
    lines = [
        json.dumps(good),
        json.dumps({"key": "no-desc", "title": "Cook"}),
        json.dumps({"key": "bad-type", "title": "Cook", "description": ["a", "list"]}),
        json.dumps({"key": "p-2", "title": "Nurse", "description": "Night shifts on the ward."}),
        "{not json",
        json.dumps({**good, "description": "A second row with the same key."}),
        json.dumps(
            {"key": "bad-date", "title": "Cook", "description": "Cook pasta.", "posted_at": "yesterday"}
        ),
        "",
        json.dumps({"key": "a,b", "title": "Cook", "description": "Cook pasta."}),
    ]
    path = tmp_path / "postings.jsonl"
    path.write_bytes(
        ("\n".join(lines[:3]) + "\n").encode()
        + b'{"key": "latin1", "title": "Caf\xe9", "description": "x"}\n'
        + ("\n".join(lines[3:]) + "\n").encode()
    )
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    reasons = {rejection.line: rejection.reason for rejection in report.rejected}
    assert sorted(report.inserted) == ["p-1", "p-2"]
    assert reasons[2] == "missing 'description'"
    assert reasons[3] == "'description' must be text, got list"
    assert reasons[4].startswith("invalid UTF-8")
    assert reasons[6].startswith("invalid JSON")
    assert reasons[7] == "duplicate key 'p-1' (first at line 1, kept)"
    assert reasons[8].startswith("'posted_at' is not an ISO date")
    assert reasons[10].startswith("'key' may not contain ','")
    assert len(report.rejected) == 7
    assert str(report.rejected[0]) == f"{path}:2: missing 'description'"
    assert _count(app_db_url) == 2


def test_reingest_unchanged_changes_nothing_and_changed_description_makes_outputs_stale(
    app_db_url: str, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", POSTINGS)
    with session_scope(app_db_url) as session:
        assert len(ingest_files(session, [path]).inserted) == 3
    [summary] = [
        item for item in build_use_cases(Settings.from_env()) if item.use_case.name == "posting_summary"
    ]
    with session_scope(app_db_url) as session:
        for key in ("p-1", "p-2", "p-3"):
            assert claims.claim_items(session, "posting_summary", [key], "run-1") == [key]
            posting = session.scalar(select(Posting).where(Posting.key == key))
            assert claims.complete_item(
                session,
                "posting_summary",
                key,
                "run-1",
                {
                    "value": {"summary": "s"},
                    "model": summary.spec.model,
                    "backend": "b",
                    "use_case_version": summary.spec.version,
                    "input_hash": "h",
                    "posting_hash": posting.content_hash,
                },
            )
        assert discovery.find_pending_work(session, summary.spec) == []
        before = session.scalar(select(Posting.updated_at).where(Posting.key == "p-1"))

    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    assert (report.inserted, report.updated, len(report.unchanged)) == ([], [], 3)
    with session_scope(app_db_url) as session:
        assert session.scalar(select(Posting.updated_at).where(Posting.key == "p-1")) == before

    changed = [{**POSTINGS[0], "description": "Now a Rust and Kafka role."}, *POSTINGS[1:]]
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [write_jsonl(tmp_path / "b.jsonl", changed)])
    assert report.updated == ["p-1"]
    with session_scope(app_db_url) as session:
        assert discovery.find_pending_work(session, summary.spec) == ["p-1"]


def test_csv_reports_the_line_where_a_record_starts(app_db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "postings.csv"
    path.write_bytes(
        b"key,title,company,description\n"
        b'c-1,Baker,Crumb,"Bake bread.\nTwo lines of description."\n'
        b"c-2,Baker,Crumb,\n"
        b"c-3,Caf\xe9 manager,Crumb,Run the caf\xe9.\n"
        b"c-4,Baker,Crumb,Bake cakes.,extra\n"
        b"c-5,Baker,Crumb,Bake rolls.\n"
    )
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["c-1", "c-5"]
    assert [(r.line, r.reason) for r in report.rejected] == [
        (4, "missing 'description'"),
        (5, "invalid UTF-8"),
        (6, "more fields than the header has"),
    ]


def test_a_database_failure_leaves_nothing_half_written(
    app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import appdb.ingest as ingest_module

    first = write_jsonl(tmp_path / "first.jsonl", POSTINGS[:1])
    second = write_jsonl(tmp_path / "second.jsonl", POSTINGS[1:])
    real_upsert = ingest_module._upsert
    calls = []

    def failing_upsert(session, postings, report):  # noqa: ANN001
        calls.append(len(postings))
        if len(calls) == 2:
            raise RuntimeError("disk full")
        real_upsert(session, postings, report)

    monkeypatch.setattr(ingest_module, "_upsert", failing_upsert)
    with pytest.raises(RuntimeError), session_scope(app_db_url) as session:
        ingest_files(session, [first, second])
    assert _count(app_db_url) == 0


def test_cli_exit_code_tells_whether_rows_were_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    good = write_jsonl(tmp_path / "good.jsonl", POSTINGS)
    assert main(["ingest", str(good)]) == 0
    assert "3 new" in capsys.readouterr().out
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"key": "x", "title": "t"}])
    assert main(["ingest", str(bad)]) == 1
    assert f"rejected {bad}:1: missing 'description'" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "missing.jsonl")]) == 2


def test_posted_at_is_stored_in_utc_whatever_the_machine_time_zone(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        path = tmp_path / "tz.jsonl"
        path.write_bytes(
            b"\xef\xbb\xbf"  # a byte-order mark must not cost the first row
            + json.dumps({**POSTINGS[0], "posted_at": "2026-07-01T09:00:00Z"}).encode()
            + b"\n"
        )
        with session_scope(sqlite_url) as session:
            report = ingest_files(session, [path])
            stored = session.scalar(select(Posting.posted_at))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert report.inserted == ["p-1"] and not report.rejected
    assert stored.isoformat() == "2026-07-01T09:00:00"


def test_a_very_long_csv_field_is_ingested(sqlite_url: str, tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    long_description = "Operate the line. " * 12_000  # about 216,000 characters
    path.write_text(f'key,title,description\nlong-1,Operator,"{long_description}"\nshort-1,Operator,Short.\n')
    with session_scope(sqlite_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["long-1", "short-1"] and not report.rejected
