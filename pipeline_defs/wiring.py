"""From settings to the parts the code location is made of: the use cases with their batch sizes, and
each resource configured from the environment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dagster import EnvVar

from appdb.redaction import redact
from assets.factory import UseCaseDefinitions, build_use_case
from domain.language.declaration import UseCase
from pipeline_defs.catalog import declared_plugins, leased_use_cases, plugin_settings, with_lease
from pipeline_defs.executors import step_tags
from pipeline_defs.model_choice import judge_choice
from pipeline_defs.settings import DEFAULT_OLLAMA_HOST, Settings
from resources.embedded_backend import EmbeddedLLMResource
from resources.gym_resource import GymResource
from resources.llm import LLMResource
from resources.llm_hosts import LLMHost
from resources.ollama_backend import OllamaResource
from resources.openai_backend import OpenAICompatibleResource

# A run costs about 0.6 s of Dagster bookkeeping in process and 2-3.5 s more when the daemon
# launches it (a new process loads the code location), on the same CPU the other runs need. At a
# server's speed (~0.1 s a call, 4 slots) 100 postings are 2.5 s of backend time: on the daemon path
# the server was busy 0.66 of the time at 100 postings per run, 0.91 at 250 (docs/performance.md).
# At the embedded model's 3-10 s a posting the start costs nothing. With several hosts the sensor
# cuts smaller runs so that each host gets one (sensors/discovery_sensor.py, plan_runs).
OLLAMA_MIN_BATCH_SIZE = 250
# Requests in flight per server when nobody says (OLLAMA_NUM_PARALLEL, PIPELINE_LLM_PARALLEL, a host's
# `parallel=`): Ollama exposes no slot count, and picks 4 parallel slots when the GPU has room;
# an OpenAI-compatible server that does not report its slots (llama-server does, at /props) gets 8.
OLLAMA_DEFAULT_PARALLEL = 4
OPENAI_DEFAULT_PARALLEL = 8


def build_use_cases(
    settings: Settings, use_cases: Sequence[UseCase] | None = None
) -> list[UseCaseDefinitions]:
    """Each use case's asset, checks and job; by default the use cases the settings declare."""
    if use_cases is None:
        use_cases = leased_use_cases(settings)
    elif settings.lease_seconds:
        use_cases = [with_lease(use_case, settings.lease_seconds) for use_case in use_cases]
    registry = {use_case.name: use_case for use_case in use_cases}
    return [
        build_use_case(use_case, registry, batch_size_for(use_case, settings), step_tags(use_case, settings))
        for use_case in use_cases
    ]


def batch_size_for(use_case: UseCase, settings: Settings) -> int | None:
    """Postings per run when not the declared size: PIPELINE_BATCH_SIZE when set, else at least
    `OLLAMA_MIN_BATCH_SIZE` for a use case that calls Ollama (see docs/performance.md)."""
    if settings.batch_size_override:
        return settings.batch_size_override
    if settings.server_backend and use_case.uses_llm:
        return max(use_case.batch_size, OLLAMA_MIN_BATCH_SIZE)
    return None


def configured(settings: Settings, name: str, *, env_vars: bool = True) -> Any:
    """A setting as a resource's field: `EnvVar(variable)` when it was read from an environment
    variable (with `env_vars`), else its value.

    Dagster then shows the variable's name, not its value (a password in a URL, an API key), in the
    UI's resource configuration and the code location's snapshot, and reads the value in each run.
    A value that did not come from the environment (a default, the config file, a test's own) stays
    as it is."""
    value = getattr(settings, name)
    variable = settings.from_variable(name) if env_vars else None
    return EnvVar(variable) if variable and value else value


