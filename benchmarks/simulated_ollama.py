"""A stand-in Ollama server for throughput benchmarks: Ollama's real API shapes, a fixed latency.

    python -m benchmarks.simulated_ollama [--port 11500] [--latency-ms 100] [--parallel 1] [--models A,B]

It answers /api/generate, /api/chat, /api/tags, /api/show, /api/ps and /api/version
like Ollama does. Every generation takes `--latency-ms` (a sleep standing in for a GPU)
and at most `--parallel` generations run at once, like OLLAMA_NUM_PARALLEL; the others
wait in a queue. An empty prompt loads the model (counted, as Ollama would load it)
and returns at once, as Ollama does for a model already in memory.

Answers are valid for the shipped use cases, so the pipeline does no retries: a
request whose `format` asks for a `summary` gets a short summary; one that asks for
`knowledge` and `skills` gets two short phrases copied from the posting in the
prompt (so grounding keeps them); any other schema gets an object with the required
properties filled with empty values of their type.

GET /stats returns what it served (loads, generations, peak concurrency) as JSON;
GET /stats/timeline the wall-clock start and end of every generation (to find the idle gaps);
POST /stats/reset zeroes both. Figures measured against this server are *simulated*
backend figures: they show the orchestration around the LLM, not a model's speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_DETAILS = {
    "parent_model": "",
    "format": "gguf",
    "family": "gemma3",
    "families": ["gemma3"],
    "parameter_size": "268.10M",
    "quantization_level": "Q8_0",
}
_SENTENCE_END = re.compile(r"[.!?;]$")


class SimulatedOllama:
    """The server's state: latency, parallel slots, and what it served."""

    def __init__(self, latency_ms: float, parallel: int, models: tuple[str, ...] = ("gemma3:270m",)) -> None:
        self.latency_s = latency_ms / 1000
        self.parallel = parallel
        self.models = models
        self.slots = threading.BoundedSemaphore(parallel)
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.loads: dict[str, int] = {}
            self.timeline: list[tuple[float, float]] = []
            self.generations = 0
            self.active = 0
            self.peak_active = 0

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "latency_ms": self.latency_s * 1000,
                "parallel": self.parallel,
                "loads": dict(self.loads),
                "generations": self.generations,
                "peak_concurrent_generations": self.peak_active,
            }

    def generate(self, model: str, prompt: str, schema: Any) -> str:
        """Hold a slot for the configured latency, then answer."""
        with self.slots:
            with self.lock:
                self.active += 1
                self.peak_active = max(self.peak_active, self.active)
            started = time.time()
            try:
                time.sleep(self.latency_s)
            finally:
                with self.lock:
                    self.active -= 1
                    self.generations += 1
                    self.timeline.append((started, time.time()))
        return answer_for(prompt, schema)

    def load(self, model: str) -> None:
        with self.lock:
            self.loads[model] = self.loads.get(model, 0) + 1


def answer_for(prompt: str, schema: Any) -> str:
    """A response the shipped use cases accept, shaped by the requested JSON schema."""
    properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
    if "summary" in properties:
        title = _last_field(prompt, "Title") or "role"
        return json.dumps({"summary": f"An employer is hiring for the role of {title[:80]}, as described."})
    if "knowledge" in properties and "skills" in properties:
        phrases = _phrases(_last_field(prompt, "Posting"))
        return json.dumps({"knowledge": phrases[:1], "skills": phrases[1:2]})
    if not properties:
        return "{}"
    if "choices" in properties:  # the linking referee: the first choice (the linker's best) for each entity
        choices = properties["choices"]
        return json.dumps({"choices": choices["items"]["enum"][:1] * choices.get("maxItems", 1)})
    empty = {"string": "", "array": [], "object": {}, "integer": 0, "number": 0, "boolean": False}
    required = schema.get("required", list(properties))
    return json.dumps({name: empty.get(properties[name].get("type")) for name in required})


def _phrases(text: str) -> list[str]:
    """Two-word phrases copied from the text, never across a sentence end (grounding finds them)."""
    words = text.split()
    return [
        f"{words[index]} {words[index + 1]}"
        for index in range(0, len(words) - 1, 2)
        if not _SENTENCE_END.search(words[index])
    ][:2]


