"""The partitioning of the pipeline: a dynamic partition per subject, keyed by its key, one partitions
definition per subject kind (named after the kind: `postings` for postings)."""

import functools

from dagster import DynamicPartitionsDefinition

POSTING_PARTITIONS = DynamicPartitionsDefinition(name="postings")


@functools.cache
def partitions_for(kind: str) -> DynamicPartitionsDefinition:
    """The dynamic partitions of a subject kind (one object per kind, as Dagster wants)."""
    return POSTING_PARTITIONS if kind == POSTING_PARTITIONS.name else DynamicPartitionsDefinition(name=kind)