def build_llm_resource(settings: Settings, env_vars: bool = False, backend: str = "") -> LLMResource:
    """Ollama or an OpenAI-compatible server when configured; otherwise the embedded model (no server).

    A server backend gets the host list (each run is pinned to one host) with each host's parallel
    slots, so a run keeps as many requests in flight as its server works on at once. `env_vars`: URLs and
    keys as `EnvVar` (for the code location; a resource used outside a Dagster run needs the values).
    `backend`: another backend than the deployment's, for the use cases PIPELINE_BACKENDS sends there
    (its one server: the host list is the deployment's backend's)."""
    if backend and backend != settings.llm_backend:
        settings = replace(settings, llm_backend=backend, llm_hosts=())
    hosts = [_host_spec(host) for host in settings.resolved_hosts()]
    credentials = _host_credentials(settings, env_vars)
    if settings.llm_backend == "ollama":
        host = settings.ollama_host or DEFAULT_OLLAMA_HOST
        return OllamaResource(
            host=configured(settings, "ollama_host", env_vars=env_vars) or host,
            hosts=hosts,
            host_credentials=credentials,
            max_in_flight=OLLAMA_DEFAULT_PARALLEL,
            keep_alive=settings.ollama_keep_alive,
            options={"num_ctx": settings.ollama_num_ctx} if settings.ollama_num_ctx else {},
            **paid_backend_fields(settings, f"ollama:{redact(host)}", env_vars),
        )
    if settings.llm_backend == "openai":
        return OpenAICompatibleResource(
            base_url=configured(settings, "openai_base_url", env_vars=env_vars) or settings.openai_url,
            hosts=hosts,
            host_credentials=credentials,
            max_in_flight=OPENAI_DEFAULT_PARALLEL,
            api_key=configured(settings, "openai_api_key", env_vars=env_vars),
            api=settings.openai_api,
            model_names=dict(settings.openai_models),
            schema_format=settings.openai_schema_format,
            **paid_backend_fields(settings, f"openai:{redact(settings.openai_url)}", env_vars),
        )
    return EmbeddedLLMResource(model_paths=dict(settings.embedded_models))


def _host_credentials(settings: Settings, env_vars: bool) -> Any:
    """Where a run finds its host's real URL when the host list holds it redacted (a password in it):
    the setting the hosts came from, as its environment variable (read in the run) or its value."""
    for name in ("llm_hosts", "ollama_host", "openai_base_url"):
        value = getattr(settings, name)
        text = ";".join(value) if isinstance(value, tuple) else value or ""
        if "@" in text:
            return configured(settings, name, env_vars=env_vars) if env_vars else text
    return ""


def _host_spec(host: LLMHost) -> str:
    parts = [host.label]  # credentials stay in the environment (`with_credentials` in each run)
    if host.parallel:
        parts.append(f"parallel={host.parallel}")
    if host.models:
        parts.append(f"models={','.join(host.models)}")
    return " ".join(parts)


def paid_backend_fields(settings: Settings, bucket: str, env_vars: bool = False) -> dict[str, Any]:
    """The pacer and the prices for a backend that may be remote or paid (the resource decides
    whether it is local: then it is neither paced nor priced)."""
    return {
        "pace_per_second": settings.llm_rate_per_second,
        "pace_burst": settings.llm_burst,
        "pace_bucket": bucket,
        "pace_database_url": configured(settings, "database_url", env_vars=env_vars),
        "prices": {model: [prompt, completion] for model, prompt, completion in settings.model_prices},
    }


def build_gym_resource(settings: Settings) -> GymResource:
    judge_model, judge_style = judge_choice(settings)
    return GymResource(
        judge_model=judge_model,
        prompt_style=judge_style,
        judge_sample=settings.judge_sample,
        calibrate_judge=settings.judge_calibration,
        rubric_path=settings.judge_rubric_path,
        review_below=settings.review_below,
        public_gold_paths=public_gold_paths(settings),
    )


def public_gold_paths(settings: Settings) -> dict[str, str]:
    """The declared plugins' public gold sets, use case -> file (the gym evaluates against them)."""
    paths: dict[str, str] = {}
    for plugin in declared_plugins(settings):
        if plugin.gold_paths is not None:
            paths.update(plugin.gold_paths(plugin_settings(settings, plugin)))
    return paths
