"""The one partitioning of the pipeline: a dynamic partition per posting, keyed by posting key."""

from dagster import DynamicPartitionsDefinition

POSTING_PARTITIONS = DynamicPartitionsDefinition(name="postings")
