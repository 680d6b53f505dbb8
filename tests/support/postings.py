"""Postings for tests, written and ingested, and one run over their partitions as a sensor would ask."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from dagster import DagsterInstance

from appdb.database import session_scope
from plugins.postings.store.ingest import ingest_files

POSTINGS = [
    {
        "key": "p-1",
        "title": "Data Engineer",
        "company": "Brightwave Energy",
        "location": "Berlin",
        "description": "Build Python and SQL pipelines for turbine telemetry with Dagster and dbt.",
    },
    {
        "key": "p-2",
        "title": "Registered Nurse",
        "company": "Northgate Hospital",
        "location": "Manchester",
        # the ward named: the 270M model copies its few-shot example's "acute medical ward" into any
        # nurse's summary, which the faithfulness check (rightly) blocks when the posting does not say it
        "description": (
            "Care for critically ill patients on an acute medical ward, administer medication and keep "
            "accurate records."
        ),
    },
    {
        "key": "p-3",
        "title": "Electrician",
        "company": "Volt & Partners",
        "location": "Lyon",
        "description": "Install cabling, switchboards and lighting in new homes; test them safely.",
    },
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def seed_postings(url: str, tmp_path: Path, rows: list[dict] | None = None) -> None:
    path = write_jsonl(tmp_path / f"seed-{uuid.uuid4().hex[:6]}.jsonl", rows or POSTINGS)
    with session_scope(url) as session:
        report = ingest_files(session, [path])
    assert not report.rejected, report.rejected


def run_use_case(
    defs, instance: DagsterInstance, keys: list[str], use_case: str = "posting_summary", **kwargs
):  # noqa: ANN001, ANN201
    """Materialize `use_case` for `keys` in ONE run over their partition range, as the sensor would."""
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    known = set(instance.get_dynamic_partitions("postings"))
    instance.add_dynamic_partitions("postings", [key for key in keys if key not in known])
    job = defs.resolve_job_def(f"{use_case}_job")
    tags = {
        ASSET_PARTITION_RANGE_START_TAG: keys[0],
        ASSET_PARTITION_RANGE_END_TAG: keys[-1],
        "pipeline/source": "test",
    }
    return job.execute_in_process(instance=instance, tags=tags, raise_on_error=False, **kwargs)


def database_goes_away_on(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    """Storing `key`'s output raises, as a database that went away mid-transaction would."""
    from appdb import claims

    real_complete = claims.complete_items

    def fails_on_key(session, use_case, run_id, outputs, **fencing):  # noqa: ANN001, ANN003, ANN202
        if key in outputs:
            raise RuntimeError("database went away")
        return real_complete(session, use_case, run_id, outputs, **fencing)

    monkeypatch.setattr(claims, "complete_items", fails_on_key)
