"""Dagster's record of a run's outputs, written a batch at a time.

A run stores its outputs in the application database a group at a time and then yields one
materialization per output. With the pooled storages (`PIPELINE_DAGSTER_STORAGE=pooled`, the default
on a model server) those materializations wait while a group is yielded and are written together
(`HoldsAssetEventsForABatch` in `pipeline_defs/runtime/dagster_storage.py`); Dagster's own storages write each
as it comes, and the flush does nothing."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dagster import DagsterInstance


def _write_each_as_it_comes(only_if_due: bool = False) -> None:
    """The flush of a storage that holds nothing back."""


@contextmanager
def asset_events_in_batches(instance: DagsterInstance) -> Iterator[Callable[..., None]]:
    """Hold this thread's materializations until the yielded flush is called (`only_if_due=True`:
    only once 50 wait or the first has waited half a second), or until the block ends."""
    holding = getattr(instance.event_log_storage, "holding_asset_events", None)
    if holding is None:
        yield _write_each_as_it_comes
        return
    with holding() as flush:
        yield flush


__all__ = ["asset_events_in_batches"]
