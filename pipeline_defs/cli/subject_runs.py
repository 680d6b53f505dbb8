"""A plugin's use cases run in this process on some of its subjects, or on all of them pending (what
`pipeline autodo scope ID...` and `scope --all-new` ask for): the same jobs, claims, traces and checks
as the sensors' runs, on the project's Dagster instance (source `cli`). In the UI the same is a
backfill of the use case's asset over its partitions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dagster import DagsterInstance

from assets.factory import WorkGroup, build_work_groups
from assets.partitions import add_partitions
from assets.run_tags import SOURCE_TAG, partition_range_tags
from pipeline_defs.cli.in_process_runs import QUIET_LOGS, run_pending
from pipeline_defs.definitions import build_definitions
from pipeline_defs.registry import registered_plugins
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from resources.app_database import AppDatabase
from resources.llm import LLMResource


def with_plugin(settings: Settings, plugin: str) -> Settings:
    """The settings with this plugin declared (whatever PIPELINE_DOMAINS says)."""
    domains = settings.domains if plugin in settings.domains else (*settings.domains, plugin)
    return replace(settings, domains=domains)


def run_subjects(
    settings: Settings,
    plugin: str,
    keys: Sequence[str] | None,
    *,
    llm: LLMResource | None = None,
    instance: DagsterInstance | None = None,
    verbose: bool = False,
) -> tuple[list[str], list[str]]:
    """Run the plugin's use cases on these subjects (None: every one pending), upstream first;
    (run ids, failed run ids)."""
    settings = with_plugin(settings, plugin)
    kind = registered_plugins()[plugin].kind.name
    if instance is None:
        ensure_dagster_home(settings)
        instance = DagsterInstance.get()
    own_use_cases = [uc for uc in build_use_cases(settings) if uc.use_case.subject_kind == kind]
    groups = build_work_groups(own_use_cases)
    defs = build_definitions(settings, built=own_use_cases, groups=groups, llm=llm)
    if keys is None:
        reports = run_pending(defs, groups, instance, AppDatabase(url=settings.database_url), verbose=verbose)
        return [r for rep in reports for r in rep.runs], [r for rep in reports for r in rep.failed_runs]
    return _run_for_keys(defs, groups, instance, kind, keys, verbose)


def _run_for_keys(
    defs,
    groups: Sequence[WorkGroup],
    instance: DagsterInstance,
    kind: str,
    keys: Sequence[str],
    verbose: bool,
):  # noqa: ANN001, ANN202
    known = set(instance.get_dynamic_partitions(kind))
    add_partitions(instance, kind, [key for key in keys if key not in known])
    runs, failed = [], []
    for group in groups:  # upstream first
        job = defs.resolve_job_def(group.job.name)
        for key in keys:
            result = job.execute_in_process(
                instance=instance,
                tags={**partition_range_tags(key, key), SOURCE_TAG: "cli"},
                run_config=None if verbose else QUIET_LOGS,
                raise_on_error=False,
            )
            runs.append(result.run_id)
            if not result.success:
                failed.append(result.run_id)
    return runs, failed
