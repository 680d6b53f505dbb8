"""Data-version provenance on each posting's materialization, so Dagster's staleness follows ours.

A use case's asset logs one `AssetMaterialization` per subject it made. Dagster decides
whether a partition is stale from tags on its latest materialization: the code version
it was made with, its data version, and the data version (and event) of each input it
read. Without them it falls back to timestamps and calls every partition stale whose
subjects' source asset was never materialized (the CLI and the sensors never do). With them:

- bumping a use case's version (or changing its model: both are its code version)
  marks its partitions "has a new code version" in the UI;
- new reference data (a new data version of, say, `skills_taxonomy`) or a new upstream output of
  the same subject marks the reading partition stale;
- anything else stays fresh, as in the application database.

The data version of an output is its input hash: same inputs, same model and version,
same output identity.
"""

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dagster import AssetKey, AssetMaterialization, DagsterEventType, DagsterInstance
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    NULL_DATA_VERSION,
    NULL_EVENT_POINTER,
    extract_data_version_from_entry,
    get_input_data_version_tag,
    get_input_event_pointer_tag,
)

NULL_VERSION = (NULL_DATA_VERSION.value, NULL_EVENT_POINTER)


class Provenance:
    """Builds the provenance tags of one run's materializations of one use case.

    The inputs' versions are read in a few queries per run (per upstream asset: the latest
    materialization of each of the run's partitions), not one query per subject per input.
    """

    def __init__(
        self,
        instance: DagsterInstance,
        code_version: str,
        upstream: Sequence[str],
        reference_inputs: Sequence[str],
        partitions: Sequence[str],
        source: AssetKey,
    ) -> None:
        self.instance, self.code_version = instance, code_version
        self.upstream = [AssetKey(name) for name in upstream]
        self.partitions = list(partitions)
        # Unpartitioned inputs are read once per run: their version at the start of the run.
        self.fixed = {key: self._latest(key) for key in (source, *map(AssetKey, reference_inputs))}
        # Partitioned inputs: read when the first output is tagged, after the upstream steps ran.
        self._per_partition: dict[AssetKey, dict[str, tuple[str, str]]] | None = None

    def _latest(self, key: AssetKey) -> tuple[str, str]:
        record = self.instance.get_latest_data_version_record(key, False)
        if record is None:
            return NULL_VERSION
        version = extract_data_version_from_entry(record.event_log_entry)
        return (version.value if version else str(record.storage_id)), str(record.storage_id)

    def _latest_by_partition(self, key: AssetKey) -> dict[str, tuple[str, str]]:
        """(data version, event pointer) of the latest materialization of each of the run's partitions."""
        kind = DagsterEventType.ASSET_MATERIALIZATION
        storage_ids = self.instance.get_latest_storage_id_by_partition(key, kind, set(self.partitions))
        versions = self.instance.event_log_storage.get_latest_tags_by_partition(
            key, kind, [DATA_VERSION_TAG], self.partitions
        )
        return {
            partition: (versions.get(partition, {}).get(DATA_VERSION_TAG, str(storage_id)), str(storage_id))
            for partition, storage_id in storage_ids.items()
        }

    def tags(self, partition: str, input_hash: str) -> dict[str, str]:
        if self._per_partition is None:
            self._per_partition = {key: self._latest_by_partition(key) for key in self.upstream}
        inputs = {
            **self.fixed,
            **{key: self._per_partition[key].get(partition, NULL_VERSION) for key in self.upstream},
        }
        tags = {
            CODE_VERSION_TAG: self.code_version,
            DATA_VERSION_TAG: input_hash,
            DATA_VERSION_IS_USER_PROVIDED_TAG: "true",
        }
        for key, (version, pointer) in inputs.items():
            tags[get_input_data_version_tag(key)] = version
            tags[get_input_event_pointer_tag(key)] = pointer
        return tags

    def tag(self, event: Any) -> Any:
        """`event` with provenance tags when it is a materialization of a made output."""
        if not isinstance(event, AssetMaterialization) or event.partition is None:
            return event
        input_hash = event.metadata.get("input_hash")
        if input_hash is None:
            return event
        value = getattr(input_hash, "value", getattr(input_hash, "text", input_hash))
        return event._replace(tags={**(event.tags or {}), **self.tags(event.partition, str(value))})


def with_provenance(events: Iterator[Any], tag: Callable[[Any], Any]) -> Iterator[Any]:
    """Re-yield `events` through `tag`, returning what the generator returns."""
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value
        yield tag(event)


def provenance_for(
    instance: DagsterInstance, code_version: str, use_case: Any, partitions: Sequence[str]
) -> Provenance:
    source = AssetKey(use_case.subject_kind)  # its subjects' source asset
    return Provenance(
        instance, code_version, use_case.upstream, use_case.reference_inputs, partitions, source
    )


__all__ = ["Provenance", "provenance_for", "with_provenance"]
