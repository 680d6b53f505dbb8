"""The code location: `defs` is what `dagster dev` and workspace.yaml load."""

from __future__ import annotations

from collections.abc import Sequence

from dagster import Definitions

from assets.gym import build_gold_check, build_gym_job
from assets.postings import postings
from assets.taxonomy import skills_taxonomy
from domain.language.declaration import UseCase
from pipeline_defs.catalog import declared_use_cases
from pipeline_defs.factory import UseCaseDefinitions, WorkGroup, build_use_case, build_work_groups
from pipeline_defs.settings import Settings
from resources.app_database import AppDatabase
from resources.embedded_backend import EmbeddedLLMResource
from resources.gym import GymResource
from resources.llm import LLMResource
from resources.ollama_backend import OllamaResource
from resources.taxonomy_resource import TaxonomyResource
from sensors.gym import build_gym_sensor
from sensors.taxonomy import skills_taxonomy_job, skills_taxonomy_sensor


def build_llm_resource(settings: Settings) -> LLMResource:
    """Ollama when a host is configured; otherwise the embedded model (no server needed)."""
    if settings.llm_backend == "ollama":
        return OllamaResource(host=settings.ollama_host or "http://127.0.0.1:11434")
    return EmbeddedLLMResource()


def build_taxonomy_resource(settings: Settings) -> TaxonomyResource:
    return TaxonomyResource(
        path=settings.taxonomy_path,
        embedding_backend=settings.embedding_backend,
        ollama_host=settings.ollama_host or "",
        embedding_model=settings.embedding_model,
        embedding_cache_dir=str(settings.data_dir / "embedding_cache"),
    )


def build_gym_resource(settings: Settings) -> GymResource:
    return GymResource(
        judge_model=settings.judge_model,
        judge_sample=settings.judge_sample,
        rubric_path=settings.judge_rubric_path,
        review_below=settings.review_below,
        gold_skillspan_path=settings.gold_skillspan_path,
    )


def build_use_cases(
    settings: Settings, use_cases: Sequence[UseCase] | None = None
) -> list[UseCaseDefinitions]:
    """Each use case's asset, checks and job; by default the use cases the settings declare."""
    use_cases = use_cases if use_cases is not None else declared_use_cases(settings)
    registry = {use_case.name: use_case for use_case in use_cases}
    return [build_use_case(use_case, registry, batch_size_for(use_case, settings)) for use_case in use_cases]


# A run costs about 0.6 s of Dagster bookkeeping in process and 3.5 s more when the daemon
# launches it (a new process loads the code location). At Ollama's GPU speed (~0.1 s a call)
# that is most of a 25-posting run; at the embedded model's 3-10 s a posting it is nothing.
OLLAMA_MIN_BATCH_SIZE = 100


def batch_size_for(use_case: UseCase, settings: Settings) -> int | None:
    """Postings per run when not the declared size: PIPELINE_BATCH_SIZE when set, else at least
    `OLLAMA_MIN_BATCH_SIZE` for a use case that calls Ollama (see README, Performance)."""
    if settings.batch_size_override:
        return settings.batch_size_override
    if settings.llm_backend == "ollama" and not use_case.is_script:
        return max(use_case.batch_size, OLLAMA_MIN_BATCH_SIZE)
    return None


def build_definitions(
    settings: Settings | None = None,
    use_cases: Sequence[UseCase] | None = None,
    llm: LLMResource | None = None,
    built: Sequence[UseCaseDefinitions] | None = None,
    groups: Sequence[WorkGroup] | None = None,
) -> Definitions:
    """The code location; pass `built` and `groups` to reuse what `build_use_cases` and
    `build_work_groups` already made."""
    settings = settings or Settings.from_env()
    built = built if built is not None else build_use_cases(settings, use_cases)
    groups = groups if groups is not None else build_work_groups(built)
    gold_checks = [build_gold_check(item.use_case) for item in built]
    gym_job = build_gym_job(gold_checks)
    return Definitions(
        assets=[postings, skills_taxonomy, *(item.asset for item in built)],
        asset_checks=gold_checks,
        jobs=[*(item.job for item in built), *(group.job for group in groups), skills_taxonomy_job, gym_job],
        sensors=[*(group.sensor for group in groups), skills_taxonomy_sensor, build_gym_sensor(gym_job)],
        resources={
            "app_db": AppDatabase(url=settings.database_url),
            "llm": llm or build_llm_resource(settings),
            "taxonomy": build_taxonomy_resource(settings),
            "gym": build_gym_resource(settings),
        },
    )


defs = build_definitions()
