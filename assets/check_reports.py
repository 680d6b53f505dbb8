"""A batch run's check results, reported so the UI tells the truth when runs overlap.

Dagster's asset page shows a check's latest execution only if it evaluated the asset's latest
materialization, else "Not evaluated". A check planned by a run gets its execution row when the run is
created, so the "latest" execution is the run *started* last: when two runs overlapped and the one
started first stored the last outputs, both passed and the page still said "Not evaluated".

So the batch jobs do not plan the use cases' checks (`gym_checks.batch_selection`); each run reports its
results as evaluations of its own, recorded when evaluated (the latest is the one evaluated last) and
naming the materialization they evaluated: the last one this run made. A run that made and failed
nothing (everything already current or held by another run) reports nothing: it evaluated nothing.
A run that plans the checks itself (a UI backfill selects them with the asset) gets them the usual way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    AssetRecordsFilter,
)

# the materialization an evaluation names; Dagster does not export its type at the top level
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from assets.batch_state import BatchOutcome


def reported_checks(
    context: AssetExecutionContext, asset: str, outcome: BatchOutcome, results: Iterable[AssetCheckResult]
) -> Iterator[AssetCheckResult | AssetCheckEvaluation]:
    """`results` as this run reports them: as they are for the checks the run planned, as evaluations of
    this run's last materialization for the others (nothing when the run made and failed nothing)."""
    planned = context.selected_asset_check_keys
    evaluated = bool(outcome.done or outcome.failed)
    target: AssetCheckEvaluationTargetMaterializationData | None = None
    for result in results:
        name = result.check_name or ""
        if AssetCheckKey(AssetKey(asset), name) in planned:
            yield result
            continue
        if not evaluated:
            continue
        if target is None and outcome.done:
            target = last_materialization(context, asset, outcome.done[-1])
        yield AssetCheckEvaluation(
            asset_key=AssetKey(asset),
            check_name=name,
            passed=result.passed,
            metadata=result.metadata,
            severity=result.severity,
            description=result.description,
            blocking=False,
            target_materialization_data=target,
        )


def last_materialization(
    context: AssetExecutionContext, asset: str, partition: str
) -> AssetCheckEvaluationTargetMaterializationData | None:
    """The latest materialization of `partition` of `asset`: this run's, as the run holds the partition's
    claim until it stores the output (no other run stores one meanwhile)."""
    records = context.instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    if not records:
        return None
    record = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        run_id=record.event_log_entry.run_id, storage_id=record.storage_id, timestamp=record.timestamp
    )
