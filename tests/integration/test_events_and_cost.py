"""The event log and cost: each call's cost at the model's price (zero on a local backend), each run's
cost in the check's metadata and as a `run_cost` event, item errors by class, pauses and resumes with
their reasons, a paced backend's waits in the progress log; `pipeline events`, `status --by-source`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from sqlalchemy import select

from appdb import events, pauses
from appdb.database import session_scope
from appdb.models import Event, Interaction
from domain.language.llm_types import Generation
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.llm import LLMResource
from tests.support.postings import POSTINGS, run_use_case, seed_postings

KEYS = [posting["key"] for posting in POSTINGS]
PRICE = [0.5, 2.0]  # per 1,000 prompt and completion tokens


class PaidBackend(LLMResource):
    """A remote, priced backend: 100 prompt and 10 completion tokens a call; Electricians get bad JSON."""

    local: bool = False

    @property
    def backend_name(self) -> str:
        return "paid"

    @property
    def is_local(self) -> bool:
        return self.local

    def _load(self, model: str) -> Any:
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        title = prompt.rsplit("Title: ", 1)[1].split("\n", 1)[0]
        if title == "Electrician":
            return Generation("not json", 100, 10, 1.0)
        return Generation(json.dumps({"summary": f"A {title} job, summarized."}), 100, 10, 1.0)


def run_summary(url: str, tmp_path: Path, instance: DagsterInstance, llm: LLMResource):  # noqa: ANN201
    seed_postings(url, tmp_path)
    settings = Settings.from_env().changed(database_url=url)
    defs = build_definitions(settings, built=build_use_cases(settings, [POSTING_SUMMARY]), llm=llm)
    return run_use_case(defs, instance, KEYS)


def test_a_paid_backends_calls_and_run_carry_their_cost(
    app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    model = POSTING_SUMMARY.model
    llm = PaidBackend(prices={model: PRICE}, pace_per_second=5.0, pace_database_url=app_db_url)
    result = run_summary(app_db_url, tmp_path, dagster_instance, llm)
    per_call = (100 * PRICE[0] + 10 * PRICE[1]) / 1000
    with session_scope(app_db_url) as session:
        costs = list(session.scalars(select(Interaction.cost)))
        run_costs = list(session.scalars(select(Event).where(Event.kind == "run_cost")))
        errors = events.errors_by_class(session)
    assert costs == [pytest.approx(per_call)] * 3
    assert len(run_costs) == 1 and run_costs[0].cost == pytest.approx(3 * per_call)
    assert (run_costs[0].count, run_costs[0].prompt_tokens, run_costs[0].completion_tokens) == (3, 300, 30)
    run_tags = dagster_instance.get_run_by_id(result.run_id).tags
    assert run_tags["pipeline/cost_posting_summary"] == f"{3 * per_call:.6f} (3 calls, 330 tokens)"
    assert errors == {("posting_summary", "not_json"): 1} or list(errors) == [
        ("posting_summary", "ItemError")
    ]
    # The pacer (5 a second, bursts of 1) made the run wait, and the progress log says so.
    messages = [entry.user_message for entry in dagster_instance.all_logs(result.run_id)]
    assert any("waited for the pacer" in (message or "") for message in messages), messages[-5:]


def test_a_local_backend_costs_nothing_whatever_the_price(
    app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    llm = PaidBackend(local=True, prices={POSTING_SUMMARY.model: PRICE})
    run_summary(app_db_url, tmp_path, dagster_instance, llm)
    with session_scope(app_db_url) as session:
        assert list(session.scalars(select(Interaction.cost))) == [0.0] * 3
        assert session.scalars(select(Event.cost).where(Event.kind == "run_cost")).one() == 0.0


def test_pauses_and_resumes_are_logged_with_their_reasons(app_db_url: str) -> None:
    with session_scope(app_db_url) as session:
        pauses.pause_use_cases(session, ["posting_summary"], "ollama backend unavailable: refused")
        pauses.resume_use_cases(session, ["posting_summary"])
        pauses.pause_use_cases(session, ["posting_skills"], "ollama backend unavailable: refused")
        pauses.clear_pause(session, "posting_skills")
        logged = [(row.kind, row.use_case, row.reason) for row in events.list_events(session)]
    assert logged == [
        ("resume", "posting_skills", "the backend served again (trip count reset)"),
        ("pause", "posting_skills", "ollama backend unavailable: refused"),
        ("resume", "posting_summary", "resumed by hand"),
        ("pause", "posting_summary", "ollama backend unavailable: refused"),
    ]


def test_the_cli_shows_events_and_interactions_by_hour_and_source(
    app_db_url: str,
    tmp_path: Path,
    dagster_instance: DagsterInstance,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    run_summary(app_db_url, tmp_path, dagster_instance, PaidBackend(prices={POSTING_SUMMARY.model: PRICE}))
    capsys.readouterr()
    assert main(["events"]) == 0
    out = capsys.readouterr().out
    assert "run_cost" in out and "error" in out and "cost of the runs listed: 0.210000" in out
    assert main(["status", "--by-source"]) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["hour", "(UTC)", "test", "total"]
    assert row.split()[-2:] == ["3", "3"]
