"""`pipeline trace KEY` answers with a summary first: the posting's fields and one line per use case
(state, model, version, calls, the output in a few words); `--full` adds the exact prompts and
responses, and `--markdown` writes the full report whatever is shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from domain.language.llm_types import Generation
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from resources.llm import LLMResource
from tests.support.postings import POSTINGS, run_use_case, seed_postings

SUMMARY = "Brightwave Energy hires a Data Engineer in Berlin to build Python and SQL pipelines."


class SummaryModel(LLMResource):
    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        return Generation(json.dumps({"summary": SUMMARY}), 300, 20, 1.0)


@pytest.fixture
def traced(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    seed_postings(sqlite_url, tmp_path, [{**POSTINGS[0], "description": POSTINGS[0]["description"] * 3}])
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    with DagsterInstance.ephemeral() as instance:
        run_use_case(build_definitions(Settings.from_env(), llm=SummaryModel()), instance, ["p-1"])
    return sqlite_url


def test_trace_shows_one_line_per_use_case_and_the_prompts_only_in_full(
    traced: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trace", "p-1"]) == 0
    short = capsys.readouterr().out
    lines = short.splitlines()
    assert lines[0] == "Posting p-1: Data Engineer"
    assert "company: Brightwave Energy · location: Berlin" in lines[2]
    assert "description: 222 characters" in short  # the text itself only in full
    summary = next(line for line in lines if line.startswith("posting_summary · "))
    assert summary.startswith("posting_summary · current · gemma3:270m · version ")
    assert summary.endswith(f" · 1 call · {SUMMARY}")
    skills = next(line for line in lines if line.startswith("posting_skills · "))
    assert " · no output yet · " in skills and " · 0 calls" in skills
    assert "Prompt sent" not in short and "Raw response" not in short
    assert lines[-1] == "the prompts, responses and outputs in full: pipeline trace p-1 --full"

    assert main(["trace", "p-1", "--full"]) == 0
    full = capsys.readouterr().out
    assert "Raw response:" in full and "turbine telemetry" in full and len(full) > 2 * len(short)

    report = tmp_path / "trace.md"
    assert main(["trace", "p-1", "--markdown", str(report)]) == 0
    assert "posting_summary · current" in capsys.readouterr().out  # the summary on screen
    assert "**Raw response**" in report.read_text()  # the whole report in the file
