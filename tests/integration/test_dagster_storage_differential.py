"""Stock and pooled Dagster storages, side by side: the same batch through each, and what the UI would
read from them compared. The pooled storages (pipeline_defs/runtime/dagster_storage.py) override private
methods of Dagster's; if a Dagster release changes what those methods store, this test sees the two
views differ (and tests/unit/test_dagster_private_api.py sees the methods change)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterEventType, DagsterInstance, EventRecordsFilter

from domain.language.llm_types import Generation
from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings
from resources.llm import LLMResource
from tests.support.postings import run_use_case, seed_postings

SUMMARY = AssetKey("posting_summary")
POSTINGS = [
    {
        "key": "d-1",
        "title": "Data Engineer",
        "company": "Brightwave",
        "description": "Build Python pipelines.",
    },
    {"key": "d-2", "title": "Nurse", "company": "Northgate", "description": "Care for patients at night."},
    {"key": "d-3", "title": "Baker", "company": "Crumb", "description": "Bake bread and cakes early."},
    {"key": "d-4", "title": "Cook", "company": "Bistro", "description": "Cook lunch for forty guests."},
]
ANSWERS = {  # by title: a good summary, a looping one (blocked by a check), one that is not JSON
    "Data Engineer": {"summary": "Brightwave hires a Data Engineer to build Python pipelines."},
    "Nurse": {"summary": "Northgate hires a nurse to care for patients at night."},
    "Baker": {"summary": "bake bread bake bread bake bread bake bread bake bread bake bread bake bread"},
    "Cook": "Sure! A cook job.",
}
# values that differ by nature between two runs (ids, clocks), compared by presence only
VOLATILE = {"interaction_id", "latency_ms", "input_hash"}


class TitleModel(LLMResource):
    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        title = prompt.rsplit("Title: ", 1)[1].split("\n", 1)[0]
        answer = ANSWERS[title]
        return Generation(answer if isinstance(answer, str) else json.dumps(answer), 40, 12, 1.0)


def _metadata(entry: Any) -> dict[str, Any]:
    values = {}
    for name, value in entry.metadata.items():
        raw = getattr(value, "value", getattr(value, "text", value))
        values[name] = "(present)" if name in VOLATILE else raw
    return values


def ui_view(instance: DagsterInstance, run_id: str) -> dict[str, Any]:
    """What the UI reads about the run and the asset: status, partitions, materializations, checks."""
    run = instance.get_run_by_id(run_id)
    materializations = instance.fetch_materializations(SUMMARY, limit=100).records
    storage = instance.event_log_storage
    failed = storage.get_latest_asset_partition_materialization_attempts_without_materializations(SUMMARY)
    planned = instance.get_records_for_run(
        run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION_PLANNED
    ).records
    checks = instance.get_records_for_run(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION).records
    check_view = sorted(
        (
            record.event_log_entry.dagster_event.event_specific_data.check_name,
            record.event_log_entry.dagster_event.event_specific_data.passed,
            sorted(record.event_log_entry.dagster_event.event_specific_data.metadata),
        )
        for record in checks
    )
    asset_record = instance.get_asset_records([SUMMARY])[0]
    last = asset_record.asset_entry.last_materialization
    return {
        "run_status": run.status.value,
        "materialized_partitions": sorted(instance.get_materialized_partitions(SUMMARY)),
        "failed_partitions": sorted(failed),
        "materializations": sorted(
            (
                record.partition_key,
                json.dumps(_metadata(record.asset_materialization), sort_keys=True, default=str),
            )
            for record in materializations
        ),
        "planned_partitions": sorted(record.partition_key for record in planned),
        # the asset's planned materializations across runs (the index, where the UI looks for in-progress
        # and failed partitions)
        "planned_for_asset": sorted(
            record.partition_key
            for record in instance.get_event_records(
                EventRecordsFilter(DagsterEventType.ASSET_MATERIALIZATION_PLANNED, asset_key=SUMMARY),
                limit=100,
            )
        ),
        "checks": check_view,
        "dynamic_partitions": sorted(instance.get_dynamic_partitions("postings")),
        "last_materialization_partition": last.dagster_event.partition if last else None,
        # the asset row's copy of the latest materialization is that event, with its storage id
        "last_materialization_is_the_latest_event": (
            asset_record.asset_entry.last_materialization_record == materializations[0]
            if materializations
            else None
        ),
        # what the asset row says of this run (the UI's "latest run" and in-progress partitions)
        "asset_row": {
            "last_run_is_this_run": asset_record.asset_entry.last_run_id == run_id,
            "last_planned_run_is_this_run": asset_record.asset_entry.last_planned_materialization_run_id
            == run_id,
            "has_last_event": asset_record.asset_entry.last_event_storage_id is not None,
        },
        "event_kinds": sorted(
            {
                entry.dagster_event.event_type_value
                for entry in instance.all_logs(run_id)
                if entry.dagster_event
            }
        ),
    }


def _batch_through(storage: str, dagster_postgres_url: str | None, root: Path) -> dict[str, Any]:
    app_db_url = f"sqlite:///{root / 'app.db'}"
    settings = Settings.from_env().changed(
        database_url=app_db_url,
        dagster_home=root / "home",
        dagster_storage=storage,
        dagster_postgres_url=dagster_postgres_url,
    )
    home = ensure_dagster_home(settings)
    seed_postings(app_db_url, root, POSTINGS)
    defs = build_definitions(settings, llm=TitleModel())
    with DagsterInstance.from_config(str(home)) as instance:
        kinds = {type(instance.run_storage).__name__, type(instance.event_log_storage).__name__}
        assert any(name.startswith("Pooled") for name in kinds) == (storage == "pooled"), kinds
        result = run_use_case(defs, instance, [posting["key"] for posting in POSTINGS])
        return ui_view(instance, result.run_id)


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_stock_and_pooled_storages_show_the_ui_the_same_batch(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "unused"))
    views = {}
    for storage in ("stock", "pooled"):
        url = request.getfixturevalue("postgres_database")() if engine == "postgresql" else None
        root = tmp_path / storage
        root.mkdir()
        views[storage] = _batch_through(storage, url, root)
    stock = views["stock"]
    # the batch did what it should, so the comparison compares something
    assert stock["materialized_partitions"] == ["d-1", "d-2"]
    assert stock["planned_partitions"] == ["d-1", "d-2", "d-3", "d-4"]
    assert (
        "outputs_valid",
        False,
        [
            "done",
            "failed",
            "failures",
            "llm_seconds",
            "skipped_current",
            "skipped_held_elsewhere",
            "unchanged_input",
        ],
    ) in stock["checks"]
    assert views["pooled"] == stock
