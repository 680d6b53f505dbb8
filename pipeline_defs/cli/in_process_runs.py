"""Run pending work now, in this process, on the persistent Dagster instance.

The same plan the sensors make (`sensors.discovery_sensor.plan_runs`), executed right away:
the runs appear in the Dagster UI like any other, tagged with source `cli`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dagster import DagsterInstance, Definitions

from assets.factory import WorkGroup, build_work_groups
from assets.run_tags import SOURCE_TAG
from pipeline_defs.dagster_home import ensure_dagster_home
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from resources.app_database import AppDatabase
from sensors.discovery_sensor import plan_runs

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class RunReport:
    group: str
    use_cases: list[str]
    runs: list[str] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)
    pending_before: int = 0
    seconds: float = 0.0
    paused: dict[str, str] = field(default_factory=dict)


def single_use_case_groups(groups: Sequence[WorkGroup], names: Sequence[str]) -> list[WorkGroup]:
    """Groups of one: run only the named use cases, each with its own job (upstream first)."""
    selected = []
    for group in groups:
        for member in group.members:
            if member.use_case.name in names:
                selected.append(
                    WorkGroup(member.use_case.name, group.model, (member,), member.job, member.batch_size)
                )
    return selected


def load_reference_data(defs: Definitions, instance: DagsterInstance, source: str = "cli") -> bool:
    """Materialize the skills taxonomy (a no-op when the file is unchanged); True when it succeeded."""
    result = defs.resolve_job_def("skills_taxonomy_job").execute_in_process(
        instance=instance,
        tags={SOURCE_TAG: source},
        run_config=QUIET_LOGS,
        raise_on_error=False,
    )
    return result.success


def run_pending(
    defs: Definitions,
    groups: Sequence[WorkGroup],
    instance: DagsterInstance,
    app_db: AppDatabase,
    *,
    source: str = "cli",
    verbose: bool = False,
    on_run: Callable[[str, int, int], None] | None = None,
) -> list[RunReport]:
    """Discover and process every pending posting of the given work groups, in order."""
    reports = []
    for group in groups:
        started = time.perf_counter()
        with app_db.session() as session:
            plan = plan_runs(session, instance, group)
        if plan.new_partitions:
            instance.add_dynamic_partitions(group.subject_kind, plan.new_partitions)
        report = RunReport(group.name, group.use_case_names, pending_before=len(plan.pending))
        report.paused = plan.paused
        job = defs.resolve_job_def(group.job.name)
        requests = plan.run_requests(group, source=source)
        for index, request in enumerate(requests, start=1):
            if on_run:
                on_run(group.name, index, len(requests))
            result = job.execute_in_process(
                instance=instance,
                tags=request.tags,
                run_config=None if verbose else QUIET_LOGS,
                raise_on_error=False,
            )
            report.runs.append(result.run_id)
            if not result.success:
                report.failed_runs.append(result.run_id)
        report.seconds = time.perf_counter() - started
        reports.append(report)
    return reports


def dagster_for(settings: Settings) -> tuple[DagsterInstance, Definitions, list[WorkGroup], AppDatabase]:
    """The project's Dagster instance, the code location, its work groups and the app database."""
    ensure_dagster_home(settings)
    built = build_use_cases(settings)
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups)
    return DagsterInstance.get(), defs, groups, AppDatabase(url=settings.database_url)
