"""The partitioning of the pipeline: a dynamic partition per subject, keyed by its key, one partitions
definition per kind of subject (named after the kind)."""

import functools
from collections.abc import Collection, Sequence

from dagster import DagsterInstance, DynamicPartitionsDefinition
from dagster._core.storage.event_log.schema import DynamicPartitionsTable
from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

_LOOKUP_CHUNK = 500  # partition keys per lookup query on SQLite
_WRITE_CHUNK = 5_000  # partition keys per insert or delete (SQLite caps a statement's parameters)


@functools.cache
def partitions_for(kind: str) -> DynamicPartitionsDefinition:
    """The dynamic partitions of a kind of subject (one object per kind, as Dagster wants)."""
    return DynamicPartitionsDefinition(name=kind)


def partition_positions(instance: DagsterInstance, keys: Collection[str], kind: str) -> dict[str, int]:
    """Dagster's position of each of `keys` that is a partition of `kind` (absent: not one yet).

    A run over a partition range covers every partition between its first and last key in
    this order (the order partitions were added). Looking up only the keys at hand keeps a
    tick fast: listing all partitions took a third of a second at 100,000 subjects.
    """
    storage = instance.event_log_storage
    if not hasattr(storage, "index_connection"):  # not a SQL storage: list them all
        known = instance.get_dynamic_partitions(kind)
        wanted = set(keys)
        return {key: index for index, key in enumerate(known) if key in wanted}
    table = DynamicPartitionsTable
    keys = list(keys)
    positions: dict[str, int] = {}
    with storage.index_connection() as conn:
        # SQLite caps the parameters of a statement; on PostgreSQL each statement may scan the table
        chunk = _LOOKUP_CHUNK if conn.dialect.name == "sqlite" else max(len(keys), 1)
        for start in range(0, len(keys), chunk):
            rows = conn.execute(
                select(table.c.partition, table.c.id).where(
                    table.c.partitions_def_name == kind,
                    table.c.partition.in_(keys[start : start + chunk]),
                )
            )
            positions.update((key, position) for key, position in rows)
    return positions


def add_partitions(instance: DagsterInstance, kind: str, keys: Sequence[str]) -> None:
    """Make `keys` partitions of `kind`, in this order after the known ones; keys already there stay.

    A statement per few thousand keys. (A sensor could return them as `dynamic_partitions_requests`,
    but Dagster's daemon then asks the storage about each key on its own, `has_dynamic_partition`, a
    new connection each on PostgreSQL: 100,000 new postings kept the daemon busy for minutes before it
    had added one partition or started a run.)"""
    for start in range(0, len(keys), _WRITE_CHUNK):
        chunk = list(keys[start : start + _WRITE_CHUNK])
        try:
            instance.add_dynamic_partitions(kind, chunk)
        except IntegrityError:  # SQLite: another tick added some of them since this one looked
            instance.add_dynamic_partitions(kind, chunk)


def delete_partitions(instance: DagsterInstance, kind: str, keys: Sequence[str]) -> int:
    """Delete the partitions of `kind` among `keys`, a statement per few thousand keys (Dagster's
    `delete_dynamic_partition` takes one key and a connection); how many there were."""
    storage = instance.event_log_storage
    if not hasattr(storage, "index_connection"):  # not a SQL storage: Dagster's way, key by key
        doomed = list(partition_positions(instance, keys, kind))
        for key in doomed:
            instance.delete_dynamic_partition(kind, key)
        return len(doomed)
    table, keys, deleted = DynamicPartitionsTable, list(keys), 0
    with storage.index_connection() as conn:
        for start in range(0, len(keys), _WRITE_CHUNK):
            deleted += conn.execute(
                delete(table).where(
                    table.c.partitions_def_name == kind,
                    table.c.partition.in_(keys[start : start + _WRITE_CHUNK]),
                )
            ).rowcount  # committed as the connection closes (SQLite) or at once (PostgreSQL's autocommit)
    return deleted
