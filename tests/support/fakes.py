"""Fakes shared by the tests: a local server speaking Ollama's API (pytest-httpserver), and a counter
of real llama.cpp model loads."""

from __future__ import annotations

import json
import time

import llama_cpp
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

RAW_TEMPLATE = "{{ .Prompt }}"  # a base model's template in Ollama
GEMMA_CHAT_TEMPLATE = (  # an instruct model's (Ollama's gemma3 template, shortened): roles laid out
    '{{- range $i, $_ := .Messages }}<start_of_turn>{{ if eq .Role "user" }}user{{ else }}model{{ end }}\n'
    "{{ .Content }}<end_of_turn>\n{{ end }}<start_of_turn>model\n"
)


class FakeOllama:
    """Answers like Ollama: POST /api/generate and /api/chat (an empty prompt or no messages loads the
    model; others get a summary naming the last `Title:`), /api/show (the raw template of a base model,
    a chat template for `instruct` models), GET /api/tags. `requests`: every generate and chat body, with
    its `path`."""

    def __init__(
        self, server: HTTPServer, models: tuple[str, ...] = ("gemma3:270m",), instruct: tuple[str, ...] = ()
    ) -> None:
        self.requests: list[dict] = []
        self.shown: list[str] = []
        self.models = models + instruct
        self.instruct = instruct
        for path in ("/api/generate", "/api/chat"):
            server.expect_request(path, method="POST").respond_with_handler(self.handle)
        server.expect_request("/api/show", method="POST").respond_with_handler(self.show)
        server.expect_request("/api/tags", method="GET").respond_with_json(
            {"models": [{"name": model, "model": model} for model in self.models]}
        )

    def show(self, request: Request) -> Response:
        model = json.loads(request.data)["model"]
        self.shown.append(model)
        if model not in self.models:
            return Response(json.dumps({"error": f"model '{model}' not found"}), status=404)
        template = GEMMA_CHAT_TEMPLATE if model in self.instruct else RAW_TEMPLATE
        shown = {
            "template": template,
            "capabilities": ["completion"],
            "model_info": {"general.architecture": "gemma3"},
            "details": {"family": "gemma3", "format": "gguf"},
            "modified_at": "2026-11-22T01:00:00Z",
        }
        return Response(json.dumps(shown), content_type="application/json")

    def handle(self, request: Request) -> Response:
        body = {**json.loads(request.data), "path": request.path}
        if request.path == "/api/chat" and body.get("messages"):
            body["prompt"] = body["messages"][-1]["content"]  # what it answers to, as a generation
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
            text = json.dumps({"summary": f"A company hires a {title} for the work described."})
            if request.path == "/api/chat":
                answer["message"] = {"role": "assistant", "content": text}
            answer.update(
                response=text,
                done_reason="stop",
                prompt_eval_count=412,
                eval_count=31,
                total_duration=123_000_000,
            )
        else:
            answer["response"] = ""
            answer["message"] = {"role": "assistant", "content": ""}
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


class FakeOpenAI:
    """Answers like an OpenAI-compatible server (vLLM, llama-server): GET /v1/models, POST
    /v1/completions and /v1/chat/completions; a `response_format` schema with a summary gets a summary.
    `fail_with` (status, body) makes every generation answer that error instead; `delay_seconds` slows it."""

    def __init__(self, server: HTTPServer, models: tuple[str, ...] = ("gemma3:270m",)) -> None:
        self.requests: list[dict] = []
        self.models = models
        self.fail_with: tuple[int, dict] | None = None
        self.delay_seconds = 0.0
        server.expect_request("/v1/models", method="GET").respond_with_json(
            {"object": "list", "data": [{"id": model, "object": "model"} for model in models]}
        )
        for path in ("/v1/completions", "/v1/chat/completions"):
            server.expect_request(path, method="POST").respond_with_handler(self.handle)

    def handle(self, request: Request) -> Response:
        body = json.loads(request.data)
        self.requests.append(
            {**body, "path": request.path, "authorization": request.headers.get("Authorization")}
        )
        time.sleep(self.delay_seconds)
        if self.fail_with is not None:
            status, error = self.fail_with
            return Response(json.dumps(error), status=status, content_type="application/json")
        if body["model"] not in self.models:
            error = {"error": {"message": f"The model `{body['model']}` does not exist.", "code": 404}}
            return Response(json.dumps(error), status=404, content_type="application/json")
        prompt = body.get("prompt") or body["messages"][-1]["content"]
        title = prompt.rsplit("Title: ", 1)[-1].split("\n", 1)[0]
        text = json.dumps({"summary": f"A company hires a {title} for the work described."})
        if request.path.endswith("/chat/completions"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "stop"}
        usage = {"prompt_tokens": 412, "completion_tokens": 31, "total_tokens": 443}
        return Response(
            json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [choice], "usage": usage}),
            content_type="application/json",
        )
