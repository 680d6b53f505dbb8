"""What the UI plots from a materialization is a number worth plotting: token counts only for a use
case that calls a model (a script's are always 0), the interaction's id as text (an id is no line); and
what it lists is a table: the skills of a posting, the postings a check failed and why."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance, IntMetadataValue, TableMetadataValue, TextMetadataValue

from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from tests.integration.test_trace_summary import SummaryModel
from tests.support.postings import POSTINGS, run_use_case, seed_postings


def test_script_steps_carry_no_token_counts_and_ids_are_text(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    defs = build_definitions(Settings.from_env(), llm=SummaryModel())
    with DagsterInstance.ephemeral() as instance:
        run_use_case(defs, instance, ["p-1"])
        skills_run = run_use_case(defs, instance, ["p-1"], use_case="posting_skills")  # a script
        summary = instance.get_latest_materialization_event(AssetKey("posting_summary"))
        skills = instance.get_latest_materialization_event(AssetKey("posting_skills"))
    llm = summary.asset_materialization.metadata
    assert isinstance(llm["prompt_tokens"], IntMetadataValue) and llm["prompt_tokens"].value == 300
    assert isinstance(llm["interaction_id"], TextMetadataValue) and llm["interaction_id"].value.isdigit()
    script = skills.asset_materialization.metadata
    assert "prompt_tokens" not in script and "completion_tokens" not in script
    assert "latency_ms" in script and script["backend"].value == "script"
    # the skills as a table (a column per plain field of the schema), not a JSON string cut at 300 characters
    preview = script["preview"]
    assert isinstance(preview, TableMetadataValue)
    assert [column.name for column in preview.schema.columns] == [
        "mention",
        "kind",
        "evidence",
        "field",
        "start",
        "end",
    ]
    assert [column.type for column in preview.schema.columns][-2:] == ["int", "int"]
    mentions = {row.data["mention"] for row in preview.records}
    assert {"Python", "dbt"} <= mentions, mentions
    # a check's failures as a table of postings and reasons, not a JSON blob
    [valid] = [e for e in skills_run.get_asset_check_evaluations() if e.check_name == "outputs_valid"]
    failures = valid.metadata["failures"]
    assert isinstance(failures, TableMetadataValue) and failures.records == []
    assert [column.name for column in failures.schema.columns] == ["posting", "reason"]
