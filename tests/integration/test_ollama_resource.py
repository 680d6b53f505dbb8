"""The Ollama resource against a local HTTP server that speaks Ollama's API shapes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from dagster import AssetKey
from pytest_httpserver import HTTPServer
from sqlalchemy import select
from werkzeug import Request, Response

from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput, WorkItem
from domain.language.llm_types import BackendUnavailable
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.ollama_backend import OllamaResource
from tests.support.fakes import FakeOllama
from tests.support.postings import database_goes_away_on, run_use_case, seed_postings


def test_warm_up_then_generate_with_keep_alive_format_and_options(httpserver: HTTPServer) -> None:
    fake = FakeOllama(httpserver)
    llm = OllamaResource(host=httpserver.url_for("/").rstrip("/"), keep_alive="45m")
    schema = dict(POSTING_SUMMARY.output_schema)
    first = llm.generate(
        "gemma3:270m",
        "Title: Baker\nSummary:",
        "be brief",
        schema,
        {"max_tokens": 99, "temperature": 0.2, "stop": ["\n\n"]},
    )
    llm.generate("gemma3:270m", "Title: Cook\nSummary:", "", schema, {})
    assert llm.model_loads == 1
    assert [r["keep_alive"] for r in fake.requests] == ["45m", "45m", "45m"]
    assert fake.warmups == [fake.requests[0]]
    call = fake.generations[0]
    assert call["format"] == schema
    assert call["system"] == "be brief"
    assert call["raw"] is True
    assert call["options"]["num_predict"] == 99 and call["options"]["temperature"] == 0.2
    assert call["options"]["stop"] == ["\n\n"]
    assert json.loads(first.text) == {"summary": "A company hires a Baker for the work described."}
    assert (first.prompt_tokens, first.completion_tokens) == (412, 31)


def test_warm_up_sends_the_load_time_options_of_the_calls_so_the_model_is_not_reloaded(
    httpserver: HTTPServer,
) -> None:
    """Ollama reloads a model when a call's num_ctx (or num_gpu, ...) differs from the loaded one's."""
    fake = FakeOllama(httpserver)
    llm = OllamaResource(
        host=httpserver.url_for("/").rstrip("/"), options={"num_ctx": 8192, "num_gpu": 99, "top_k": 20}
    )
    llm.generate("gemma3:270m", "Title: Baker\nSummary:", "", None, {})
    [warmup], [call] = fake.warmups, fake.generations
    assert warmup["options"] == {"num_ctx": 8192, "num_gpu": 99}
    assert {name: call["options"][name] for name in ("num_ctx", "num_gpu")} == warmup["options"]


def test_missing_model_names_host_model_and_pull_command(httpserver: HTTPServer) -> None:
    FakeOllama(httpserver, models=())
    host = httpserver.url_for("/").rstrip("/")
    with pytest.raises(BackendUnavailable) as error:
        OllamaResource(host=host).ensure_loaded("qwen3:8b")
    assert host in str(error.value)
    assert "ollama pull qwen3:8b" in str(error.value)


def test_unreachable_server_is_a_clear_backend_error() -> None:
    with pytest.raises(BackendUnavailable) as error:
        OllamaResource(host="http://127.0.0.1:9").ensure_loaded("gemma3:270m")
    assert "cannot reach Ollama at http://127.0.0.1:9" in str(error.value)
    assert "gemma3:270m" in str(error.value)


def test_timeout_is_a_backend_error(httpserver: HTTPServer) -> None:
    def slow(request: Request) -> Response:
        time.sleep(1.5)
        return Response("{}", content_type="application/json")

    httpserver.expect_request("/api/generate").respond_with_handler(slow)
    llm = OllamaResource(host=httpserver.url_for("/").rstrip("/"), timeout_seconds=0.3)
    with pytest.raises(BackendUnavailable, match="did not answer within 0.3s"):
        llm.ensure_loaded("gemma3:270m")


def test_a_dagster_run_loads_the_model_once_for_the_whole_batch(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    fake = FakeOllama(httpserver)
    seed_postings(sqlite_url, tmp_path)
    llm = OllamaResource(host=httpserver.url_for("/").rstrip("/"))
    defs = build_definitions(_settings(sqlite_url), llm=llm)
    result = run_use_case(defs, dagster_instance, ["p-1", "p-2", "p-3"])
    assert result.success
    assert len(fake.warmups) == 1 and len(fake.generations) == 3
    materialized = {event.partition for event in result.get_asset_materialization_events()}
    assert materialized == {"p-1", "p-2", "p-3"}
    with session_scope(sqlite_url) as session:
        outputs = {row.subject_key: row.value["summary"] for row in session.scalars(select(UseCaseOutput))}
        interactions = session.scalars(select(Interaction)).all()
    assert outputs["p-2"] == "A company hires a Registered Nurse for the work described."
    assert {(i.backend, i.source, i.status) for i in interactions} == {("ollama", "test", "ok")}
    assert sorted(i.prompt for i in interactions) == sorted(r["prompt"] for r in fake.generations)

    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "outputs_valid"]
    assert check.passed and check.metadata["done"].value == 3 and check.metadata["failed"].value == 0

    again = run_use_case(defs, dagster_instance, ["p-1", "p-2", "p-3"])
    assert again.success and len(fake.generations) == 3  # all current: skipped, no calls, no model load
    assert len(fake.warmups) == 1
    # it evaluated nothing, so it reports no check result (the checks of the outputs stay the ones shown)
    assert not again.get_asset_check_evaluations()


def test_an_unreachable_backend_ends_the_run_and_spends_no_attempts(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    seed_postings(sqlite_url, tmp_path)
    defs = build_definitions(_settings(sqlite_url), llm=OllamaResource(host="http://127.0.0.1:9"))
    result = run_use_case(defs, dagster_instance, ["p-1", "p-2", "p-3"])
    assert not result.success
    [failure] = [event for event in result.all_events if event.event_type_value == "STEP_FAILURE"]
    assert "the LLM backend is unavailable" in failure.event_specific_data.error.message
    with session_scope(sqlite_url) as session:
        items = session.scalars(select(WorkItem)).all()
    assert [(i.status, i.attempts) for i in items] == [("pending", 0)] * 3


def _settings(url: str) -> Settings:

    return Settings.from_env().changed(database_url=url)


@pytest.mark.parametrize("answers", ["as they come", "all in at once"])
def test_an_unexpected_error_mid_batch_gives_the_claims_back_at_once(
    answers: str,
    httpserver: HTTPServer,
    sqlite_url: str,
    tmp_path: Path,
    dagster_instance,  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The answer stored before the error stays stored, also when the answers came in together and
    were being stored in one transaction (a busy server's: `generate_in_ready_groups`): then they are
    stored again one at a time, and the failing one fails alone."""
    from assets import single_call

    if answers == "all in at once":
        grouped = single_call.generate_in_ready_groups

        def one_group(llm, requests, most, **kwargs):  # noqa: ANN001, ANN003, ANN202
            return [[pair for group in grouped(llm, requests, most, **kwargs) for pair in group]]

        monkeypatch.setattr(single_call, "generate_in_ready_groups", one_group)
    FakeOllama(httpserver)
    seed_postings(sqlite_url, tmp_path)
    database_goes_away_on(monkeypatch, "p-2")
    llm = OllamaResource(host=httpserver.url_for("/").rstrip("/"))
    defs = build_definitions(_settings(sqlite_url), llm=llm)
    result = run_use_case(defs, dagster_instance, ["p-1", "p-2", "p-3"])
    assert not result.success
    with session_scope(sqlite_url) as session:
        items = session.scalars(select(WorkItem)).all()
    states = {item.subject_key: (item.status, item.attempts) for item in items}
    assert states == {"p-1": ("done", 0), "p-2": ("pending", 0), "p-3": ("pending", 0)}
    assert dagster_instance.get_materialized_partitions(AssetKey("posting_summary")) == {"p-1"}


