"""The OpenAI-compatible backend (vLLM, llama-server, LiteLLM, hosted APIs) against a local fake."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import Interaction, PacerBucket, UseCaseOutput, WorkItem
from domain.language.llm_types import BackendUnavailable, ItemError
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_llm_resource
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.openai_backend import OpenAICompatibleResource
from tests.support.fakes import FakeOpenAI
from tests.support.postings import run_use_case, seed_postings

SCHEMA = dict(POSTING_SUMMARY.output_schema)


def _resource(server: HTTPServer, **kwargs) -> OpenAICompatibleResource:  # noqa: ANN003
    return OpenAICompatibleResource(base_url=server.url_for("/v1"), **kwargs)


def test_completion_with_json_schema_options_and_token_counts(httpserver: HTTPServer) -> None:
    fake = FakeOpenAI(httpserver, models=("google/gemma-3-270m",))
    llm = _resource(
        httpserver,
        api_key="sk-test",
        model_names={"gemma3:270m": "google/gemma-3-270m"},
        extra_body={"repetition_penalty": 1.15},
    )
    result = llm.generate(
        "gemma3:270m", "Title: Baker\nSummary:", "be brief", SCHEMA, {"max_tokens": 99, "stop": ["\n\n"]}
    )
    [call] = fake.requests
    assert call["path"] == "/v1/completions" and call["authorization"] == "Bearer sk-test"
    assert call["model"] == "google/gemma-3-270m"
    assert call["prompt"] == "be brief\n\nTitle: Baker\nSummary:"
    assert call["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SCHEMA, "strict": True},
    }
    assert (call["max_tokens"], call["temperature"], call["seed"], call["stop"]) == (99, 0.0, 0, ["\n\n"])
    assert call["repetition_penalty"] == 1.15 and "repeat_penalty" not in call
    assert json.loads(result.text) == {"summary": "A company hires a Baker for the work described."}
    assert (result.prompt_tokens, result.completion_tokens) == (412, 31)
    assert llm.model_loads == 1


def test_chat_api_sends_system_and_user_messages(httpserver: HTTPServer) -> None:
    fake = FakeOpenAI(httpserver)
    result = _resource(httpserver, api="chat").generate("gemma3:270m", "Title: Cook", "be brief", SCHEMA, {})
    [call] = fake.requests
    assert call["path"] == "/v1/chat/completions" and call["authorization"] is None
    assert call["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "Title: Cook"},
    ]
    assert json.loads(result.text)["summary"].startswith("A company hires a Cook")


@pytest.mark.parametrize(
    ("status", "expected", "says"),
    [
        (404, BackendUnavailable, "not found"),
        (401, BackendUnavailable, "refused the API key"),
        (429, BackendUnavailable, "cannot serve now (HTTP 429)"),
        (503, BackendUnavailable, "cannot serve now (HTTP 503)"),
        (400, ItemError, "rejected the request (HTTP 400): maximum context length is 2048 tokens"),
    ],
)
def test_error_statuses_map_to_item_or_backend_errors(
    httpserver: HTTPServer, status: int, expected: type[Exception], says: str
) -> None:
    fake = FakeOpenAI(httpserver)
    fake.fail_with = (status, {"error": {"message": "maximum context length is 2048 tokens"}})
    with pytest.raises(expected) as error:
        _resource(httpserver).generate("gemma3:270m", "Title: Cook", "", SCHEMA, {})
    assert says in str(error.value) and httpserver.url_for("/v1") in str(error.value)


def test_unreachable_server_and_a_model_it_does_not_serve_are_backend_errors(httpserver: HTTPServer) -> None:
    with pytest.raises(
        BackendUnavailable, match="cannot reach the OpenAI-compatible server at http://127.0.0.1:9"
    ):
        OpenAICompatibleResource(base_url="http://127.0.0.1:9/v1").ensure_loaded("gemma3:270m")
    FakeOpenAI(httpserver)
    with pytest.raises(BackendUnavailable, match="model qwen3:8b"):
        _resource(httpserver).generate("qwen3:8b", "Title: Cook", "", SCHEMA, {})


def test_a_slow_answer_from_a_live_server_is_the_items_fault(httpserver: HTTPServer) -> None:
    FakeOpenAI(httpserver).delay_seconds = 1.0
    llm = _resource(httpserver, timeout_seconds=0.3)
    with pytest.raises(ItemError, match="timed out after 0.3s while"):
        llm.generate("gemma3:270m", "Title: Cook", "", SCHEMA, {})


def test_settings_select_the_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "openai")
    monkeypatch.setenv("PIPELINE_OPENAI_BASE_URL", "http://gpu-box:8000/v1")
    monkeypatch.setenv("PIPELINE_OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("PIPELINE_OPENAI_API", "chat")
    monkeypatch.setenv("PIPELINE_OPENAI_MODELS", "gemma3:270m=google/gemma-3-270m")
    llm = build_llm_resource(Settings.from_env())
    assert isinstance(llm, OpenAICompatibleResource)
    assert (llm.url, llm.api_key, llm.api) == ("http://gpu-box:8000/v1", "sk-x", "chat")
    assert llm.model_names == {"gemma3:270m": "google/gemma-3-270m"}
    monkeypatch.setenv("PIPELINE_OPENAI_API", "responses")
    with pytest.raises(ValueError, match="PIPELINE_OPENAI_API must be"):
        Settings.from_env()


def test_a_dagster_run_stores_outputs_and_traces_and_a_dead_server_spends_no_attempts(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    fake = FakeOpenAI(httpserver)
    seed_postings(sqlite_url, tmp_path)
    settings = Settings.from_env().changed(database_url=sqlite_url)
    defs = build_definitions(settings, llm=_resource(httpserver, max_in_flight=2))
    result = run_use_case(defs, dagster_instance, ["p-1", "p-2"])
    assert result.success and len(fake.requests) == 2
    with session_scope(sqlite_url) as session:
        outputs = {row.subject_key: row.value["summary"] for row in session.scalars(select(UseCaseOutput))}
        interactions = session.scalars(select(Interaction)).all()
    assert outputs["p-2"] == "A company hires a Registered Nurse for the work described."
    assert {(i.backend, i.status, i.prompt_tokens, i.completion_tokens) for i in interactions} == {
        ("openai", "ok", 412, 31)
    }
    dead = build_definitions(settings, llm=OpenAICompatibleResource(base_url="http://127.0.0.1:9/v1"))
    failed = run_use_case(dead, dagster_instance, ["p-3"])
    assert not failed.success
    with session_scope(sqlite_url) as session:
        item = session.get(WorkItem, ("posting_summary", "p-3"))
    assert (item.status, item.attempts) == ("pending", 0)


def test_requests_in_flight_follow_the_slots_llama_server_reports(httpserver: HTTPServer) -> None:
    FakeOpenAI(httpserver)
    httpserver.expect_request("/props").respond_with_json(
        {"total_slots": 6, "default_generation_settings": {}}
    )
    llm = _resource(httpserver, max_in_flight=2)
    assert llm.in_flight_limit == 2  # nothing known before the first use
    llm.ensure_loaded("gemma3:270m")
    assert llm.in_flight_limit == 6
    pinned = _resource(httpserver, hosts=[f"{httpserver.url_for('/v1')} parallel=3"])
    pinned.ensure_loaded("gemma3:270m")
    assert pinned.in_flight_limit == 3  # the operator's word wins


def test_json_object_schema_format_for_llama_cpp_python_server(httpserver: HTTPServer) -> None:
    """llama-cpp-python's server rejects response_format json_schema (HTTP 500, seen by hand); it takes
    {"type": "json_object", "schema": ...} instead."""
    fake = FakeOpenAI(httpserver)
    _resource(httpserver, api="chat", schema_format="json_object").generate(
        "gemma3:270m", "Title: Cook", "", SCHEMA, {}
    )
    assert fake.requests[0]["response_format"] == {"type": "json_object", "schema": SCHEMA}


def _paid(app_db_url: str, rate: float = 5.0) -> dict[str, Any]:
    """Prices and a pacer of `rate` requests a second in bursts of one, as the settings give them."""
    return {
        "prices": {"gemma3:270m": [1.0, 2.0]},
        "pace_per_second": rate,
        "pace_burst": 1,
        "pace_bucket": "openai:test",
        "pace_database_url": app_db_url,
    }


def test_a_remote_server_is_paced_and_priced_and_one_on_this_machine_is_not(app_db_url: str) -> None:
    # A GPU box or a hosted API is remote: PIPELINE_LLM_RATE_PER_SECOND and PIPELINE_MODEL_PRICES apply.
    paid = _paid(app_db_url, rate=1.0)
    remote = OpenAICompatibleResource(base_url="http://gpu-box:8000/v1", **paid)
    local = OpenAICompatibleResource(base_url="http://127.0.0.1:8080/v1", **paid)
    assert remote.cost_of("gemma3:270m", 1000, 500) == pytest.approx(2.0)
    assert local.cost_of("gemma3:270m", 1000, 500) == 0.0
    assert sum(local.pace() for _ in range(3)) == 0.0
    # One request a second in bursts of one: three requests span at least 2 s, however busy the machine
    # (a slow machine waits less, as the time passed refilled the bucket, but never spans less).
    started = time.monotonic()
    for _ in range(3):
        remote.pace()
    assert time.monotonic() - started >= 2.0 - 0.05
    # With several hosts, the host the run is pinned to decides.
    to_remote = OpenAICompatibleResource(hosts=["http://gpu-box:8000/v1", "http://127.0.0.1:8080/v1"], **paid)
    to_local = OpenAICompatibleResource(hosts=["http://127.0.0.1:8080/v1", "http://gpu-box:8000/v1"], **paid)
    assert to_remote.cost_of("gemma3:270m", 1000, 500) == pytest.approx(2.0)
    assert to_local.cost_of("gemma3:270m", 1000, 500) == 0.0


def test_with_several_hosts_each_host_gets_the_rate(app_db_url: str) -> None:
    hosts = ["http://gpu-a:8000/v1", "http://gpu-b:8000/v1"]
    on_a = OpenAICompatibleResource(hosts=hosts, **_paid(app_db_url, rate=1.0))  # a run pinned to gpu-a
    on_b = OpenAICompatibleResource(hosts=hosts[::-1], **_paid(app_db_url, rate=1.0))  # one to gpu-b
    assert on_a.pace() == 0.0
    assert on_b.pace() == 0.0  # gpu-a's request took no token of gpu-b's bucket
    assert on_a.pace() > 0.0  # gpu-a's own bucket is empty for a second
    with session_scope(app_db_url) as session:
        names = set(session.scalars(select(PacerBucket.name)))
    assert names == {"openai:http://gpu-a:8000/v1", "openai:http://gpu-b:8000/v1"}
