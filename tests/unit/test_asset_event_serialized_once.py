"""The pooled event log storages serialize a materialization once (pipeline_defs/runtime/dagster_storage.py):
the asset row's `last_materialization` is built from the event row's string, and must be exactly what
Dagster's own serialization of the wrapping `EventLogRecord` would have stored."""

from __future__ import annotations

import time

from dagster import AssetMaterialization, MetadataValue, TableColumn, TableRecord, TableSchema
from dagster._core.event_api import EventLogRecord
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster_shared.serdes import deserialize_value, serialize_value

from pipeline_defs.runtime.dagster_storage import event_log_record_json


def _materialization_entry() -> EventLogEntry:
    preview = MetadataValue.table(
        [TableRecord({"mention": "Python", "kind": "skill", "note": 'a "quoted" \\ value é'})],
        schema=TableSchema(
            [TableColumn("mention", "string"), TableColumn("kind", "string"), TableColumn("note", "string")]
        ),
    )
    materialization = AssetMaterialization(
        asset_key="posting_skills",
        partition="p-1",
        metadata={"latency_ms": 101.5, "preview": preview, "interaction_id": MetadataValue.text("7")},
        tags={"dagster/data_version": "abc", "dagster/code_version": "3"},
    )
    event = DagsterEvent(
        event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
        job_name="posting_skills_batch_job",
        step_key="posting_skills",
        event_specific_data=StepMaterializationData(materialization),
        message="Materialized value posting_skills.",
    )
    return EventLogEntry(
        error_info=None,
        level=10,
        user_message="",
        run_id="r-1",
        timestamp=time.time(),
        step_key="posting_skills",
        job_name="posting_skills_batch_job",
        dagster_event=event,
    )


def test_the_asset_rows_copy_is_dagsters_own_serialization_of_the_record() -> None:
    entry = _materialization_entry()
    built = event_log_record_json(serialize_value(entry), 4242)
    assert built == serialize_value(EventLogRecord(storage_id=4242, event_log_entry=entry))
    record = deserialize_value(built, EventLogRecord)
    assert record.storage_id == 4242 and record.event_log_entry == entry