def test_a_bad_model_output_is_a_recorded_item_error_and_the_rest_of_the_batch_goes_on(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    fake = FakeOllama(httpserver)
    good_handle = fake.handle

    def nurse_breaks_the_schema(request: Request) -> Response:
        body = json.loads(request.data)
        if body.get("prompt", "").rsplit("Title: ", 1)[-1].startswith("Registered Nurse"):
            fake.requests.append(body)
            return Response(
                json.dumps({"model": body["model"], "response": '{"summary": ', "done": True}),
                content_type="application/json",
            )
        return good_handle(request)

    fake.handle = nurse_breaks_the_schema
    httpserver.clear()
    httpserver.expect_request("/api/generate", method="POST").respond_with_handler(nurse_breaks_the_schema)
    seed_postings(sqlite_url, tmp_path)
    defs = build_definitions(
        _settings(sqlite_url), llm=OllamaResource(host=httpserver.url_for("/").rstrip("/"))
    )
    result = run_use_case(defs, dagster_instance, ["p-1", "p-2", "p-3"])
    assert result.success
    assert sorted(event.partition for event in result.get_asset_materialization_events()) == ["p-1", "p-3"]
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == "outputs_valid"]
    assert not check.passed and [row.data["posting"] for row in check.metadata["failures"].records] == ["p-2"]
    with session_scope(sqlite_url) as session:
        item = session.get(WorkItem, ("posting_summary", "p-2"))
        [interaction] = session.scalars(select(Interaction).where(Interaction.subject_key == "p-2")).all()
    assert (item.status, item.attempts) == ("pending", 1) and item.next_attempt_at is not None
    assert interaction.status == "item_error" and interaction.raw_response == '{"summary": '
    assert interaction.error.startswith("the response is not valid JSON")
