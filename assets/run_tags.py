"""Every run tag the pipeline sets or reads, in one place (with the Dagster tags it reads)."""

from __future__ import annotations

from collections.abc import Mapping

from dagster._core.storage.tags import (  # public names, not re-exported at the top level
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PRIORITY_TAG,
)

SOURCE_TAG = "pipeline/source"
"""Who asked for the run: sensor, backfill, ui, cli, review, test (see `run_source`)."""
COST_TAG_PREFIX = "pipeline/cost_"
"""`pipeline/cost_<use case>`: what a run's calls of that use case cost, with calls and tokens."""
WORK_GROUP_TAG = "pipeline/work_group"
"""The work group (use cases of one model, or one script) a batch job runs."""
USE_CASE_TAG = "pipeline/use_case"
"""The use case a single-use-case job runs."""
REASON_TAG = "pipeline/reason"
"""Why a sensor asked for a run that is not work discovery (e.g. the taxonomy file changed)."""
REPROCESS_TAG = "pipeline/reprocess"
"""Set on runs of `pipeline reprocess`: which outdated outputs they redo."""
CONTINUE_TAG = "pipeline/continue_seconds"
"""Set by a discovery sensor: for how many seconds the run keeps claiming more pending subjects after
its own batch (`assets/batch_run.py`)."""
DAGSTER_SENSOR_TAG = "dagster/sensor_name"
DAGSTER_BACKFILL_TAG = "dagster/backfill"
DAGSTER_PARTITION_TAG = "dagster/partition"

__all__ = [
    "ASSET_PARTITION_RANGE_END_TAG",
    "ASSET_PARTITION_RANGE_START_TAG",
    "DAGSTER_BACKFILL_TAG",
    "DAGSTER_PARTITION_TAG",
    "DAGSTER_SENSOR_TAG",
    "PRIORITY_TAG",
    "REASON_TAG",
    "REPROCESS_TAG",
    "CONTINUE_TAG",
    "COST_TAG_PREFIX",
    "SOURCE_TAG",
    "USE_CASE_TAG",
    "WORK_GROUP_TAG",
    "partition_range_tags",
    "run_source",
]


def run_source(tags: Mapping[str, str]) -> str:
    """Where a run came from: sensor, backfill, cli/test (tagged by us), or the UI."""
    if tags.get(SOURCE_TAG):
        return tags[SOURCE_TAG]
    if tags.get(DAGSTER_SENSOR_TAG):
        return "sensor"
    if tags.get(DAGSTER_BACKFILL_TAG):
        return "backfill"
    return "ui"


def partition_range_tags(first: str, last: str) -> dict[str, str]:
    """The tags that make a run cover the posting partitions from `first` to `last`."""
    return {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}
