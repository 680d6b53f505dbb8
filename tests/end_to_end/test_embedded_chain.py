"""The refined summary chain (extract, grade, improve, final) on the real embedded model, one posting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput
from pipeline_defs.cli.trace_report import render_text, trace_blocks
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.store.postings_kind import POSTINGS as POSTINGS_KIND
from tests.support.fakes import counting_model_loads
from tests.support.postings import POSTINGS, run_use_case, seed_postings

pytestmark = pytest.mark.embedded_llm


def test_the_refined_summary_chain_runs_on_the_embedded_model_and_its_path_is_traced(
    sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads = counting_model_loads(monkeypatch)
    seed_postings(sqlite_url, tmp_path, POSTINGS[1:2])  # p-2: its summaries state no invented fact
    settings = Settings.from_env().changed(
        database_url=sqlite_url, llm_backend="embedded", summary_style="refined"
    )
    defs = build_definitions(settings)

    result = run_use_case(defs, dagster_instance, ["p-2"])

    assert result.success and len(loads) == 1
    with session_scope(sqlite_url) as session:
        output = session.get(UseCaseOutput, ("posting_summary", "p-2"))
        steps = list(session.scalars(select(Interaction).order_by(Interaction.id)))
        trace = render_text(list(trace_blocks(session, "p-2", [POSTINGS_KIND], [])))
    assert len(output.value["summary"]) > 20
    records = [step.options["chain"] for step in steps]
    assert [record["step"] for record in records[:2]] == ["extract", "grade"]
    assert records[-1]["step"] == "final" and records[-1]["route"] == "END"
    improves = [record for record in records if record["step"] == "improve"]
    assert len(improves) <= 3  # the budget holds on a real model
    placeholder = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?\}")
    assert not any(placeholder.search(step.prompt) for step in steps)  # every variable was substituted
    # the kept summary is one the chain produced and graded
    produced = [
        s.parsed_output["summary"] for s in steps if s.options["chain"]["step"] in ("extract", "improve")
    ]
    assert output.value["summary"] in produced
    assert "chain path" in trace and f"ended: {records[-1]['ended']}" in trace
    print(trace[trace.index("chain path") :].split("\n-- ", 1)[0])
