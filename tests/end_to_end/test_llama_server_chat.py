"""A real OpenAI-compatible server: llama-cpp-python's `llama_cpp.server` serving Gemma 3 270M, driven
in chat form through a Dagster run, as a user with their own server would configure it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import Interaction
from domain.language.chat_prompts import messages_of
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from resources.embedded_backend import BUNDLED_MODELS
from tests.support.live_pipeline import free_port
from tests.support.postings import run_use_case, seed_postings

pytestmark = pytest.mark.embedded_llm

ALIAS = "gemma-3-270m-server"
STARTUP_BOUND_SECONDS = 300.0  # loading a 246 MB model on a loaded 2-core machine


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("uvicorn", reason="llama_cpp.server needs its `server` extra (the dev extra has it)")
    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", BUNDLED_MODELS["gemma3:270m"](),
             "--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "4096"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_BOUND_SECONDS
        while True:
            assert server.poll() is None, f"llama_cpp.server exited: {log.read_text()[-2000:]}"
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"llama_cpp.server not up in {STARTUP_BOUND_SECONDS:.0f} s"
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_use_case_runs_in_chat_form_on_a_real_openai_compatible_server(
    llama_server: str, sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "PIPELINE_OPENAI_BASE_URL": llama_server,
        "PIPELINE_OPENAI_MODELS": f"gemma3:270m={ALIAS}",
        "PIPELINE_OPENAI_SCHEMA_FORMAT": "json_object",
        "PIPELINE_PROMPT_STYLE": "chat",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env().changed(database_url=sqlite_url)
    assert settings.llm_backend == "openai"
    seed_postings(sqlite_url, tmp_path)

    result = run_use_case(build_definitions(settings), dagster_instance, ["p-1", "p-2"])

    assert result.success
    with session_scope(sqlite_url) as session:
        interactions = session.scalars(select(Interaction)).all()
    assert {i.subject_key for i in interactions} == {"p-1", "p-2"}
    for interaction in interactions:
        messages = messages_of(interaction.prompt)
        assert messages is not None, "the interaction holds chat messages, not a completion prompt"
        assert messages[0]["role"] == "system" and "<posting>" in messages[-1]["content"]
        assert interaction.backend == "openai" and interaction.model == "gemma3:270m"
        # the server answered in the schema (json_object mode): parsed, or blocked by a content check
        assert interaction.status in ("ok", "item_error")
        if interaction.status == "ok":
            assert isinstance(interaction.parsed_output["summary"], str)
        else:
            assert interaction.error.startswith("blocked by check"), interaction.error
