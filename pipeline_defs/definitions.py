"""The code location: `defs` is what `dagster dev` and workspace.yaml load. It only merges: the engine's
part (each declared use case's asset, checks and job; each work group's batch job and discovery sensor;
the liveness and gym sensors; the retirement of each kind's finished partitions) and each declared
plugin's own part (its source asset, reference data, their sensors and resources), with the resources
the settings configure (`wiring.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from dagster import Definitions, in_process_executor

from assets.factory import UseCaseDefinitions, WorkGroup, build_work_groups, llm_resource_key
from assets.gym_checks import build_gold_check, build_gym_job
from assets.retention import build_retirement
from domain.core.plugins import DomainPlugin, PluginContext
from domain.language.declaration import UseCase
from pipeline_defs.catalog import declared_plugins, plugin_settings
from pipeline_defs.executors import batch_executor
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import (
    build_gym_resource,
    build_llm_resource,
    build_use_cases,
    configured,
)
from resources.app_database import AppDatabase
from resources.llm import LLMResource
from resources.run_heartbeat import DEFAULT_LEASE_SECONDS
from sensors.discovery_sensor import build_discovery_sensor
from sensors.gym_sensor import build_gym_sensor
from sensors.liveness_sensor import build_liveness_sensor


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
    groups = groups if groups is not None else build_work_groups(built, batch_executor(settings))
    engine = engine_definitions(settings, built, groups, llm)
    plugins = [plugin_definitions(settings, plugin, built) for plugin in declared_plugins(settings)]
    return Definitions.merge(engine, *plugins)


def engine_definitions(
    settings: Settings,
    built: Sequence[UseCaseDefinitions],
    groups: Sequence[WorkGroup],
    llm: LLMResource | None,
) -> Definitions:
    """What the engine makes of the declared use cases, and its resources."""
    gold_checks = [build_gold_check(item.use_case) for item in built]
    gym_job = build_gym_job(gold_checks)
    retirements = [
        build_retirement(kind.name, kind.noun, [item.spec for item in items], settings.retire_after_days)
        for kind, items in _by_kind(built).items()
    ]
    return Definitions(
        # Every job without an executor of its own, Dagster's implicit asset job among them (the outputs'
        # automation runs, a selection materialized from the UI), runs its steps in the run's process:
        # with Dagster's default each step was a process of its own loading the code location (~3 CPU s
        # each, three per automation run of the enriched postings tables).
        executor=in_process_executor,
        assets=[item.asset for item in built],
        asset_checks=gold_checks,
        jobs=[
            *(item.job for item in built),
            *(group.job for group in groups),
            gym_job,
            *(job for job, _ in retirements),
        ],
        schedules=[schedule for _, schedule in retirements],
        sensors=[
            *(
                build_discovery_sensor(
                    group,
                    settings.sensor_interval_seconds,
                    settings.resolved_hosts(),
                    groups,
                    settings.run_continue_seconds,
                    settings.runs_per_host,
                    settings.script_runs,
                    settings.run_step_continue_seconds,
                    serving_backends(settings, built, llm),
                )
                for group in groups
            ),
            build_liveness_sensor(groups, settings.heartbeat_seconds),
            build_gym_sensor(gym_job, [group.job.name for group in groups]),
        ],
        resources={
            "app_db": AppDatabase(
                url=configured(settings, "database_url"),
                heartbeat_seconds=settings.heartbeat_seconds,
                lease_seconds=settings.lease_seconds or DEFAULT_LEASE_SECONDS,
            ),
            "llm": llm or build_llm_resource(settings, env_vars=True),
            **{
                llm_resource_key(item.use_case): build_llm_resource(settings, True, item.use_case.backend)
                for item in built
                if item.use_case.uses_llm and item.use_case.backend
            },
            "gym": build_gym_resource(settings),
        },
    )


def serving_backends(
    settings: Settings, built: Sequence[UseCaseDefinitions], llm: LLMResource | None = None
) -> dict[str, str]:
    """The backend each LLM use case is served by under these settings (its own, or the deployment's)."""
    deployment = llm.backend_name if llm is not None else settings.llm_backend
    return {
        item.use_case.name: item.use_case.backend or deployment for item in built if item.use_case.uses_llm
    }


def plugin_definitions(
    settings: Settings, plugin: DomainPlugin, built: Sequence[UseCaseDefinitions]
) -> Definitions:
    """The plugin's own part of the code location."""
    if plugin.definitions is None:
        return Definitions()
    context = PluginContext(
        settings=plugin_settings(settings, plugin),
        core=settings,
        use_cases=tuple(item.use_case for item in built if item.use_case.subject_kind == plugin.name),
        configured=lambda name: configured(settings, name),
    )
    return plugin.definitions(context)


def _by_kind(built: Sequence[UseCaseDefinitions]) -> dict:
    kinds: dict = {}
    for item in built:
        kinds.setdefault(item.use_case.subject, []).append(item)
    return kinds


defs = build_definitions()
