"""Each shipped plugin works with the other turned off (PIPELINE_DOMAINS), through the generic
`pipeline run`, on SQLite and on PostgreSQL: it materializes the declared plugins' reference data only
(autodo alone has none; it once asked for the skills taxonomy's job by name and failed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appdb import reports
from appdb.database import session_scope
from pipeline_defs.cli.main import main
from plugins.autodo import autodo_store as store
from tests.support.autodo_tree import write_sample_tree
from tests.support.postings import POSTINGS, write_jsonl


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_db_url: str) -> str:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    return app_db_url


def _status(capsys: pytest.CaptureFixture[str]) -> dict:
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_autodo_alone_runs_through_pipeline_run(
    data_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PIPELINE_DOMAINS", "autodo")
    tree = write_sample_tree(tmp_path / "repo")
    monkeypatch.chdir(tree)
    assert main(["autodo", "scan"]) == 1  # the sample tree holds bad files on purpose; its items are stored
    assert main(["run", "--use-case", "autodo_context"]) == 0  # a script: no model needed
    status = _status(capsys)
    assert {row["use_case"] for row in status["use_cases"]} == {"autodo_context", "autodo_scope"}
    with session_scope(data_dir) as session:
        keys = list(store.stored_items(session))
        done = [key for key, use_case in reports.output_values(session, keys) if use_case == "autodo_context"]
    assert keys and sorted(done) == sorted(keys)


def test_postings_alone_run_through_pipeline_run(
    data_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings")
    assert main(["ingest", str(write_jsonl(tmp_path / "postings.jsonl", POSTINGS[:2]))]) == 0
    assert main(["run", "--use-case", "posting_skills"]) == 0  # the taxonomy first, then the tagger
    status = _status(capsys)
    assert "autodo_scope" not in {row["use_case"] for row in status["use_cases"]}
    with session_scope(data_dir) as session:
        values = reports.output_values(session, [posting["key"] for posting in POSTINGS[:2]])
    assert {use_case for _, use_case in values} == {"posting_skills"} and len(values) == 2