def _last_field(prompt: str, name: str) -> str:
    """The value of the last `Name: ...` line of a few-shot prompt (the posting being asked about)."""
    marker = f"\n{name}: "
    prompt = f"\n{prompt}"  # a chat message starts with its first field
    start = prompt.rfind(marker)
    if start < 0:
        return ""
    return prompt[start + len(marker) :].split("\n", 1)[0].strip()


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def make_handler(state: SimulatedOllama) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the ollama client (httpx) expects

        def setup(self) -> None:
            super().setup()
            # Like Ollama's Go server: no Nagle delay, or each small response waits ~40 ms for an ACK.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def _send(self, body: Any, status: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == "/api/tags":
                self._send({"models": [_model_entry(name) for name in state.models]})
            elif self.path == "/api/ps":
                self._send({"models": [_model_entry(name) for name in state.models if name in state.loads]})
            elif self.path == "/api/version":
                self._send({"version": "0.6.5"})
            elif self.path == "/stats":
                self._send(state.stats())
            elif self.path == "/stats/timeline":
                with state.lock:
                    self._send({"generations": state.timeline})
            elif self.path == "/":
                self.send_response(200)
                self.send_header("Content-Length", "17")
                self.end_headers()
                self.wfile.write(b"Ollama is running")
            else:
                self._send({"error": "not found"}, 404)

        def do_HEAD(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            body = self._body()
            if self.path == "/stats/reset":
                state.reset()
                self._send({"ok": True})
                return
            model = body.get("model") or body.get("name") or ""
            if self.path in ("/api/generate", "/api/chat", "/api/show") and model not in state.models:
                self._send({"error": f"model '{model}' not found"}, 404)
                return
            if self.path == "/api/show":
                self._send(_show(model))
            elif self.path == "/api/generate":
                self._generate(body, model)
            elif self.path == "/api/chat":
                self._chat(body, model)
            else:
                self._send({"error": "not found"}, 404)

        def _generate(self, body: dict[str, Any], model: str) -> None:
            prompt = body.get("prompt") or ""
            if not prompt:
                state.load(model)
                self._send(
                    {
                        "model": model,
                        "created_at": _now(),
                        "response": "",
                        "done": True,
                        "done_reason": "load",
                    }
                )
                return
            started = time.perf_counter()
            text = state.generate(model, prompt, body.get("format"))
            self._send(
                {
                    "model": model,
                    "created_at": _now(),
                    "response": text,
                    "done": True,
                    "done_reason": "stop",
                    **_counts(prompt, text, time.perf_counter() - started),
                }
            )

        def _chat(self, body: dict[str, Any], model: str) -> None:
            messages = body.get("messages") or []
            if not messages:
                state.load(model)
                self._send(
                    {
                        "model": model,
                        "created_at": _now(),
                        "message": {"role": "assistant", "content": ""},
                        "done": True,
                        "done_reason": "load",
                    }
                )
                return
            prompt = str(messages[-1].get("content", ""))
            started = time.perf_counter()
            text = state.generate(model, prompt, body.get("format"))
            self._send(
                {
                    "model": model,
                    "created_at": _now(),
                    "message": {"role": "assistant", "content": text},
                    "done": True,
                    "done_reason": "stop",
                    **_counts(prompt, text, time.perf_counter() - started),
                }
            )

    return Handler


def _counts(prompt: str, text: str, seconds: float) -> dict[str, int]:
    total = int(seconds * 1e9)
    return {
        "total_duration": total,
        "load_duration": 0,
        "prompt_eval_count": max(1, len(prompt) // 4),
        "prompt_eval_duration": total // 4,
        "eval_count": max(1, len(text) // 4),
        "eval_duration": total - total // 4,
    }


def _model_entry(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": name,
        "modified_at": "2026-11-22T00:00:00Z",
        "size": 291_554_930,
        "digest": "e7d36fb2c3b3293cfe56d55889867a064b3a2b22e98335f2e6e8a387e081d6be",
        "details": MODEL_DETAILS,
    }


BASE_MODELS = ("gemma3:270m",)
"""Served with a raw template (`{{ .Prompt }}`, a base model); any other model gets an instruct model's
chat template, so `auto` prompt style reads chat for it, as from a real Ollama."""
CHAT_TEMPLATE = (
    '{{- range .Messages }}<start_of_turn>{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}\n'
    "{{ .Content }}<end_of_turn>\n{{ end }}<start_of_turn>model\n"
)


def _show(model: str) -> dict[str, Any]:
    return {
        "modelfile": f"FROM {model}\n",
        "parameters": 'stop "<end_of_turn>"',
        "template": "{{ .Prompt }}" if model in BASE_MODELS else CHAT_TEMPLATE,
        "details": MODEL_DETAILS,
        "model_info": {"general.architecture": "gemma3", "gemma3.context_length": 32768},
        "capabilities": ["completion"],
        "modified_at": "2026-11-22T00:00:00Z",
    }


class _ListeningServer(ThreadingHTTPServer):
    """A backlog of waiting connections as a Go server has. The standard library's default is 5; a
    connection reset seen at load 7 in a 100,000-posting run may have been a full backlog (not proven)."""

    request_queue_size = 1024


def serve(
    host: str, port: int, latency_ms: float, parallel: int, models: tuple[str, ...] = BASE_MODELS
) -> ThreadingHTTPServer:
    """Build (not start) the server; `server.serve_forever()` runs it."""
    state = SimulatedOllama(latency_ms, parallel, models)
    server = _ListeningServer((host, port), make_handler(state))
    server.daemon_threads = True
    server.state = state  # type: ignore[attr-defined]
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11500, help="0 picks a free port (printed)")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="time per generation")
    parser.add_argument("--parallel", type=int, default=1, help="generations served at once")
    parser.add_argument(
        "--models",
        default=",".join(BASE_MODELS),
        help="the models it serves, comma-separated (all but gemma3:270m with an instruct chat template)",
    )
    args = parser.parse_args(argv)
    models = tuple(name.strip() for name in args.models.split(",") if name.strip())
    server = serve(args.host, args.port, args.latency_ms, args.parallel, models)
    print(f"http://{args.host}:{server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
