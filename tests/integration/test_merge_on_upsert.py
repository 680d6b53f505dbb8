"""Two sources describe the same posting: ingest with a merge strategy keeps what each one adds."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from appdb.database import session_scope
from domain.core.merge import merge_fields
from pipeline_defs.cli.main import main
from plugins.postings.store.ingest import ingest_files
from plugins.postings.store.tables import Posting
from tests.support.postings import write_jsonl

BOARD = {
    "key": "acme-42",
    "title": "Data Engineer",
    "company": "Acme",
    "description": "Build pipelines.",
    "url": "https://board.example/acme-42",
}
CAREERS_PAGE = {
    "key": "acme-42",
    "title": "Data Engineer (Python)",
    "location": "Berlin",
    "description": "Build Python pipelines for telemetry with Dagster; on call one week a month.",
    "posted_at": "2026-11-01",
}


def stored(url: str) -> Posting:
    with session_scope(url) as session:
        return session.scalars(select(Posting).where(Posting.key == "acme-42")).one()


def test_two_sources_merge_into_one_posting_with_nothing_lost(app_db_url: str, tmp_path: Path) -> None:
    merge = merge_fields({"title": "longest", "description": "longest", "url": "first_non_empty"})
    with session_scope(app_db_url) as session:
        ingest_files(session, [write_jsonl(tmp_path / "board.jsonl", [BOARD])], merge)
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [write_jsonl(tmp_path / "careers.jsonl", [CAREERS_PAGE])], merge)
    assert report.updated == ["acme-42"]
    posting = stored(app_db_url)
    assert (posting.title, posting.company, posting.location, posting.url) == (
        "Data Engineer (Python)",
        "Acme",  # only the board knew it
        "Berlin",  # only the careers page knew it
        "https://board.example/acme-42",
    )
    assert posting.description == CAREERS_PAGE["description"]
    assert posting.posted_at is not None


def test_without_a_strategy_the_newest_row_replaces_the_stored_one(app_db_url: str, tmp_path: Path) -> None:
    with session_scope(app_db_url) as session:
        ingest_files(session, [write_jsonl(tmp_path / "board.jsonl", [BOARD])])
        ingest_files(session, [write_jsonl(tmp_path / "careers.jsonl", [CAREERS_PAGE])])
    posting = stored(app_db_url)
    assert posting.company is None and posting.url is None  # what the board said is gone


def test_the_cli_takes_a_merge_strategy(
    app_db_url: str,
    tmp_path: Path,
    monkeypatch,
    capsys,  # noqa: ANN001
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    board, careers = (
        write_jsonl(tmp_path / "b.jsonl", [BOARD]),
        write_jsonl(tmp_path / "c.jsonl", [CAREERS_PAGE]),
    )
    assert main(["ingest", str(board)]) == 0
    assert main(["ingest", "--merge", "keep_first", str(careers)]) == 0
    assert stored(app_db_url).title == "Data Engineer"
    assert main(["ingest", "--merge", "merge_fields", str(careers)]) == 0
    posting = stored(app_db_url)
    assert (posting.title, posting.company, posting.location) == ("Data Engineer (Python)", "Acme", "Berlin")
    assert main(["ingest", "--merge", "nope", str(careers)]) == 2
    assert "unknown merge strategy" in capsys.readouterr().err
