"""The enriched postings as Dagster assets users build on (plugins/postings/enriched_assets.py): a user's
own asset in a code location with ours reads `enriched_postings` as a DataFrame; `load_asset_value`
gives the same frame as the read API; the materialization records row count and column schema;
declarative automation requests the table when an upstream output changes; `skill_demand` counts
concepts per week."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dagster import (
    AssetIn,
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    Definitions,
    asset,
    evaluate_automation_conditions,
)

from appdb.database import session_scope
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.store.enriched_postings import enriched_postings_frame
from tests.support.enriched import PYTHON, seed_enriched

OUTPUT_ASSETS = ["enriched_postings", "posting_concepts", "skill_demand"]


@asset(ins={"postings": AssetIn("enriched_postings")})
def postings_with_python(postings: pd.DataFrame) -> list[str]:
    """A user's own asset: the postings that ask for Python, by the concepts the pipeline resolved."""
    return [
        row.key
        for row in postings.itertuples()
        if row.concepts is not None and any(concept["concept_uri"] == PYTHON for concept in row.concepts)
    ]


@pytest.fixture
def user_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> dict[str, Any]:
    seeded = seed_enriched(tmp_path, monkeypatch, sqlite_url)
    defs = Definitions.merge(
        build_definitions(Settings.from_env()), Definitions(assets=[postings_with_python])
    )
    return {**seeded, "defs": defs, "outputs": tmp_path / "data" / "outputs"}


def materialize(defs: Definitions, instance: DagsterInstance, names: list[str]) -> Any:
    job = defs.resolve_implicit_global_asset_job_def()
    return job.execute_in_process(instance=instance, asset_selection=[AssetKey(name) for name in names])


def test_a_users_own_asset_reads_enriched_postings_as_a_dataframe(
    user_location: dict[str, Any], dagster_instance: DagsterInstance
) -> None:
    defs = user_location["defs"]
    result = materialize(defs, dagster_instance, [*OUTPUT_ASSETS, "postings_with_python"])
    assert result.success

    assert result.output_for_node("postings_with_python") == ["p-1"]
    loaded = defs.load_asset_value("enriched_postings", instance=dagster_instance)
    with session_scope(user_location["url"]) as session:
        pd.testing.assert_frame_equal(loaded, enriched_postings_frame(session))
    assert (user_location["outputs"] / "enriched_postings.parquet").is_file()

    materialization = dagster_instance.get_latest_materialization_event(AssetKey("enriched_postings"))
    metadata = materialization.asset_materialization.metadata
    assert metadata["dagster/row_count"].value == 3
    columns = {column.name: column for column in metadata["dagster/column_schema"].schema.columns}
    assert set(columns) == set(loaded.columns) and "span" in columns["skills"].description
    assert "latest_output_at" in metadata

    concepts = defs.load_asset_value("posting_concepts", instance=dagster_instance)
    assert list(concepts["mention"]) == ["Python", "SQL"]
    demand = defs.load_asset_value("skill_demand", instance=dagster_instance)
    # p-1 has no posted_at: its week is its resolution's (2026-11-20, a Friday: the week of Monday the 16th)
    assert demand.to_dict("records") == [
        {
            "week": pd.Timestamp("2026-11-16").date(),
            "concept_uri": PYTHON,
            "concept_label": "Python (computer programming)",
            "postings": 1,
        }
    ]


def test_automation_requests_the_table_when_an_upstream_output_changes(
    user_location: dict[str, Any], dagster_instance: DagsterInstance
) -> None:
    defs = user_location["defs"]
    table = AssetKey("enriched_postings")
    assert materialize(defs, dagster_instance, OUTPUT_ASSETS).success
    settled = evaluate_automation_conditions(defs=defs, instance=dagster_instance)
    assert settled.get_num_requested(table) == 0  # nothing changed upstream since it was made

    # a run of posting_summary writes one posting's output: the table follows, not waiting for every
    # posting to have every output
    dagster_instance.add_dynamic_partitions("postings", ["p-1", "p-2", "p-3"])
    dagster_instance.report_runless_asset_event(AssetMaterialization("posting_summary", partition="p-2"))
    changed = evaluate_automation_conditions(defs=defs, instance=dagster_instance, cursor=settled.cursor)
    # in the same request, the long table and the weekly counts after it
    assert [changed.get_num_requested(AssetKey(name)) for name in OUTPUT_ASSETS] == [1, 1, 1]
