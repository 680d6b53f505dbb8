"""A connection that drops mid-request while the model server is up: the request goes once more and the
run goes on; dropped again, or the server gone, it is an outage as before (no attempt spent, a pause).
One reset used to pause posting_summary for five minutes in a 100,000-posting run."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from appdb import pauses
from appdb.database import session_scope
from appdb.models import UseCaseOutput, WorkItem
from domain.language.llm_types import BackendUnavailable
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.ollama_backend import OllamaResource
from tests.support.fake_ollama_server import FakeOllamaServer
from tests.support.postings import POSTINGS, run_use_case, seed_postings

KEYS = [posting["key"] for posting in POSTINGS]
SCHEMA = dict(POSTING_SUMMARY.output_schema)


def test_a_run_whose_connection_drops_once_goes_on_with_no_pause(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(sqlite_url, tmp_path)
    with FakeOllamaServer() as server:
        server.drop_next(1)
        defs = build_definitions(
            Settings.from_env().changed(database_url=sqlite_url),
            use_cases=[POSTING_SUMMARY],
            llm=OllamaResource(host=server.url),
        )
        assert run_use_case(defs, dagster_instance, KEYS).success
        sent = [request["prompt"] for request in server.generations]
    assert len(sent) == len(KEYS) + 1 and len(set(sent)) == len(KEYS)  # one prompt sent twice
    with session_scope(sqlite_url) as session:
        assert sorted(session.scalars(select(UseCaseOutput.subject_key))) == KEYS
        assert set(session.execute(select(WorkItem.status, WorkItem.attempts))) == {("done", 0)}
        assert pauses.active_pauses(session) == {}


def test_a_connection_dropped_twice_is_an_outage() -> None:
    with FakeOllamaServer() as server:
        server.drop_next(2)
        llm = OllamaResource(host=server.url)
        with pytest.raises(BackendUnavailable, match="HTTP error talking to Ollama"):
            llm.generate("gemma3:270m", "Title: Baker\nSummary:", "", SCHEMA, {})
        assert len(server.generations) == 2  # the first, and once more: no third try
