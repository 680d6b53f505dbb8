"""The partitioning of the pipeline: a dynamic partition per subject, keyed by its key, one partitions
definition per kind of subject (named after the kind)."""

import functools

from dagster import DynamicPartitionsDefinition


@functools.cache
def partitions_for(kind: str) -> DynamicPartitionsDefinition:
    """The dynamic partitions of a kind of subject (one object per kind, as Dagster wants)."""
    return DynamicPartitionsDefinition(name=kind)
