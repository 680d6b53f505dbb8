"""Fakes shared by the tests: a local server speaking Ollama's API (pytest-httpserver), and a counter
of real llama.cpp model loads."""

from __future__ import annotations

import json

import llama_cpp
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response


class FakeOllama:
    """Answers /api/generate like Ollama: an empty prompt loads the model; others get a summary."""

    def __init__(self, server: HTTPServer, models: tuple[str, ...] = ("gemma3:270m",)) -> None:
        self.requests: list[dict] = []
        self.models = models
        server.expect_request("/api/generate", method="POST").respond_with_handler(self.handle)

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        self.requests.append(body)
        if body["model"] not in self.models:
            return Response(
                json.dumps({"error": f"model '{body['model']}' not found"}),
                status=404,
                content_type="application/json",
            )
        answer = {
            "model": body["model"],
            "created_at": "2026-11-22T01:00:00Z",
            "done": True,
            "done_reason": "load",
        }
        if body.get("prompt"):
            title = body["prompt"].rsplit("Title: ", 1)[-1].split("\n", 1)[0]
            answer.update(
                response=json.dumps({"summary": f"A company hires a {title} for the work described."}),
                done_reason="stop",
                prompt_eval_count=412,
                eval_count=31,
                total_duration=123_000_000,
            )
        else:
            answer["response"] = ""
        return Response(json.dumps(answer), content_type="application/json")

    @property
    def warmups(self) -> list[dict]:
        return [r for r in self.requests if not r.get("prompt")]

    @property
    def generations(self) -> list[dict]:
        return [r for r in self.requests if r.get("prompt")]


def counting_model_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every llama.cpp model load from now on (the list fills as models load)."""
    loads: list[str] = []

    class CountingLlama(llama_cpp.Llama):
        def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
            loads.append(kwargs.get("model_path"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(llama_cpp, "Llama", CountingLlama)
    return loads
