"""Retirement: finished postings lose their Dagster partition and keep their outputs and traces."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pytest_httpserver import HTTPServer
from sqlalchemy import func, select

from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput
from assets.retention import retirable, retire_partitions
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.ollama_backend import OllamaResource
from tests.support.fakes import FakeOllama
from tests.support.postings import POSTINGS, run_use_case, seed_postings


def test_only_finished_postings_are_retired_and_their_outputs_stay(
    httpserver: HTTPServer, app_db_url: str, tmp_path: Path, dagster_instance
) -> None:
    FakeOllama(httpserver)
    seed_postings(app_db_url, tmp_path)
    settings = Settings.from_env().changed(database_url=app_db_url)
    llm = OllamaResource(host=httpserver.url_for("/").rstrip("/"))
    defs = build_definitions(settings, use_cases=[POSTING_SUMMARY], llm=llm)
    assert run_use_case(defs, dagster_instance, ["p-1", "p-2"]).success
    dagster_instance.add_dynamic_partitions("postings", ["p-3"])  # registered, not yet processed
    [spec] = [item.spec for item in build_use_cases(settings, [POSTING_SUMMARY])]
    tomorrow = datetime.now(UTC).replace(tzinfo=None) + timedelta(days=1)
    with session_scope(app_db_url) as session:
        assert retirable(session, [spec], tomorrow - timedelta(days=2)) == []  # finished today, not before
        keys = retirable(session, [spec], tomorrow)
    assert keys == ["p-1", "p-2"]
    assert retire_partitions(dagster_instance, "postings", keys) == 2
    assert dagster_instance.get_dynamic_partitions("postings") == ["p-3"]
    with session_scope(app_db_url) as session:
        assert session.scalar(select(func.count()).select_from(UseCaseOutput)) == 2
        assert session.scalar(select(func.count()).select_from(Interaction)) == 2
        # a changed posting needs work again: it is no longer finished
        seed_postings(app_db_url, tmp_path, [{**POSTINGS[0], "title": "Senior Data Engineer"}])
    with session_scope(app_db_url) as session:
        assert retirable(session, [spec], tomorrow) == ["p-2"]


def test_retire_command_dry_run_and_a_bad_date(
    tmp_path: Path,
    monkeypatch,
    capsys,  # noqa: ANN001
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    assert main(["migrate"]) == 0
    assert main(["retire", "--finished-before", "2026-01-01", "--dry-run"]) == 0
    assert "0 postings finished before 2026-01-01 00:00 UTC; dry run" in capsys.readouterr().out
    assert main(["retire", "--finished-before", "last week"]) != 0
    assert "--finished-before takes YYYY-MM-DD, not 'last week'" in capsys.readouterr().err
