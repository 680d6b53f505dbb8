"""A stand-in Ollama server for throughput benchmarks: Ollama's real API shapes, a GPU's time simulated.

    python -m benchmarks.simulated_ollama [--port 11500] [--latency-ms 100] [--parallel 1] [--models A,B]
        [--gpu-7b | --prefill-tokens-per-second N --decode-tokens-per-second N --min-output-tokens N]

It answers /api/generate, /api/chat, /api/tags, /api/show, /api/ps and /api/version
like Ollama does. At most `--parallel` generations run at once, like OLLAMA_NUM_PARALLEL; the others
wait in a queue. A generation's time (sleeps standing in for a GPU) is `--latency-ms`, plus, when the
rates are given, its prompt's tokens at `--prefill-tokens-per-second` and its answer's tokens (at least
`--min-output-tokens`) at `--decode-tokens-per-second`. Prefill is compute-bound and shared: one prompt
is processed at a time, whatever the slots; decoding runs in every slot at once at the rate given for one
sequence. Tokens are counted as characters / 4 (English text with a Llama-style tokenizer).
`--gpu-7b` sets the rates of a 7-8B model on one GPU (`GPU_7B`, docs/performance.md says why). An empty
prompt loads the model (counted, as Ollama would load it) and returns at once, as Ollama does for a
model already in memory.

Answers are valid for the shipped use cases, so the pipeline does no retries: a
request whose `format` asks for a `summary` gets a short summary; one that asks for
`knowledge` and `skills` gets two short phrases copied from the posting in the
prompt (so grounding keeps them); any other schema gets an object with the required
properties filled with empty values of their type.

GET /stats returns what it served (loads, generations, peak concurrency, tokens, the model time it
simulated and `least_seconds`, the least wall time a server of these slots needs for those calls) as JSON;
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
from dataclasses import asdict, dataclass
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
CHARACTERS_A_TOKEN = 4


@dataclass(frozen=True)
class TokenRates:
    """How a generation's time grows with its tokens (0: not at all)."""

    prefill_tokens_per_second: float = 0.0  # the whole server's: one prompt at a time
    decode_tokens_per_second: float = 0.0  # one sequence's, in each slot at once
    min_output_tokens: int = 0  # an answer is decoded as at least this long


GPU_7B = TokenRates(prefill_tokens_per_second=4000.0, decode_tokens_per_second=60.0, min_output_tokens=80)
"""A 7-8B model (Q4-Q8, llama.cpp/Ollama) on one data-centre GPU: prompt processing 4,500-6,000 tokens/s
and generation ~58 tokens/s a sequence with 16 sequences at once (135 for one) in llama.cpp's batched-bench
tables of a 7B model (ggml-org/llama.cpp #3749, #3776), rounded down; an answer of at least 80 tokens,
a summary of two or three sentences (the simulated answers are shorter than a model's)."""
NO_TOKENS = TokenRates()


def least_seconds(token_counts: list[tuple[int, int]], rates: TokenRates, slots: int) -> float:
    """The least wall time a server of `slots` slots at `rates` needs for generations of these (prompt,
    answer) tokens: the prompts one after another, or every generation's time spread over the slots."""
    prefill = sum(prompt for prompt, _ in token_counts) / rates.prefill_tokens_per_second
    decoded = sum(max(answer, rates.min_output_tokens) for _, answer in token_counts)
    return max(prefill, (prefill + decoded / rates.decode_tokens_per_second) / max(slots, 1))


