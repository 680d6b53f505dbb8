"""Ollama backend on the official `ollama` client.

At the first use of a model in a run it sends an empty prompt, which makes Ollama
load the model, and pins it with `keep_alive` on that and every later call, so the
model stays in memory for the whole run. Structured output goes through Ollama's
JSON-schema `format`.

Before that load, a warm-up probe (GET /api/tags) must answer within `probe_timeout_seconds`, and
every connection must be made within it: a server that accepts connections and never answers (a
hung Ollama, a black-holed port) ends the run as an outage in seconds, not after the load's
`timeout_seconds` (a black hole kept `pipeline run` busy 722 s before).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
import time
from typing import Any

import httpx
import ollama
import pydantic

from domain.language.chat_prompts import CHAT_STYLE, COMPLETION_STYLE
from domain.language.llm_types import BackendUnavailable, Generation, ItemError
from resources.dropped_connections import once_more_if_dropped
from resources.llm import LLMResource, ModelCheck
from resources.llm_hosts import is_loopback_host

log = logging.getLogger(__name__)

# Our option names -> Ollama's `options` names.
_OPTION_NAMES = {
    "temperature": "temperature",
    "max_tokens": "num_predict",
    "repeat_penalty": "repeat_penalty",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "stop": "stop",
    "num_ctx": "num_ctx",
}
# Options Ollama fixes when it loads a model: a call whose values differ from the loaded model's makes
# Ollama reload it, so the warm-up sends the same ones the calls will.
ROLE_MARKS = (".Messages", ".System", "<|im_start|>", "<start_of_turn>", "[INST]", "<|start_header_id|>")
REFUSED = "refused: "  # the probe's answer when no connection could be made at all
LOAD_TIME_OPTIONS = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "num_thread", "use_mmap", "low_vram")


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, built once per process: building it (reading the CA bundle)
    took ~40 ms for every client, i.e. every run."""
    return httpx.create_ssl_context()


def template_has_roles(template: str) -> bool:
    """Whether an Ollama model template lays out chat roles (an instruction-tuned model's does)."""
    return any(mark in template for mark in ROLE_MARKS)


