"""A user's own model on their own server, chosen by configuration: an instruct model gets the task as a
system message and the posting in a message of its own, a base model the few-shot completion; a remote
Ollama is paced and priced; `pipeline config --check` asks the server; bad settings are one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput
from domain.language.chat_prompts import messages_of
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.ollama_backend import OllamaResource
from resources.openai_backend import OpenAICompatibleResource
from tests.support.fakes import FakeOllama, FakeOpenAI
from tests.support.postings import run_use_case, seed_postings

INSTRUCT = "qwen2.5:7b-instruct"
KEYS = ["p-1", "p-2", "p-3"]


def _summaries(monkeypatch: pytest.MonkeyPatch, url: str, tmp_path: Path, instance, llm, **env: str):  # noqa: ANN001, ANN201
    """Summarize the seeded postings in one Dagster run under the environment `env`."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seed_postings(url, tmp_path)
    result = run_use_case(
        build_definitions(Settings.from_env().changed(database_url=url), llm=llm), instance, KEYS
    )
    assert result.success
    with session_scope(url) as session:
        outputs = {row.subject_key: row.value["summary"] for row in session.scalars(select(UseCaseOutput))}
        interactions = session.scalars(select(Interaction)).all()
    return outputs, interactions


def test_an_instruct_model_on_ollama_gets_the_task_as_system_and_the_posting_as_its_own_message(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeOllama(httpserver, instruct=(INSTRUCT,))
    llm = OllamaResource(host=httpserver.url_for("/").rstrip("/"), keep_alive="45m")
    outputs, interactions = _summaries(
        monkeypatch,
        sqlite_url,
        tmp_path,
        dagster_instance,
        llm,
        OLLAMA_HOST=llm.host,
        PIPELINE_MODEL=INSTRUCT,
    )

    assert fake.shown == [INSTRUCT]  # auto: the server's template for the model decides, asked once
    calls = fake.generations
    assert len(calls) == 3 and {call["path"] for call in calls} == {"/api/chat"}
    for call in calls:
        roles = [message["role"] for message in call["messages"]]
        assert roles[0] == "system" and roles[-1] == "user"
        assert "summarize job postings" in call["messages"][0]["content"]
        # few-shot examples as earlier turns; the posting alone in the last message
        assert roles[1:-1] == ["user", "assistant"] * ((len(roles) - 2) // 2)
        assert "<posting>" in call["messages"][-1]["content"]
        assert call["format"] == dict(POSTING_SUMMARY.output_schema)
        assert call["keep_alive"] == "45m" and call["model"] == INSTRUCT
        assert call["options"]["num_predict"] > 0
    titles = sorted(
        call["messages"][-1]["content"].split("Title: ", 1)[1].split("\n", 1)[0] for call in calls
    )
    assert titles == ["Data Engineer", "Electrician", "Registered Nurse"]
    assert outputs["p-2"] == "A company hires a Registered Nurse for the work described."
    # traceable: the exact messages are stored, with the model that answered them
    assert {i.model for i in interactions} == {INSTRUCT}
    assert sorted(json.dumps(messages_of(i.prompt)) for i in interactions) == sorted(
        json.dumps(call["messages"]) for call in calls
    )


@pytest.mark.parametrize(
    ("env", "model"),
    [({}, "gemma3:270m"), ({"PIPELINE_MODEL": INSTRUCT, "PIPELINE_PROMPT_STYLE": "completion"}, INSTRUCT)],
    ids=["base-model-auto", "instruct-model-forced-completion"],
)
def test_a_base_model_or_a_forced_completion_gets_the_raw_few_shot_prompt(
    httpserver: HTTPServer,
    sqlite_url: str,
    tmp_path: Path,
    dagster_instance,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    model: str,
) -> None:
    fake = FakeOllama(httpserver, instruct=(INSTRUCT,))
    llm = OllamaResource(host=httpserver.url_for("/").rstrip("/"))
    _summaries(monkeypatch, sqlite_url, tmp_path, dagster_instance, llm, OLLAMA_HOST=llm.host, **env)
    calls = fake.generations
    assert len(calls) == 3
    assert {(call["path"], call["raw"], call["model"]) for call in calls} == {("/api/generate", True, model)}
    assert all(call["prompt"].rstrip().endswith("Summary:") or "Title:" in call["prompt"] for call in calls)


def test_an_openai_compatible_server_gets_chat_messages_and_the_schema_as_response_format(
    httpserver: HTTPServer, sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeOpenAI(httpserver, models=(INSTRUCT,))
    llm = OpenAICompatibleResource(base_url=httpserver.url_for("/v1"), api="chat")
    outputs, _ = _summaries(
        monkeypatch,
        sqlite_url,
        tmp_path,
        dagster_instance,
        llm,
        PIPELINE_OPENAI_BASE_URL=llm.base_url,
        PIPELINE_MODEL=INSTRUCT,
    )
    calls = [r for r in fake.requests if r["path"] == "/v1/chat/completions"]
    assert len(calls) == 3 and len(outputs) == 3
    for call in calls:
        assert call["messages"][0]["role"] == "system" and call["messages"][-1]["role"] == "user"
        assert "<posting>" in call["messages"][-1]["content"]
        assert call["response_format"]["type"] == "json_schema"
        assert call["response_format"]["json_schema"]["schema"] == dict(POSTING_SUMMARY.output_schema)


def test_a_remote_ollama_is_paced_and_priced_and_one_on_this_machine_is_not(app_db_url: str) -> None:
    """Every Ollama server counted as local once (`is_local` lacked @property): never paced, cost 0."""
    paid = {
        "prices": {INSTRUCT: [1.0, 2.0]},
        "pace_per_second": 1.0,
        "pace_burst": 1,
        "pace_bucket": "ollama:test",
        "pace_database_url": app_db_url,
    }
    remote = OllamaResource(host="http://gpu-box:11434", **paid)
    local = OllamaResource(host="http://127.0.0.1:11434", **paid)
    assert remote.is_local is False and local.is_local is True
    assert remote.cost_of(INSTRUCT, 1000, 500) == pytest.approx(2.0)
    assert local.cost_of(INSTRUCT, 1000, 500) == 0.0
    assert sum(local.pace() for _ in range(3)) == 0.0
    started = time.monotonic()  # 1 a second in bursts of one: 3 requests span >= 2 s, however busy
    for _ in range(3):
        remote.pace()
    assert time.monotonic() - started >= 2.0 - 0.05


def test_config_check_says_which_models_the_server_serves_and_how_to_get_the_others(
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    FakeOllama(httpserver, models=(), instruct=(INSTRUCT,))
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OLLAMA_HOST", httpserver.url_for("/").rstrip("/"))
    monkeypatch.setenv("PIPELINE_MODEL", INSTRUCT)
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings")
    assert main(["config", "--check", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["use_case"] for r in rows} >= {"posting_summary"}
    assert {(r["model"], r["served"]) for r in rows} == {(INSTRUCT, "yes")}
    assert all("chat prompts" in r["detail"] for r in rows)

    monkeypatch.setenv("PIPELINE_MODELS", "posting_summary=llama3.1:8b")
    assert main(["config", "--check"]) == 1
    out = capsys.readouterr().out
    [missing] = [line for line in out.splitlines() if "llama3.1:8b" in line]
    assert "posting_summary" in missing and "NO" in missing and "ollama pull llama3.1:8b" in missing


def test_config_check_names_the_setting_that_adds_a_model_to_the_embedded_backend(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings")
    monkeypatch.setenv("PIPELINE_MODELS", "posting_summary=qwen2.5:7b")
    assert main(["config", "--check"]) == 1
    [missing] = [line for line in capsys.readouterr().out.splitlines() if "qwen2.5:7b" in line]
    assert "PIPELINE_EMBEDDED_MODELS" in missing and "model_paths" not in missing


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("PIPELINE_PROMPT_STYLE", "chatty", "chatty"),
        ("PIPELINE_PROMPT_STYLES", "posting_summary=chatty", "chatty"),
        ("PIPELINE_MODELS", "posting_sumary=llama3.1:8b", "posting_sumary"),
        ("PIPELINE_BACKENDS", "posting_summary=vllm", "vllm"),
    ],
)
def test_a_bad_model_setting_is_one_line_naming_the_variable_and_the_value(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    named: str,
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv(variable, value)
    assert main(["config"]) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert variable in err and named in err
    assert "Traceback" not in err
