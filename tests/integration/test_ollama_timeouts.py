"""A generation that times out: the item's fault while the server answers, an outage when it does not."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from sqlalchemy import select
from werkzeug import Request, Response

from appdb.database import session_scope
from appdb.models import Interaction, WorkItem
from domain.language.llm_types import BackendUnavailable, ItemError
from pipeline_defs.settings import Settings
from resources.ollama_backend import OllamaResource
from tests.support.postings import run_use_case, seed_postings

TIMEOUT = 0.3
MODEL = "gemma3:270m"


class SlowOllama:
    """Ollama's API on its own threaded server, so the liveness probe is answered while a generation hangs.

    A generation for a posting whose title starts with `hang_on` never answers in time (it
    waits until the test ends); other generations get a summary. Loads (empty prompt) answer at once unless
    `hang_loads`.
    """

    def __init__(self, hang_on: str = "") -> None:
        self.hang_on = hang_on
        self.hang_loads = False
        self.stop_before_hanging = False
        self.released = threading.Event()
        self.server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
        self.server.expect_request("/api/generate", method="POST").respond_with_handler(self.generate)
        self.server.expect_request("/api/tags").respond_with_json({"models": []})
        self.server.start()

    @property
    def host(self) -> str:
        return self.server.url_for("/").rstrip("/")

    def generate(self, request: Request) -> Response:
        body = json.loads(request.data)
        prompt = body.get("prompt") or ""
        title = prompt.rsplit("Title: ", 1)[-1].split("\n", 1)[
            0
        ]  # the last title: the few-shot examples come first
        if (prompt and title.startswith(self.hang_on)) or (not prompt and self.hang_loads):
            if self.stop_before_hanging:
                self.server.stop()  # the server goes away while this request is in flight
            self.released.wait(timeout=30)
            return Response("{}", content_type="application/json")
        answer = {"model": body["model"], "done": True, "response": ""}
        if prompt:
            answer["response"] = json.dumps({"summary": f"A company hires a {title} for the work described."})
        return Response(json.dumps(answer), content_type="application/json")

    def close(self) -> None:
        self.released.set()
        if self.server.is_running():
            self.server.stop()


@pytest.fixture
def slow_ollama() -> Iterator[SlowOllama]:
    fake = SlowOllama()
    yield fake
    fake.close()


def test_a_generation_timeout_while_the_server_answers_is_the_items_error(slow_ollama: SlowOllama) -> None:
    llm = OllamaResource(host=slow_ollama.host, timeout_seconds=TIMEOUT)
    with pytest.raises(ItemError, match=r"generation timed out after 0.3s while the server was up"):
        llm.generate(MODEL, "Title: Baker\nSummary:", "", None, {})


def test_a_generation_timeout_after_the_server_went_away_is_an_outage(slow_ollama: SlowOllama) -> None:
    slow_ollama.stop_before_hanging = True
    llm = OllamaResource(host=slow_ollama.host, timeout_seconds=TIMEOUT, probe_timeout_seconds=TIMEOUT)
    llm.ensure_loaded(MODEL)
    with pytest.raises(BackendUnavailable, match="did not answer within 0.3s"):
        llm.generate(MODEL, "Title: Baker\nSummary:", "", None, {})


def test_a_model_load_that_times_out_stays_an_outage(slow_ollama: SlowOllama) -> None:
    """Loading a model is not any item's fault, even while the server answers."""
    slow_ollama.hang_loads = True
    with pytest.raises(BackendUnavailable, match="did not answer within 0.3s"):
        OllamaResource(host=slow_ollama.host, timeout_seconds=TIMEOUT).ensure_loaded(MODEL)


def test_in_a_run_a_slow_posting_spends_an_attempt_and_the_rest_of_the_batch_goes_on(
    slow_ollama: SlowOllama, sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    from pipeline_defs.definitions import build_definitions

    slow_ollama.hang_on = "Registered Nurse"
    seed_postings(sqlite_url, tmp_path)
    settings = Settings.from_env().changed(database_url=sqlite_url)
    defs = build_definitions(settings, llm=OllamaResource(host=slow_ollama.host, timeout_seconds=TIMEOUT))
    result = run_use_case(defs, dagster_instance, ["p-1", "p-2", "p-3"])
    assert result.success
    assert sorted(event.partition for event in result.get_asset_materialization_events()) == ["p-1", "p-3"]
    with session_scope(sqlite_url) as session:
        nurse = session.get(WorkItem, ("posting_summary", "p-2"))
        [interaction] = session.scalars(select(Interaction).where(Interaction.subject_key == "p-2")).all()
    assert (nurse.status, nurse.attempts) == ("pending", 1)
    assert "timed out after 0.3s while the server was up" in nurse.last_error
    assert interaction.status == "item_error"


class BlackHole:
    """A server that accepts connections and never answers (a hung Ollama, a port that swallows requests)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.accepted: list[socket.socket] = []
        self.closed = threading.Event()
        self.host = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(connection)  # read nothing, answer nothing

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        for connection in self.accepted:
            connection.close()


def test_a_black_hole_server_is_an_outage_within_the_probe_deadline() -> None:
    """Before: the warm-up load waited the whole `timeout_seconds` (120 s by default: `pipeline run`
    sat 722 s on such a server); now the warm-up probe gives up after `probe_timeout_seconds`."""
    hole = BlackHole()
    try:
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match=r"accepted the connection but did not answer within 1s"):
            OllamaResource(host=hole.host, timeout_seconds=60, probe_timeout_seconds=1).ensure_loaded(MODEL)
        assert time.monotonic() - started < 5
        assert hole.accepted  # it did accept: a connect check alone would not have caught it
    finally:
        hole.close()


def test_pipeline_run_against_a_black_hole_ends_soon_naming_the_host_with_nothing_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pipeline_defs.cli.main import main

    hole = BlackHole()
    url = f"sqlite:///{tmp_path / 'app.db'}"
    try:
        seed_postings(url, tmp_path)
        for name, value in {
            "PIPELINE_DATA_DIR": str(tmp_path / "data"),
            "PIPELINE_DATABASE_URL": url,
            "OLLAMA_HOST": hole.host,
            "PIPELINE_LLM_BACKEND": "ollama",
        }.items():
            monkeypatch.setenv(name, value)
        started = time.monotonic()
        code = main(["run", "--use-case", "posting_summary"])
        seconds = time.monotonic() - started
    finally:
        hole.close()
    printed = capsys.readouterr()
    assert code != 0 and seconds < 60
    assert f"Ollama at {hole.host}" in printed.out + printed.err
    with session_scope(url) as session:
        items = session.scalars(select(WorkItem)).all()
    assert items and all(item.attempts == 0 and item.status == "pending" for item in items)
