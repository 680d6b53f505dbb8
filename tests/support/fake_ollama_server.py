"""A fake Ollama on a real port: runs the daemon launches are separate processes, so the
model server must be reachable over HTTP, as a real Ollama would be.

It speaks Ollama's /api/generate shapes (see tests/test_ollama_resource.py): an empty
prompt loads the model; a prompt with the summary schema gets a summary naming the
posting's title; one with the skills schema gets the known tool names found in the
posting. Each generation takes `delay_seconds`; `drop_next(n)` resets the connection of the next
n generations instead of answering (a server or a proxy dropping a kept-alive connection); `hold()`
makes every request wait until `release()`, so a test can look at the system while a run is inside a model
call. The server records how many requests were in flight at once, so a test can see
whether concurrent runs respected the `llm` concurrency pool.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KNOWN_TOOLS = ("Python", "SQL", "Dagster", "dbt", "Excel", "Java", "Docker", "Kubernetes")
PROMPT_TOKENS = 412
COMPLETION_TOKENS = 31
MAX_HOLD_SECONDS = 120


def answer_for(prompt: str, schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON a model would return for one of the shipped prompts (last posting in the prompt)."""
    title = prompt.rsplit("Title: ", 1)[-1].split("\n", 1)[0]
    posting = prompt.rsplit("Posting: ", 1)[-1]
    if "summary" in schema.get("properties", {}):
        return {"summary": f"A company hires a {title} for the work described."}
    found = [tool for tool in KNOWN_TOOLS if tool.lower() in posting.lower()]
    return {"knowledge": found, "skills": []}


class FakeOllamaServer:
    """A threaded HTTP server on 127.0.0.1 (a free port) answering like Ollama."""

    def __init__(self, delay_seconds: float = 0.0, models: tuple[str, ...] = ("gemma3:270m",)) -> None:
        self.delay_seconds = delay_seconds
        self.models = models
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._released.set()
        self._drops = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-ollama", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def generations(self) -> list[dict[str, Any]]:
        with self._lock:
            return [request for request in self.requests if request.get("prompt")]

    def hold(self) -> None:
        """Keep every request waiting (in flight) until `release()`."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def drop_next(self, count: int) -> None:
        """Reset the connection of the next `count` generations (each still counted in `requests`)."""
        with self._lock:
            self._drops = count

    def _take_drop(self, body: dict[str, Any]) -> bool:
        with self._lock:
            if not body.get("prompt") or self._drops <= 0:
                return False
            self._drops -= 1
            self.requests.append(body)
            return True

    def __enter__(self) -> FakeOllamaServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path == "/api/tags":
            return 200, {"models": [{"name": model, "model": model} for model in self.models]}
        if path != "/api/generate":
            return 404, {"error": f"no route {path}"}
        with self._lock:
            self.requests.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._released.wait(timeout=MAX_HOLD_SECONDS)
            if body.get("model") not in self.models:
                return 404, {"error": f"model '{body.get('model')}' not found"}
            answer: dict[str, Any] = {
                "model": body["model"],
                "created_at": "2026-11-22T01:00:00Z",
                "done": True,
                "done_reason": "load",
                "response": "",
            }
            if body.get("prompt"):
                time.sleep(self.delay_seconds)
                answer.update(
                    response=json.dumps(answer_for(body["prompt"], body.get("format") or {})),
                    done_reason="stop",
                    prompt_eval_count=PROMPT_TOKENS,
                    eval_count=COMPLETION_TOKENS,
                    total_duration=int(self.delay_seconds * 1e9),
                )
            return 200, answer
        finally:
            with self._lock:
                self.in_flight -= 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/api/generate" and fake._take_drop(body):
                    # SO_LINGER 0: close with a reset, as a dropped connection reaches the client
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.connection.close()
                    self.close_connection = True
                    return
                self._reply(*fake.respond(self.path, body))

            def do_GET(self) -> None:  # noqa: N802
                self._reply(*fake.respond(self.path, {}))

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

        return Handler
