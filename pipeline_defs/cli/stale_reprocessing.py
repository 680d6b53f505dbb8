"""Redo the outputs that are out of date, and only those (`pipeline reprocess --stale`).

An output is stale by the rule discovery applies (`appdb.discovery.outdated_outputs`): made by an older
use-case version or another model, from an older content of its subject, or before an upstream output or
reference input it read changed; it is redone now when discovery offers its subject (its inputs are
ready, nothing holds it). Subjects with no output at all are ordinary pending work (the sensors and
`pipeline run` do them) and are left out: each run covers a range of partitions that holds stale
subjects only, besides current ones (which every run skips).

Use cases are reprocessed upstream first, and each one's stale set is counted again
just before its runs, so a downstream output made stale by reprocessing its upstream
is redone in the same command.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dagster import DagsterInstance, Definitions, JobDefinition
from sqlalchemy.orm import Session

from appdb import discovery
from assets.factory import UseCaseDefinitions
from assets.partitions import add_partitions, partitions_for
from assets.run_tags import REPROCESS_TAG, SOURCE_TAG, partition_range_tags
from pipeline_defs.cli.in_process_runs import QUIET_LOGS, GroupTracker
from resources.app_database import AppDatabase


@dataclass(frozen=True)
class StaleOutputs:
    """The stale outputs of one use case, why they are stale, and the other pending postings."""

    use_case: str
    keys: list[str]  # stale and redone by a run now
    reasons: Counter
    missing: list[str]  # pending subjects without any output: not this command's business
    waiting: Counter = field(default_factory=Counter)  # stale but not redone now: how many, by why


def find_stale(session: Session, item: UseCaseDefinitions) -> StaleOutputs:
    """The outputs of this use case that are stale (`discovery.stale_outputs`, as `pipeline trace`
    says), and why; those a run can redo now in discovery's order."""
    spec = item.spec
    pending = discovery.find_pending_work(session, spec)
    outdated = discovery.stale_outputs(session, spec)
    reasons: Counter = Counter(why.describe(item.use_case.subject.noun) for why in outdated.values())
    waiting: Counter = Counter(why.waiting for why in outdated.values() if why.waiting)
    stale = [key for key in pending if key in outdated and not outdated[key].waiting]
    with_output = set(discovery.subjects_with_output(session, spec.use_case, pending))
    missing = [key for key in pending if key not in with_output]
    return StaleOutputs(spec.use_case, stale, reasons, missing, waiting)


def plan_batches(
    stale: Sequence[str], missing: Sequence[str], partition_order: Sequence[str], batch_size: int
) -> list[list[str]]:
    """Ranges of stale subjects (in partition order) that hold no subject lacking an output."""
    stale_set, missing_set, known = set(stale), set(missing), set(partition_order)
    order = [*partition_order, *(key for key in stale if key not in known)]
    batches: list[list[str]] = []
    current: list[str] = []
    for key in order:
        if key in missing_set and current:
            batches.append(current)
            current = []
        elif key in stale_set:
            current.append(key)
            if len(current) >= batch_size:
                batches.append(current)
                current = []
    if current:
        batches.append(current)
    return batches


@dataclass
class ReprocessReport:
    use_case: str
    stale_before: int
    runs: list[str] = field(default_factory=list)
    failed_runs: list[str] = field(default_factory=list)
    stale_after: int = 0


def reprocess_stale(
    defs: Definitions,
    built: Sequence[UseCaseDefinitions],
    instance: DagsterInstance,
    app_db: AppDatabase,
    *,
    source: str = "cli",
    verbose: bool = False,
    on_plan: Callable[[StaleOutputs, int], None] | None = None,
    track: GroupTracker | None = None,
) -> list[ReprocessReport]:
    """Redo the stale outputs of `built` use cases (given upstream first), each in its own job's runs."""
    reports = []
    for item in built:
        with app_db.session() as session:
            stale = find_stale(session, item)
        if not stale.keys:
            continue
        partitions = partitions_for(item.use_case.subject_kind).name
        known = instance.get_dynamic_partitions(partitions)
        known_set = set(known)  # once: not per key (100,000 stale keys would be 100,000 sets)
        unknown = [key for key in stale.keys if key not in known_set]
        add_partitions(instance, partitions, unknown)
        batches = plan_batches(stale.keys, stale.missing, [*known, *unknown], item.batch_size)
        if on_plan:
            on_plan(stale, len(batches))
        report = ReprocessReport(item.use_case.name, len(stale.keys))
        job = defs.resolve_job_def(item.job.name)
        name, plural = item.use_case.name, item.use_case.subject.plural
        with track(name, {name: len(stale.keys)}, plural) if track else contextlib.nullcontext():
            _run_batches(job, batches, instance, source, verbose, report)
        with app_db.session() as session:
            report.stale_after = len(find_stale(session, item).keys)
        reports.append(report)
    return reports


def _run_batches(
    job: JobDefinition,
    batches: Sequence[Sequence[str]],
    instance: DagsterInstance,
    source: str,
    verbose: bool,
    report: ReprocessReport,
) -> None:
    for batch in batches:
        result = job.execute_in_process(
            instance=instance,
            tags={
                **partition_range_tags(batch[0], batch[-1]),
                SOURCE_TAG: source,
                REPROCESS_TAG: "stale",
            },
            run_config=None if verbose else QUIET_LOGS,
            raise_on_error=False,
        )
        report.runs.append(result.run_id)
        if not result.success:
            report.failed_runs.append(result.run_id)
