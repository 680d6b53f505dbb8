"""The enriched postings as Dagster assets users build on (plugins/postings/enriched_assets.py): a user's
own asset in a code location with ours reads `enriched_postings` as a DataFrame; `load_asset_value`
gives the same frame as the read API; the materialization records row count and column schema;
the outputs sensor asks for the tables when an output changes, and while runs make outputs waits for
them to end (or for the refresh time); `skill_demand` counts
concepts per week."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dagster import (
    AssetIn,
    AssetKey,
    DagsterInstance,
    DagsterRunStatus,
    Definitions,
    RunRequest,
    SkipReason,
    asset,
    build_sensor_context,
)
from dagster._core.test_utils import create_run_for_test
from sqlalchemy import update

from appdb.database import session_scope
from appdb.models import UseCaseOutput
from assets.run_tags import WORK_GROUP_TAG
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.store.enriched_postings import enriched_postings_frame
from resources.app_database import AppDatabase
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


def _tick(defs: Definitions, instance: DagsterInstance, url: str, cursor: str | None) -> Any:
    """One tick of the outputs sensor, as the daemon makes it: its result and the cursor it leaves."""
    context = build_sensor_context(
        instance=instance, resources={"app_db": AppDatabase(url=url)}, cursor=cursor
    )
    result = defs.get_sensor_def("outputs_sensor")(context)
    return result, context.cursor


def _touch_summary(url: str, key: str) -> None:
    """A run of posting_summary writes this posting's output again."""
    with session_scope(url) as session:
        session.execute(
            update(UseCaseOutput)
            .where(UseCaseOutput.use_case == "posting_summary", UseCaseOutput.subject_key == key)
            .values(updated_at=datetime.now(UTC).replace(tzinfo=None))
        )


def test_the_tables_are_asked_for_in_one_run_when_an_output_changes(
    user_location: dict[str, Any], dagster_instance: DagsterInstance
) -> None:
    defs, url = user_location["defs"], user_location["url"]
    sensor = defs.get_sensor_def("outputs_sensor")
    selected = sensor.asset_selection.resolve(defs.resolve_asset_graph())
    assert selected == {AssetKey(name) for name in OUTPUT_ASSETS}  # the long table and weekly counts too
    first, cursor = _tick(defs, dagster_instance, url, None)
    assert isinstance(first, RunRequest) and first.asset_selection is None  # the sensor's three
    settled, cursor = _tick(defs, dagster_instance, url, cursor)
    assert isinstance(settled, SkipReason) and "no output or posting changed" in settled.skip_message

    # one posting's output changes: the tables follow, not waiting for every posting to have every output
    _touch_summary(url, "p-2")
    changed, _ = _tick(defs, dagster_instance, url, cursor)
    assert isinstance(changed, RunRequest)


def test_while_runs_make_outputs_the_tables_wait_until_they_end_or_the_refresh_is_due(
    user_location: dict[str, Any], dagster_instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each remake reads every posting: one a minute while 10,000 postings were processed was 5-6% of the
    pipeline's CPU. While the work groups' runs go, the tables wait for them to end, or for
    PIPELINE_OUTPUTS_REFRESH_SECONDS since the last request (0: whenever an output changes)."""
    defs, url = user_location["defs"], user_location["url"]
    _, cursor = _tick(defs, dagster_instance, url, None)
    going = {"job_name": "gemma3_270m_batch_job", "status": DagsterRunStatus.STARTED}
    run = create_run_for_test(dagster_instance, **going, tags={WORK_GROUP_TAG: "gemma3_270m"})
    _touch_summary(url, "p-2")
    waiting, cursor = _tick(defs, dagster_instance, url, cursor)
    assert isinstance(waiting, SkipReason)
    assert "1 runs are making outputs: the tables are remade when they end" in waiting.skip_message

    dagster_instance.report_run_failed(run)  # it ended (how does not matter)
    ended, _ = _tick(defs, dagster_instance, url, cursor)
    assert isinstance(ended, RunRequest)

    create_run_for_test(dagster_instance, **going, tags={WORK_GROUP_TAG: "gemma3_270m"})
    monkeypatch.setenv("PIPELINE_OUTPUTS_REFRESH_SECONDS", "0")  # the refresh always due
    every_change = build_definitions(Settings.from_env())
    due, _ = _tick(every_change, dagster_instance, url, cursor)
    assert isinstance(due, RunRequest)
