"""Job postings as a plugin: their kind, the use cases their settings choose, and their Dagster part
(the `postings` source asset, the skills taxonomy with its job, sensor and resource, and the enriched
postings as Parquet assets users build on)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from domain.core.plugins import DomainPlugin, PluginContext
from plugins.postings.commands import COMMANDS
from plugins.postings.postings_settings import PostingsSettings
from plugins.postings.store.postings_kind import POSTINGS
from plugins.postings.use_cases.posting_skills import MODEL
from plugins.postings.use_cases.review_options import POSTINGS_REVIEW_OPTIONS
from plugins.postings.use_cases.shipped import posting_use_cases

if TYPE_CHECKING:  # Dagster is imported when the code location is built, not for a light command
    from dagster import Definitions

    from plugins.postings.taxonomy_resource import TaxonomyResource


def taxonomy_resource(context: PluginContext) -> TaxonomyResource:
    """The skills taxonomy and how mentions are resolved against it, as the settings say."""
    from plugins.postings.skills.skill_resolver import DEFAULT_OLLAMA_HOST  # numpy, lazily
    from plugins.postings.taxonomy_resource import TaxonomyResource  # Dagster, lazily

    settings, core = context.settings, context.core
    return TaxonomyResource(
        path=settings.taxonomy_path,
        embedding_backend=settings.embedding_backend,
        ollama_host=context.configured("ollama_host") or DEFAULT_OLLAMA_HOST,
        embedding_model=settings.embedding_model,
        embedding_cache_dir=str(core.data_dir / "embedding_cache"),
        model_cache_dir=str(core.cache_dir),
        encoder_provider=settings.encoder_provider,
        encoder_precision=settings.encoder_precision,
    )


def postings_definitions(context: PluginContext) -> Definitions:
    from dagster import Definitions  # Dagster, lazily: `pipeline status` needs none

    from plugins.postings.enriched_assets import PARQUET_IO_MANAGER, build_output_assets, build_outputs_sensor
    from plugins.postings.postings_asset import postings
    from plugins.postings.skills.embeddings import configure_shared_minilm
    from plugins.postings.taxonomy_asset import skills_taxonomy
    from plugins.postings.taxonomy_sensor import skills_taxonomy_job, skills_taxonomy_sensor
    from resources.parquet_io_manager import ParquetIOManager

    # The tagger, the linker and the faithfulness check share the process's MiniLM, made as the settings say.
    configure_shared_minilm(
        cache_dir=context.core.cache_dir,
        provider=context.settings.encoder_provider,
        precision=context.settings.encoder_precision,
    )
    output_assets = build_output_assets([use_case.name for use_case in context.use_cases])
    return Definitions(
        assets=[postings, skills_taxonomy, *output_assets],
        jobs=[skills_taxonomy_job],
        sensors=[skills_taxonomy_sensor, build_outputs_sensor(context.settings.outputs_refresh_seconds)],
        resources={
            "taxonomy": taxonomy_resource(context),
            # the enriched postings as Parquet (docs/outputs.md): <data dir>/outputs/<asset>.parquet
            PARQUET_IO_MANAGER: ParquetIOManager(base_dir=str(context.core.data_dir / "outputs")),
        },
    )


def gold_paths(settings: PostingsSettings) -> dict[str, str]:
    """The public gold sets the gym evaluates against: SkillSpan's for the skills, when configured."""
    return {"posting_skills": settings.gold_skillspan_path} if settings.gold_skillspan_path else {}


PLUGIN = DomainPlugin(
    kind=POSTINGS,
    description="Job postings, ingested from JSONL or CSV (`pipeline ingest`).",
    use_cases=posting_use_cases,
    definitions=postings_definitions,
    settings=PostingsSettings,
    default_model=MODEL,
    commands=COMMANDS,
    reference_jobs=("skills_taxonomy_job",),  # the taxonomy, before skill_entities runs
    review_options=POSTINGS_REVIEW_OPTIONS,
    gold_paths=gold_paths,
)
POSTINGS_PLUGIN = PLUGIN