def token_count(text: str) -> int:
    """Tokens of `text` as a Llama-style tokenizer makes of English: about one per 4 characters."""
    return max(1, len(text) // CHARACTERS_A_TOKEN)


class SimulatedOllama:
    """The server's state: latency, token rates, parallel slots, and what it served."""

    def __init__(
        self,
        latency_ms: float,
        parallel: int,
        models: tuple[str, ...] = ("gemma3:270m",),
        rates: TokenRates = NO_TOKENS,
    ) -> None:
        self.latency_s = latency_ms / 1000
        self.parallel = parallel
        self.models = models
        self.rates = rates
        self.slots = threading.BoundedSemaphore(parallel)
        self.prefill = threading.Lock()  # the GPU processes one prompt at a time
        self.lock = threading.Lock()
        self.reset()

    def model_seconds(self, prompt_tokens: int, output_tokens: int) -> tuple[float, float]:
        """(prefill, decode and fixed) seconds of one generation."""
        rates = self.rates
        prefill = prompt_tokens / rates.prefill_tokens_per_second if rates.prefill_tokens_per_second else 0.0
        decoded = max(output_tokens, rates.min_output_tokens)
        decode = decoded / rates.decode_tokens_per_second if rates.decode_tokens_per_second else 0.0
        return prefill, self.latency_s + decode

    def reset(self) -> None:
        with self.lock:
            self.loads: dict[str, int] = {}
            self.timeline: list[tuple[float, float]] = []
            self.generations = 0
            self.active = 0
            self.peak_active = 0
            self.prompt_tokens = 0
            self.output_tokens = 0
            self.prefill_seconds = 0.0
            self.slot_seconds = 0.0  # prefill, decode and fixed time of every generation
            self.token_counts: list[tuple[int, int]] = []  # each generation's (prompt, answer) tokens

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "latency_ms": self.latency_s * 1000,
                **asdict(self.rates),
                "parallel": self.parallel,
                "loads": dict(self.loads),
                "generations": self.generations,
                "peak_concurrent_generations": self.peak_active,
                "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens,
                "model_seconds": round(self.slot_seconds, 3),
                # the least wall time for these calls: the prompts one after another, or every
                # generation's time spread over the slots, whichever is longer
                "least_seconds": round(max(self.prefill_seconds, self.slot_seconds / self.parallel), 3),
                "token_counts": list(self.token_counts),
            }

    def generate(self, model: str, prompt: str, schema: Any) -> tuple[str, int, int]:
        """Hold a slot for the generation's time, then answer: (answer, prompt tokens, output tokens)."""
        answer = answer_for(prompt, schema)
        prompt_tokens, output_tokens = token_count(prompt), token_count(answer)
        prefill, rest = self.model_seconds(prompt_tokens, output_tokens)
        with self.slots:
            with self.lock:
                self.active += 1
                self.peak_active = max(self.peak_active, self.active)
            started = time.time()
            try:
                if prefill:
                    with self.prefill:
                        time.sleep(prefill)
                time.sleep(rest)
            finally:
                with self.lock:
                    self.active -= 1
                    self.generations += 1
                    self.prompt_tokens += prompt_tokens
                    self.output_tokens += output_tokens
                    self.prefill_seconds += prefill
                    self.slot_seconds += prefill + rest
                    self.token_counts.append((prompt_tokens, output_tokens))
                    self.timeline.append((started, time.time()))
        return answer, prompt_tokens, output_tokens

    def load(self, model: str) -> None:
        with self.lock:
            self.loads[model] = self.loads.get(model, 0) + 1


def answer_for(prompt: str, schema: Any) -> str:
    """A response the shipped use cases accept, shaped by the requested JSON schema."""
    properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
    if "summary" in properties:
        # the title line as it stands: "hiring for the role of" claimed a role that a real posting's first
        # line (SkillSpan's "For the summer season of 2014 ...") does not name, and the check blocked it
        title = _clipped(_last_field(prompt, "Title") or "a role", 80)
        return json.dumps({"summary": f"An employer is hiring: {title}."})
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


