"""The one LLM interface every use case talks to (its outcomes and errors: `domain.language.llm_types`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import ConfigurableResource, InitResourceContext, get_dagster_logger
from pydantic import PrivateAttr

from appdb.pacer import Pacer
from domain.language.chat_prompts import AUTO_STYLE, COMPLETION_STYLE
from domain.language.llm_types import Generation
from resources.llm_hosts import LLMHost, host_for_run, parse_hosts, with_credentials

PACER_LOG_WAITS_FROM_SECONDS = 1.0
"""Single waits this long or longer get a log line of their own; every wait is in the progress lines."""

# Generation options every backend understands (each maps them to its own names).
DEFAULT_OPTIONS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 256, "repeat_penalty": 1.15, "seed": 0}


@dataclass(frozen=True)
class ModelCheck:
    """What a backend says of one model before any run (`pipeline config --check`): whether it serves
    it, and in a line, what it found or what to do (`ollama pull NAME`)."""

    served: bool
    detail: str


class LLMResource(ConfigurableResource):
    """Base of the LLM backends: load a model once per run, then generate many times.

    `max_in_flight` is how many requests the engine may keep open at once, unless the run's host says
    (its `parallel`). `hosts` (server backends): several servers, each written as in
    `resources.llm_hosts`; each run is pinned to one of them when its resources are set up.
    `host_credentials`: the hosts as configured, with credentials, when `hosts` holds them redacted
    (the code location writes it as the environment variable they came from).
    `pace_per_second` > 0 paces every generation through a shared token bucket in the database at
    `pace_database_url` (bursts of `pace_burst`): for remote and paid backends (`appdb/pacer.py`). The
    bucket is `pace_bucket`, or with several hosts one per host, so each server gets the rate.
    `prices`: model -> [price per 1,000 prompt tokens, per 1,000 completion tokens]; a local backend's
    calls cost nothing whatever it says.
    """

    max_in_flight: int = 1
    hosts: list[str] = []
    host_credentials: str = ""
    _loaded: dict[str, Any] = PrivateAttr(default_factory=dict)
    _load_count: int = PrivateAttr(default=0)
    _host: LLMHost | None = PrivateAttr(default=None)
    pace_per_second: float = 0.0
    pace_burst: int = 1
    pace_bucket: str = ""
    pace_database_url: str = ""
    prices: dict[str, list[float]] = {}
    _pacer: Pacer | None = PrivateAttr(default=None)
    _styles: dict[str, str] = PrivateAttr(default_factory=dict)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        """Pin this run to its host: the run's tag (set by the discovery sensor), else one by run id."""
        run = getattr(context, "run", None)
        self._host = with_credentials(host_for_run(parse_hosts(self.hosts), run), self.host_credentials)

    @property
    def pinned_host(self) -> LLMHost | None:
        """The host this run uses (None: a backend without hosts, or one host given the old way)."""
        if self._host is None and self.hosts:
            self._host = with_credentials(parse_hosts(self.hosts)[0], self.host_credentials)
        return self._host

    @property
    def several_hosts(self) -> bool:
        """Whether other hosts can take over this one's work (its breaker then pauses the host only)."""
        return len(self.hosts) > 1

    @property
    def in_flight_limit(self) -> int:
        """Requests to keep open at once: the host's parallel slots when known, else `max_in_flight`."""
        host = self.pinned_host
        return max(1, host.parallel if host is not None and host.parallel else self.max_in_flight)

    @property
    def backend_name(self) -> str:
        raise NotImplementedError

    @property
    def is_local(self) -> bool:
        """Whether the model runs on this machine or the user's own server (its calls cost nothing)."""
        return True

    def cost_of(self, model: str, prompt_tokens: int | None, completion_tokens: int | None) -> float:
        """What one call cost: its tokens at the model's configured price; 0 for local models."""
        price = self.prices.get(model)
        if self.is_local or not price:
            return 0.0
        prompt_price, completion_price = (list(price) + [0.0, 0.0])[:2]
        return ((prompt_tokens or 0) * prompt_price + (completion_tokens or 0) * completion_price) / 1000

    @property
    def paced_seconds(self) -> float:
        """How long this resource has waited for the pacer so far."""
        return self._pacer.waited_seconds if self._pacer is not None else 0.0

    def pace(self, tokens: float = 1.0) -> float:
        """Wait for the pacer's tokens (a no-op when this backend is not paced); the seconds waited.
        Any backend, the OpenAI-compatible one too, calls this before each request."""
        if self.pace_per_second <= 0 or self.is_local:
            return 0.0
        if self._pacer is None:
            if not self.pace_database_url:
                raise ValueError("a paced LLM backend needs pace_database_url (the application database)")
            self._pacer = Pacer(
                self.pace_database_url,
                self.pacer_bucket,
                self.pace_per_second,
                float(self.pace_burst),
                on_wait=_log_wait,
            )
        return self._pacer.acquire(tokens)

    @property
    def pacer_bucket(self) -> str:
        """The pacer's bucket: with several hosts, the run's host's own (each server gets the rate, as
        each has its own GPU), else `pace_bucket`."""
        host = self.pinned_host
        if self.several_hosts and host is not None:
            return f"{self.backend_name}:{host.label}"
        return self.pace_bucket or self.backend_name

    @property
    def model_loads(self) -> int:
        """How many times this resource instance loaded a model (once per model per run)."""
        return self._load_count

    def ensure_loaded(self, model: str) -> bool:
        """Load `model` unless it is already loaded in this run; returns True if it loaded now."""
        if model in self._loaded:
            return False
        self._loaded[model] = self._load(model)
        self._load_count += 1
        return True

    def generate(
        self,
        model: str,
        prompt: str,
        system_prompt: str,
        schema: dict[str, Any] | None,
        options: dict[str, Any],
        messages: Sequence[Mapping[str, str]] | None = None,
    ) -> Generation:
        """One answer: to `messages` through the model's chat template when given, else a completion of
        `prompt`; `schema` constrains the output to JSON of that shape."""
        self.ensure_loaded(model)
        self.pace()
        merged = {**DEFAULT_OPTIONS, **options}
        if messages is not None:
            return self._chat(self._loaded[model], model, [dict(m) for m in messages], schema, merged)
        return self._generate(self._loaded[model], model, prompt, system_prompt, schema, merged)

    def resolve_style(self, model: str, configured: str) -> str:
        """The prompt form to send `model`: the configured one (`completion`, `chat`), or for `auto` what
        this backend says of the model (`_auto_style`)."""
        if configured != AUTO_STYLE:
            return configured
        if model not in self._styles:
            self._styles[model] = self._auto_style(model)
        return self._styles[model]

    def _auto_style(self, model: str) -> str:
        """`auto` on this backend: completion (a base model); servers ask or assume an instruct model."""
        return COMPLETION_STYLE

    def check_model(self, model: str) -> ModelCheck:
        """Whether this backend serves `model`, asked of its server (nothing is generated or loaded)."""
        raise NotImplementedError

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        for model, handle in list(self._loaded.items()):
            self._unload(model, handle)
        self._loaded.clear()

    # Backends implement these (and `_chat`, `_auto_style` when they can).
    def _load(self, model: str) -> Any:
        raise NotImplementedError

    def _generate(
        self,
        handle: Any,
        model: str,
        prompt: str,
        system_prompt: str,
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        raise NotImplementedError

    def _chat(
        self,
        handle: Any,
        model: str,
        messages: list[dict[str, str]],
        schema: dict[str, Any] | None,
        options: dict[str, Any],
    ) -> Generation:
        raise NotImplementedError(f"the {self.backend_name} backend has no chat form")

    def _unload(self, model: str, handle: Any) -> None:
        """Release the model at the end of the run (a no-op unless the backend holds memory)."""


def _log_wait(bucket: str, seconds: float) -> None:
    if seconds >= PACER_LOG_WAITS_FROM_SECONDS:
        get_dagster_logger().info(f"pacer {bucket}: waiting {seconds:.1f}s for the rate limit")
