"""`pipeline ingest` tells Dagster the postings were loaded: a materialization of `postings` in Dagster's
storage (no daemon needed), so a UI backfill of a use case finds its input materialized (it said
"upstream not materialized: postings"); and a load leaves the partitions made before fresh."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance
from dagster._core.definitions.data_version import StaleStatus
from dagster._utils.test.data_versions import get_stale_status_resolver

from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from tests.integration.test_trace_summary import SummaryModel
from tests.support.postings import POSTINGS, run_use_case, write_jsonl

POSTINGS_KEY = AssetKey("postings")


def test_an_ingest_is_a_materialization_of_postings_that_leaves_outputs_fresh(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "data" / "dagster_home"))  # restored afterwards
    monkeypatch.delenv("OLLAMA_HOST", raising=False)

    assert main(["ingest", str(write_jsonl(tmp_path / "first.jsonl", POSTINGS[:2]))]) == 0
    assert "warning" not in capsys.readouterr().err
    defs = build_definitions(Settings.from_env(), llm=SummaryModel())
    with DagsterInstance.get() as instance:

        def loads() -> list:
            return list(instance.fetch_materializations(POSTINGS_KEY, limit=100).records)

        [loaded] = loads()
        assert loaded.event_log_entry.run_id == ""  # reported, not run
        metadata = loaded.asset_materialization.metadata
        assert (metadata["inserted"].value, metadata["total_postings"].value) == (2, 2)
        assert metadata["source"].value == "pipeline ingest"

        assert run_use_case(defs, instance, ["p-1", "p-2"]).success
        summary = AssetKey("posting_summary")

        def status() -> StaleStatus:  # p-1's summary (the fake's summary is faithful to p-1 only)
            resolver = get_stale_status_resolver(instance, list(defs.resolve_asset_graph().assets_defs))
            return resolver.get_status(summary, "p-1")

        assert status() == StaleStatus.FRESH

        # another posting loaded: recorded too, and the summaries made before stay fresh
        assert main(["ingest", str(write_jsonl(tmp_path / "second.jsonl", POSTINGS[2:]))]) == 0
        again, _ = loads()
        assert again.asset_materialization.metadata["total_postings"].value == 3
        assert status() == StaleStatus.FRESH

        # nothing new: nothing recorded
        assert main(["ingest", str(tmp_path / "second.jsonl")]) == 0
        assert len(loads()) == 2
