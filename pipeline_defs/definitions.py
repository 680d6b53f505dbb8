"""The code location: `defs` is what `dagster dev` and workspace.yaml load. It only merges: the assets,
checks and jobs the factory makes of each declared use case, each work group's discovery sensor, the
reference-data and gym parts, and the resources the settings configure (`wiring.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from dagster import Definitions

from assets.factory import UseCaseDefinitions, WorkGroup, build_work_groups
from assets.gym_checks import build_gold_check, build_gym_job
from assets.retention import build_retirement
from assets.subjects_asset import build_subject_asset
from domain.language.declaration import UseCase
from pipeline_defs.catalog import declared_plugins
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import (
    build_gym_resource,
    build_llm_resource,
    build_taxonomy_resource,
    build_use_cases,
    from_env,
)
from plugins.postings.postings_asset import postings
from plugins.postings.taxonomy_asset import skills_taxonomy
from plugins.postings.taxonomy_sensor import skills_taxonomy_job, skills_taxonomy_sensor
from resources.app_database import AppDatabase
from resources.llm import LLMResource
from sensors.discovery_sensor import build_discovery_sensor
from sensors.gym_sensor import build_gym_sensor


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
    plugins = declared_plugins(settings)
    # The postings plugin brings its source asset and the skills taxonomy; other plugins their source asset.
    with_postings = any(plugin.kind == "postings" for plugin in plugins)
    domain_assets = [postings, skills_taxonomy] if with_postings else []
    domain_assets += [build_subject_asset(p.kind, p.description) for p in plugins if p.kind != "postings"]
    retirement = (
        build_retirement([item.spec for item in built], settings.retire_after_days) if with_postings else None
    )
    return Definitions(
        assets=[*domain_assets, *(item.asset for item in built)],
        asset_checks=gold_checks,
        jobs=[
            *(item.job for item in built),
            *(group.job for group in groups),
            *([skills_taxonomy_job] if with_postings else []),
            gym_job,
            *([retirement[0]] if retirement else []),
        ],
        schedules=[retirement[1]] if retirement else [],
        sensors=[
            *(
                build_discovery_sensor(
                    group, settings.sensor_interval_seconds, settings.resolved_hosts(), groups
                )
                for group in groups
            ),
            *([skills_taxonomy_sensor] if with_postings else []),
            build_gym_sensor(gym_job, [group.job.name for group in groups]),
        ],
        resources={
            "app_db": AppDatabase(
                url=from_env(settings.database_url, "PIPELINE_DATABASE_URL"),
                heartbeat_seconds=settings.heartbeat_seconds,
            ),
            "llm": llm or build_llm_resource(settings, env_vars=True),
            "taxonomy": build_taxonomy_resource(settings, env_vars=True),
            "gym": build_gym_resource(settings),
        },
    )


defs = build_definitions()
