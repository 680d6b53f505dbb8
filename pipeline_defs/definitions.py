"""The code location: `defs` is what `dagster dev` and workspace.yaml load."""

from __future__ import annotations

from collections.abc import Sequence

from dagster import Definitions

from assets.postings import postings
from pipeline_defs.declaration import UseCase
from pipeline_defs.factory import UseCaseDefinitions, build_use_case
from pipeline_defs.settings import Settings
from pipeline_defs.use_cases import USE_CASES
from resources.app_database import AppDatabase
from resources.embedded_backend import EmbeddedLLMResource
from resources.llm import LLMResource
from resources.ollama_backend import OllamaResource


def build_llm_resource(settings: Settings) -> LLMResource:
    """Ollama when a host is configured; otherwise the embedded model (no server needed)."""
    if settings.llm_backend == "ollama":
        return OllamaResource(host=settings.ollama_host or "http://127.0.0.1:11434")
    return EmbeddedLLMResource()


def build_use_cases(settings: Settings, use_cases: Sequence[UseCase] = USE_CASES) -> list[UseCaseDefinitions]:
    registry = {use_case.name: use_case for use_case in use_cases}
    return [build_use_case(use_case, registry, settings.batch_size_override) for use_case in use_cases]


def build_definitions(
    settings: Settings | None = None,
    use_cases: Sequence[UseCase] = USE_CASES,
    llm: LLMResource | None = None,
    built: Sequence[UseCaseDefinitions] | None = None,
) -> Definitions:
    """The code location; pass `built` to reuse use cases already built by `build_use_cases`."""
    settings = settings or Settings.from_env()
    built = built if built is not None else build_use_cases(settings, use_cases)
    return Definitions(
        assets=[postings, *(item.asset for item in built)],
        jobs=[item.job for item in built],
        sensors=[item.sensor for item in built],
        resources={
            "app_db": AppDatabase(url=settings.database_url),
            "llm": llm or build_llm_resource(settings),
        },
    )


defs = build_definitions()
