"""OpenAI-compatible backend: vLLM, llama.cpp's `llama-server`, a LiteLLM proxy or a hosted API.

Plain HTTP through httpx (no SDK): the servers differ in what they accept beyond the common core,
and the errors must map onto the engine's two kinds (`ItemError`, `BackendUnavailable`) exactly as
the Ollama backend's do. Structured output goes through `response_format` with a JSON schema, which
vLLM, llama-server, LiteLLM and OpenAI all honour. A use case in chat form (`prompt_style` chat, or
`auto`, which is chat here) is sent as its messages to POST /chat/completions; in completion form its
few-shot prompt goes as it is to POST /completions, or, with `api="chat"` (a chat-only server), as one
user message.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import httpx
from pydantic import PrivateAttr

from domain.language.chat_prompts import CHAT_STYLE
from domain.language.llm_types import BackendUnavailable, Generation, ItemError
from resources.dropped_connections import once_more_if_dropped
from resources.llm import LLMResource, ModelCheck
from resources.llm_hosts import is_loopback_host

# Our option names -> the OpenAI request's names (the common core every compatible server takes).
_OPTION_NAMES = {"temperature": "temperature", "max_tokens": "max_tokens", "top_p": "top_p", "seed": "seed"}
APIS = ("completions", "chat")


class OpenAICompatibleResource(LLMResource):
    """Serves the use cases' models from a server speaking the OpenAI API.

    base_url: the API root, e.g. http://gpu-box:8000/v1 (vLLM), http://127.0.0.1:8080/v1 (llama-server).
    hosts: several servers (`resources.llm_hosts`, each URL an API root); a run uses the one it is pinned
        to. Empty: base_url.
    api_key: sent as a bearer token when set (hosted APIs, a LiteLLM proxy with keys).
    api: "completions" (the prompt as it is, right for base models) or "chat".
    model_names: a use case's model name -> the server's (e.g. gemma3:270m -> google/gemma-3-270m).
    schema_format: "json_schema" (OpenAI's structured outputs: vLLM, llama.cpp's llama-server, LiteLLM) or
        "json_object" ({"type": "json_object", "schema": ...}: llama-cpp-python's `llama_cpp.server`,
        which rejects json_schema).
    extra_body: fields added to every request, for server-specific sampling options
        (e.g. {"repetition_penalty": 1.15} on vLLM, {"repeat_penalty": 1.15, "top_k": 40} on llama-server).
    timeout_seconds / probe_timeout_seconds: as for Ollama: a read timeout is the item's fault only while
        the server still answers a cheap request (GET /models).
    """

    base_url: str = "http://127.0.0.1:8080/v1"
    api_key: str = ""
    api: str = "completions"
    model_names: dict[str, str] = {}
    schema_format: str = "json_schema"
    extra_body: dict[str, Any] = {}
    timeout_seconds: float = 120.0
    probe_timeout_seconds: float = 5.0
    _server_slots: int | None = PrivateAttr(default=None)

    @property
    def backend_name(self) -> str:
        return "openai"

    @property
    def is_local(self) -> bool:
        """A server on this machine (loopback) is local; any other host, a GPU box or a hosted API, is
        remote: paced (`pace_per_second`) and priced (`prices`)."""
        return is_loopback_host(self.url)

    @property
    def url(self) -> str:
        """The API root this run talks to: its host's, else `base_url`."""
        return (self.pinned_host.url if self.pinned_host is not None else self.base_url).rstrip("/")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    @property
    def in_flight_limit(self) -> int:
        """The host's `parallel`, else the slots the server reported (llama-server), else `max_in_flight`."""
        host = self.pinned_host
        if (host is None or not host.parallel) and self._server_slots:
            return self._server_slots
        return super().in_flight_limit

    def _load(self, model: str) -> httpx.Client:
        """Check the server answers; the model itself is checked by the first call (404: not served).
        An OpenAI-compatible server loads its model at start-up, so there is nothing to warm. llama-server
        says how many requests it serves at once (`total_slots` at /props, beside /v1): fill them."""
        # a connection within the probe's deadline, and this check answered within it too: a server that
        # accepts connections and never answers is an outage in seconds, not after `timeout_seconds`
        timeout = httpx.Timeout(
            self.timeout_seconds, connect=min(self.timeout_seconds, self.probe_timeout_seconds)
        )
        client = httpx.Client(base_url=self.url, headers=self._headers(), timeout=timeout)
        self._call(model, lambda: client.get("/models", timeout=self.probe_timeout_seconds), probe=True)
        self._server_slots = self._reported_slots()
        return client

    def _reported_slots(self) -> int | None:
        root = self.url[: -len("/v1")] if self.url.endswith("/v1") else self.url
        try:
            props = httpx.get(f"{root}/props", headers=self._headers(), timeout=self.probe_timeout_seconds)
            slots = props.json().get("total_slots") if props.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return slots if isinstance(slots, int) and slots >= 1 else None

    def _generate(
        self,
        handle: httpx.Client,
        model: str,
        prompt: str,
        system_prompt: str,
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        if self.api == "chat":  # a chat-only server: the completion prompt as one user message
            messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
            return self._chat(
                handle, model, [*messages, {"role": "user", "content": prompt}], schema, options
            )
        body = self._body(model, schema, options)
        body["prompt"] = f"{system_prompt}\n\n{prompt}" if system_prompt else prompt
        return self._post(handle, model, "/completions", body)

    def _chat(
        self,
        handle: httpx.Client,
        model: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        """The messages through the server's chat template (POST /chat/completions)."""
        body = self._body(model, schema, options)
        body["messages"] = messages
        return self._post(handle, model, "/chat/completions", body)

    def _auto_style(self, model: str) -> str:
        """`auto`: chat. What vLLM, llama-server and hosted APIs serve is mostly instruction-tuned, and a
        server's model list does not say; set the style to completion for a base model."""
        return CHAT_STYLE

    def check_model(self, model: str) -> ModelCheck:
        """Listed by the server (GET /models), under the name PIPELINE_OPENAI_MODELS gives it."""
        served_as = self.model_names.get(model, model)
        try:
            response = httpx.get(
                f"{self.url}/models", headers=self._headers(), timeout=self.probe_timeout_seconds
            )
            listed = [entry.get("id") for entry in response.json().get("data", [])]
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return ModelCheck(False, f"cannot list the models of {self.url}: {exc}")
        named = f"{model!r}" + (f" (as {served_as!r})" if served_as != model else "")
        if served_as not in listed:
            return ModelCheck(
                False,
                f"{self.url} does not serve {named}; it serves {', '.join(map(str, listed)) or 'none'} "
                f"(name it with PIPELINE_OPENAI_MODELS={model}=<its name>)",
            )
        return ModelCheck(True, f"served as {served_as!r}")

    def _body(self, model: str, schema: dict[str, Any] | None, options: dict[str, Any]) -> dict[str, Any]:
        """The request's common part: the server's model name, sampling options, the answer's schema."""
        body: dict[str, Any] = {"model": self.model_names.get(model, model)}
        body.update({_OPTION_NAMES[name]: value for name, value in options.items() if name in _OPTION_NAMES})
        if options.get("stop"):
            body["stop"] = list(options["stop"])
        if schema is not None and self.schema_format == "json_object":
            body["response_format"] = {"type": "json_object", "schema": schema}
        elif schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": schema, "strict": True},
            }
        body.update(self.extra_body)
        return body

    def _post(self, handle: httpx.Client, model: str, path: str, body: dict[str, Any]) -> Generation:
        started = time.perf_counter()
        payload = self._call(model, lambda: handle.post(path, json=body), timeout_may_be_the_items_fault=True)
        latency_ms = (time.perf_counter() - started) * 1000
        try:
            choice = payload["choices"][0]
            text = choice["message"]["content"] if "messages" in body else choice["text"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ItemError(
                f"{self.url} answered {model} without a completion: {str(payload)[:300]}"
            ) from exc
        usage = payload.get("usage") or {}
        return Generation(
            text=text or "",
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            latency_ms=latency_ms,
        )

    def _unload(self, model: str, handle: httpx.Client) -> None:
        with contextlib.suppress(Exception):
            handle.close()

    def _call(
        self, model: str, request: Any, *, timeout_may_be_the_items_fault: bool = False, probe: bool = False
    ) -> Any:
        """Send one request; turn transport errors and error statuses into the engine's two kinds."""
        where = f"the OpenAI-compatible server at {self.url} (model {model})"
        try:
            response = request() if probe else once_more_if_dropped(request, self._answers)
        except httpx.TimeoutException as exc:
            if probe:
                raise BackendUnavailable(
                    f"{where} did not answer the warm-up probe (GET /models) within "
                    f"{self.probe_timeout_seconds:g}s"
                    + ("" if isinstance(exc, httpx.ConnectTimeout) else ": it accepted the connection")
                ) from exc
            if timeout_may_be_the_items_fault and isinstance(exc, httpx.ReadTimeout) and self._answers():
                raise ItemError(
                    f"generation timed out after {self.timeout_seconds:g}s while {where} was up"
                ) from exc
            raise BackendUnavailable(f"{where} did not answer within {self.timeout_seconds:g}s") from exc
        except httpx.HTTPError as exc:  # connection refused or reset, DNS, TLS
            raise BackendUnavailable(f"cannot reach {where}: is the server running? ({exc})") from exc
        status = response.status_code
        if status < 300:
            try:
                return response.json()
            except ValueError as exc:
                raise BackendUnavailable(f"{where} answered with something that is not JSON") from exc
        detail = _error_detail(response)
        if status == 404:
            raise BackendUnavailable(
                f"{where}: not found (is the model served there, and does the base URL end in /v1?): {detail}"
            )
        if status in (401, 403):
            raise BackendUnavailable(f"{where} refused the API key (HTTP {status}): {detail}")
        if status == 429 or status >= 500:
            raise BackendUnavailable(f"{where} cannot serve now (HTTP {status}): {detail}")
        # 400, 413, 422: this request (too long a prompt, a schema the server rejects) is at fault
        raise ItemError(f"{where} rejected the request (HTTP {status}): {detail}")

    def _answers(self) -> bool:
        """Whether the server answers GET /models within `probe_timeout_seconds`."""
        try:
            httpx.get(
                f"{self.url}/models",
                headers=self._headers(),
                timeout=self.probe_timeout_seconds,
            )
        except httpx.HTTPError:
            return False
        return True


def _error_detail(response: httpx.Response) -> str:
    """The server's own message: OpenAI's {"error": {"message": ...}}, or the body's start."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return response.text[:300]
    if isinstance(error, dict):
        return str(error.get("message") or error)[:300]
    return str(error or response.text)[:300]
