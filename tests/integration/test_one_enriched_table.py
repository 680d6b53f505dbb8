"""One enriched postings table, however a user gets it: the `enriched_postings` and `posting_concepts`
assets' Parquet files, `pipeline export` (and `--concepts`) and the SQL views hold the same rows for the
same data, on SQLite and PostgreSQL.

The asset and the export share one producer (`enriched_postings.enriched_table`); the views are SQL
written out in migrations, so this is what holds them to it: a column added to the table, or a field
to its lists, fails here until a migration changes the views.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance
from sqlalchemy import text, update

from appdb.database import session_scope
from appdb.models import UseCaseOutput
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.store.enriched_postings import CONCEPTS_SCHEMA, ENRICHED_SCHEMA
from tests.support.enriched import T0, seed_enriched

LIST_COLUMNS = ("skills", "concepts")


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_db_url: str) -> dict[str, Any]:
    """The shared seed (p-1 all three outputs, p-2 a summary, p-3 none), plus what the views once
    showed differently: p-1's summary a reviewer's correction, p-3 a skills output with no skills."""
    seeded = seed_enriched(tmp_path, monkeypatch, app_db_url)
    spec = seeded["specs"]["posting_skills"]
    with session_scope(app_db_url) as session:
        session.execute(
            update(UseCaseOutput)
            .where(UseCaseOutput.use_case == "posting_summary", UseCaseOutput.subject_key == "p-1")
            .values(backend="review")
        )
        at = T0 + timedelta(days=5)
        session.add(
            UseCaseOutput(
                use_case="posting_skills",
                subject_key="p-3",
                value={"skills": [], "ungrounded": ["a phrase the posting does not have"]},
                model=spec.model or "cpu",
                backend="fake",
                use_case_version=spec.version,
                input_hash="1" * 64,
                subject_hash="0" * 64,
                run_id="run-2",
                interaction_id=None,
                created_at=at,
                updated_at=at,
            )
        )
    return {**seeded, "data": tmp_path / "data", "out": tmp_path}


def _moment(value: Any) -> Any:
    """A time as the Parquet files give it (aware, UTC): SQLite's views give text, PostgreSQL's naive."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def _view_rows(url: str, view: str, order: str) -> tuple[list[str], list[dict[str, Any]]]:
    """The view's columns and its rows, lists parsed from their JSON text and times made aware."""
    with session_scope(url) as session:
        result = session.execute(text(f"SELECT * FROM {view} ORDER BY {order}"))
        columns = list(result.keys())
        rows = [dict(row._mapping) for row in result]
    for row in rows:
        for name, value in row.items():
            if name in LIST_COLUMNS and value is not None:
                row[name] = json.loads(value)
            elif name.endswith("_at"):
                row[name] = _moment(value)
    return columns, rows


def test_the_asset_the_export_and_the_view_give_the_same_table(
    seeded: dict[str, Any], dagster_instance: DagsterInstance
) -> None:
    defs = build_definitions(Settings.from_env())
    job = defs.resolve_implicit_global_asset_job_def()
    selection = [AssetKey("enriched_postings"), AssetKey("posting_concepts")]
    assert job.execute_in_process(instance=dagster_instance, asset_selection=selection).success
    asset = pq.read_table(seeded["data"] / "outputs" / "enriched_postings.parquet")
    asset_concepts = pq.read_table(seeded["data"] / "outputs" / "posting_concepts.parquet")

    exported_path, concepts_path = seeded["out"] / "export.parquet", seeded["out"] / "concepts.parquet"
    assert main(["export", "--out", str(exported_path)]) == 0
    assert main(["export", "--concepts", "--out", str(concepts_path)]) == 0
    exported, exported_concepts = pq.read_table(exported_path), pq.read_table(concepts_path)

    # the asset and the export: one producer, one schema, the same rows
    assert asset.schema.equals(ENRICHED_SCHEMA) and exported.schema.equals(ENRICHED_SCHEMA)
    assert asset.to_pylist() == exported.to_pylist()
    assert asset_concepts.schema.equals(CONCEPTS_SCHEMA) and exported_concepts.schema.equals(CONCEPTS_SCHEMA)
    assert asset_concepts.to_pylist() == exported_concepts.to_pylist()

    # the view: the same columns in the same order, and the same rows (lists as JSON text)
    columns, viewed = _view_rows(seeded["url"], "enriched_postings", "key")
    assert columns == ENRICHED_SCHEMA.names
    rows = sorted(exported.to_pylist(), key=lambda row: row["key"])
    assert viewed == rows
    by_key = {row["key"]: row for row in viewed}
    assert by_key["p-1"]["summary_model"] == "reviewer"  # the cases this test was written for
    assert by_key["p-3"]["skills"] == [] and by_key["p-3"]["concepts"] is None
    assert "evidence" not in by_key["p-1"]["skills"][0]

    columns, viewed_concepts = _view_rows(seeded["url"], "posting_concepts", "key, mention")
    assert columns == CONCEPTS_SCHEMA.names
    assert viewed_concepts == sorted(
        exported_concepts.to_pylist(), key=lambda row: (row["key"], row["mention"])
    )
    assert len(viewed_concepts) == 2