def _clipped(text: str, limit: int) -> str:
    """`text` cut to `limit` characters at a word's end: a word cut in two (a real title's `<ORGANIZATION>`
    placeholder cut to `<ORG`) is no word of the posting, and the faithfulness check blocks the summary."""
    if len(text) <= limit:
        return text
    return text[: limit + 1].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]


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
            text, prompt_tokens, output_tokens = state.generate(model, prompt, body.get("format"))
            self._send(
                {
                    "model": model,
                    "created_at": _now(),
                    "response": text,
                    "done": True,
                    "done_reason": "stop",
                    **_counts(prompt_tokens, output_tokens, time.perf_counter() - started),
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
            text, prompt_tokens, output_tokens = state.generate(model, prompt, body.get("format"))
            self._send(
                {
                    "model": model,
                    "created_at": _now(),
                    "message": {"role": "assistant", "content": text},
                    "done": True,
                    "done_reason": "stop",
                    **_counts(prompt_tokens, output_tokens, time.perf_counter() - started),
                }
            )

    return Handler


def _counts(prompt_tokens: int, output_tokens: int, seconds: float) -> dict[str, int]:
    total = int(seconds * 1e9)
    return {
        "total_duration": total,
        "load_duration": 0,
        "prompt_eval_count": prompt_tokens,
        "prompt_eval_duration": total // 4,
        "eval_count": output_tokens,
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
    host: str,
    port: int,
    latency_ms: float,
    parallel: int,
    models: tuple[str, ...] = BASE_MODELS,
    rates: TokenRates = NO_TOKENS,
) -> ThreadingHTTPServer:
    """Build (not start) the server; `server.serve_forever()` runs it."""
    state = SimulatedOllama(latency_ms, parallel, models, rates)
    server = _ListeningServer((host, port), make_handler(state))
    server.daemon_threads = True
    server.state = state  # type: ignore[attr-defined]
    return server


def rates_from(args: argparse.Namespace) -> TokenRates:
    """The token rates the command line asks for: `--gpu-7b`'s, each overridden by its own option."""
    base = GPU_7B if args.gpu_7b else NO_TOKENS
    given = {
        "prefill_tokens_per_second": args.prefill_tokens_per_second,
        "decode_tokens_per_second": args.decode_tokens_per_second,
        "min_output_tokens": args.min_output_tokens,
    }
    values = {**asdict(base), **{name: value for name, value in given.items() if value is not None}}
    if any(value < 0 for value in values.values()):
        raise SystemExit("error: token rates and counts cannot be negative")
    return TokenRates(**values)


def server_arguments(latency_ms: float, rates: TokenRates) -> list[str]:
    """The command-line options that start this server with `latency_ms` and `rates`."""
    return [
        "--latency-ms",
        str(latency_ms),
        "--prefill-tokens-per-second",
        str(rates.prefill_tokens_per_second),
        "--decode-tokens-per-second",
        str(rates.decode_tokens_per_second),
        "--min-output-tokens",
        str(rates.min_output_tokens),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11500, help="0 picks a free port (printed)")
    parser.add_argument(
        "--latency-ms", type=float, default=100.0, help="fixed time per generation (beside the tokens' time)"
    )
    parser.add_argument(
        "--gpu-7b",
        action="store_true",
        help=f"the token rates of a 7-8B model on one GPU ({GPU_7B.prefill_tokens_per_second:g} prompt and "
        f"{GPU_7B.decode_tokens_per_second:g} output tokens a second, at least {GPU_7B.min_output_tokens} "
        "output tokens); the rates below override it",
    )
    parser.add_argument(
        "--prefill-tokens-per-second", type=float, help="prompt tokens a second, the whole server's (0: free)"
    )
    parser.add_argument(
        "--decode-tokens-per-second", type=float, help="output tokens a second of one sequence (0: free)"
    )
    parser.add_argument("--min-output-tokens", type=int, help="an answer is decoded as at least this long")
    parser.add_argument("--parallel", type=int, default=1, help="generations served at once")
    parser.add_argument(
        "--models",
        default=",".join(BASE_MODELS),
        help="the models it serves, comma-separated (all but gemma3:270m with an instruct chat template)",
    )
    args = parser.parse_args(argv)
    models = tuple(name.strip() for name in args.models.split(",") if name.strip())
    server = serve(args.host, args.port, args.latency_ms, args.parallel, models, rates_from(args))
    print(f"http://{args.host}:{server.server_address[1]}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
