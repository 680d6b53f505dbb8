"""Run pending work now, in this process, on the persistent Dagster instance.

The same plan the sensors make (`sensors.discovery.plan_runs`), executed right away:
the runs appear in the Dagster UI like any other, tagged with source `cli`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dagster import DagsterInstance, Definitions

from assets.partitions import POSTING_PARTITIONS
from pipeline_defs.factory import UseCaseDefinitions
from resources.app_database import AppDatabase
from sensors.discovery import plan_runs

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class RunReport:
    use_case: str
    runs: list[str] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)
    pending_before: int = 0
    seconds: float = 0.0


def upstream_first(built: Sequence[UseCaseDefinitions]) -> list[UseCaseDefinitions]:
    """Order use cases so each comes after what it reads; among equals, higher priority first."""
    remaining = sorted(built, key=lambda item: -item.use_case.priority)
    ordered: list[UseCaseDefinitions] = []
    done: set[str] = set()
    while remaining:
        ready = [item for item in remaining if set(item.use_case.upstream) <= done]
        if not ready:
            raise ValueError(
                f"use cases depend on each other in a cycle: {[i.use_case.name for i in remaining]}"
            )
        ordered.append(ready[0])
        done.add(ready[0].use_case.name)
        remaining.remove(ready[0])
    return ordered


def run_pending(
    defs: Definitions,
    built: Sequence[UseCaseDefinitions],
    instance: DagsterInstance,
    app_db: AppDatabase,
    *,
    only: Sequence[str] | None = None,
    source: str = "cli",
    verbose: bool = False,
    on_run: Callable[[str, int, int], None] | None = None,
) -> list[RunReport]:
    """Discover and process every pending posting of the selected use cases, upstream first."""
    reports = []
    for item in upstream_first(built):
        if only and item.use_case.name not in only:
            continue
        started = time.perf_counter()
        with app_db.session() as session:
            plan = plan_runs(session, instance, item.use_case, item.spec, item.job.name, item.batch_size)
        if plan.new_partitions:
            instance.add_dynamic_partitions(POSTING_PARTITIONS.name, plan.new_partitions)
        report = RunReport(item.use_case.name, pending_before=len(plan.pending))
        job = defs.resolve_job_def(item.job.name)
        requests = plan.run_requests(item.use_case, source=source)
        for index, request in enumerate(requests, start=1):
            if on_run:
                on_run(item.use_case.name, index, len(requests))
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