class OllamaResource(LLMResource):
    """Serves the use cases' models from an Ollama server.

    host: the server, e.g. http://gpu-box:11434.
    keep_alive: how long Ollama keeps the model loaded after each call (pins it for the run).
    timeout_seconds: per request. When a generation times out, the server is probed
        (`probe_timeout_seconds`): if it answers, the item is at fault (too slow, counts
        against its attempts); if not, the server is unavailable (no attempt spent).
        A model load that times out always counts as the server being unavailable.
    unload_after_run: free the GPU at the end of each run (keep_alive=0).
    raw: send prompts without the model's chat template (right for base models and
        the few-shot completion prompts of the shipped use cases).
    options: extra Ollama options applied to every call (e.g. num_ctx, num_gpu); the load-time ones
        (`LOAD_TIME_OPTIONS`) go with the warm-up too, or the first real call would reload the model.
    """

    host: str = "http://127.0.0.1:11434"
    keep_alive: str = "30m"
    timeout_seconds: float = 120.0
    probe_timeout_seconds: float = 5.0
    unload_after_run: bool = False
    raw: bool = True
    options: dict[str, Any] = {}

    @property
    def backend_name(self) -> str:
        return "ollama"

    @property
    def url(self) -> str:
        """The server this run talks to: its pinned host (several hosts), else `host`."""
        pinned = self.pinned_host
        return pinned.url if pinned is not None else self.host

    @property
    def is_local(self) -> bool:
        """A server on this machine (loopback) is local; any other host is remote (paced, priced)."""
        return is_loopback_host(self.url)

    def _client(self) -> ollama.Client:
        return ollama.Client(
            host=self.url, timeout=self._timeout(self.timeout_seconds), verify=_tls_context()
        )

    def _timeout(self, seconds: float) -> httpx.Timeout:
        """`seconds` to read an answer; a connection must be made within the probe's deadline."""
        return httpx.Timeout(seconds, connect=min(seconds, self.probe_timeout_seconds))

    def _load(self, model: str) -> ollama.Client:
        self._warm_up_probe(model)
        client = self._client()
        load_options = {name: value for name, value in self.options.items() if name in LOAD_TIME_OPTIONS}
        self._call(
            model,
            lambda: client.generate(
                model=model, prompt="", keep_alive=self.keep_alive, options=load_options or None
            ),
        )
        return client

    def _ollama_options(self, options: dict[str, Any]) -> dict[str, Any]:
        ollama_options = {
            _OPTION_NAMES[name]: value for name, value in options.items() if name in _OPTION_NAMES
        }
        ollama_options.update(self.options)
        return ollama_options

    def _generate(
        self,
        handle: ollama.Client,
        model: str,
        prompt: str,
        system_prompt: str,
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        ollama_options = self._ollama_options(options)
        started = time.perf_counter()
        response = self._call(
            model,
            lambda: handle.generate(
                model=model,
                prompt=prompt,
                system=system_prompt or None,
                format=schema,
                options=ollama_options,
                keep_alive=self.keep_alive,
                raw=self.raw or None,
                stream=False,
            ),
            timeout_may_be_the_items_fault=True,
        )
        latency_ms = (time.perf_counter() - started) * 1000
        return Generation(
            text=response.response or "",
            prompt_tokens=response.prompt_eval_count,
            completion_tokens=response.eval_count,
            latency_ms=latency_ms,
        )

    def _chat(
        self,
        handle: ollama.Client,
        model: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        """The messages through the model's chat template (POST /api/chat), the schema as `format`."""
        started = time.perf_counter()
        response = self._call(
            model,
            lambda: handle.chat(
                model=model,
                messages=messages,
                format=schema,
                options=self._ollama_options(options),
                keep_alive=self.keep_alive,
                stream=False,
            ),
            timeout_may_be_the_items_fault=True,
        )
        return Generation(
            text=response.message.content or "",
            prompt_tokens=response.prompt_eval_count,
            completion_tokens=response.eval_count,
            latency_ms=(time.perf_counter() - started) * 1000,
        )

    def _auto_style(self, model: str) -> str:
        """Chat when the model's template (POST /api/show) lays out roles, as an instruction-tuned model's
        does; completion for a raw template (`{{ .Prompt }}`, a base model) or when the server cannot say."""
        try:
            shown = self._client().show(model)
        except (ollama.ResponseError, ConnectionError, httpx.HTTPError, pydantic.ValidationError) as exc:
            # an older or look-alike server whose answer the client cannot read: the form any model takes
            log.warning("cannot read %s's template from %s (%s): completion prompts", model, self.url, exc)
            return COMPLETION_STYLE
        return CHAT_STYLE if template_has_roles(getattr(shown, "template", "") or "") else COMPLETION_STYLE

    def check_model(self, model: str) -> ModelCheck:
        """Pulled on this host (GET /api/tags; a name without a tag means `:latest`), and the prompt style
        its template calls for (POST /api/show)."""
        try:
            with ollama.Client(
                host=self.url, timeout=self.probe_timeout_seconds, verify=_tls_context()
            ) as client:
                pulled = {entry.model for entry in client.list().models}
        except (ollama.ResponseError, ConnectionError, httpx.HTTPError) as exc:
            return ModelCheck(False, f"cannot reach Ollama at {self.url}: {exc}")
        if model not in pulled and f"{model}:latest" not in pulled:
            return ModelCheck(False, f"not pulled on {self.url}: run `ollama pull {model}` there")
        return ModelCheck(True, f"pulled; its template calls for {self._auto_style(model)} prompts")

    def _unload(self, model: str, handle: ollama.Client) -> None:
        if not self.unload_after_run:
            return
        # The server may already be gone; then there is nothing to free.
        with contextlib.suppress(ollama.ResponseError, ConnectionError, httpx.HTTPError):
            handle.generate(model=model, prompt="", keep_alive=0)

    def _call(self, model: str, request: Any, *, timeout_may_be_the_items_fault: bool = False) -> Any:
        """Run one request (once more if its connection dropped while the server is up), turning client
        errors into the engine's two kinds of failure."""
        try:
            return once_more_if_dropped(request, self._server_answers)
        except ConnectionError as exc:
            raise BackendUnavailable(
                f"cannot reach Ollama at {self.url} (model {model}): is `ollama serve` running there? ({exc})"
            ) from exc
        except httpx.TimeoutException as exc:
            # Only a response that never came (read timeout) can be the item's fault, and only
            # while the server still answers; a dead or unreachable server spends no attempts.
            if (
                timeout_may_be_the_items_fault
                and isinstance(exc, httpx.ReadTimeout)
                and self._server_answers()
            ):
                raise ItemError(
                    f"generation timed out after {self.timeout_seconds:g}s while the server was up "
                    f"(Ollama at {self.url}, model {model})"
                ) from exc
            raise BackendUnavailable(
                f"Ollama at {self.url} did not answer within {self.timeout_seconds:g}s (model {model})"
            ) from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(
                f"HTTP error talking to Ollama at {self.url} (model {model}): {exc}"
            ) from exc
        except ollama.ResponseError as exc:
            if exc.status_code == 404:
                raise BackendUnavailable(
                    f"model {model!r} is not available on the Ollama server at {self.url}: "
                    f"run `ollama pull {model}` there ({exc.error})"
                ) from exc
            if exc.status_code >= 500 or exc.status_code < 0:
                raise BackendUnavailable(
                    f"Ollama at {self.url} failed serving {model}: {exc.error} (HTTP {exc.status_code})"
                ) from exc
            raise ItemError(
                f"Ollama rejected the request for {model}: {exc.error} (HTTP {exc.status_code})"
            ) from exc

    def _server_answers(self) -> bool:
        """Whether the server answers a cheap request within `probe_timeout_seconds`."""
        return self._probe() is None

    def _probe(self) -> str | None:
        """None when the server answers GET /api/tags within `probe_timeout_seconds`, else why not."""
        try:
            with ollama.Client(
                host=self.url, timeout=self.probe_timeout_seconds, verify=_tls_context()
            ) as client:
                client.list()
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                return f"no connection within {self.probe_timeout_seconds:g}s"
            return (
                f"it accepted the connection but did not answer within {self.probe_timeout_seconds:g}s "
                "(a hung server or a port that swallows requests)"
            )
        except (ConnectionError, httpx.HTTPError) as exc:
            return f"{REFUSED}{exc}"
        except (ollama.ResponseError, ValueError):
            return None  # an error status or an unexpected body is still an answer
        return None

    def _warm_up_probe(self, model: str) -> None:
        """Fail fast, as an outage (no attempts spent), when the server does not answer a cheap request:
        the model load that follows may take minutes by right, a silent server should not."""
        why = self._probe()
        if why is not None and why.startswith(REFUSED):
            raise BackendUnavailable(
                f"cannot reach Ollama at {self.url} (model {model}): is `ollama serve` running there? "
                f"({why.removeprefix(REFUSED)})"
            )
        if why is not None:
            raise BackendUnavailable(
                f"Ollama at {self.url} did not answer the warm-up probe before loading {model}: {why}"
            )
