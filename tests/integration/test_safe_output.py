"""Postings and model output are a stranger's text: `trace`, `review` and the demo's table print them
without terminal control sequences (a screen clear, an OSC 8 hyperlink), and `trace --markdown` keeps
them inside their code fences with no raw HTML, while the words stay readable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from appdb import review
from appdb.database import session_scope
from domain.language.llm_types import Generation
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.commands.demo_command import render_postings
from resources.llm import LLMResource
from tests.support.postings import run_use_case, seed_postings

CLEAR = "\x1b[2J"
LINK = "\x1b]8;;http://evil\x07click here\x1b]8;;\x07"
KEY = "p-evil"
POSTING = {
    "key": KEY,
    "title": f"Payments Clerk {CLEAR}",
    "company": f"Acme {LINK}",
    "location": "Berlin <script>steal()</script>",
    "description": (
        f"Process invoices with SAP. {LINK}\n```\n````\n<script>alert(1)</script>\n````` five backticks\n"
        "Reconcile accounts weekly."
    ),
}
SUMMARY = "Acme hires a Payments Clerk to process invoices. \x1b[31mRED\x1b[0m ```\n<script>x()</script>"


class HostileModel(LLMResource):
    """Answers every prompt with a summary that carries escapes, a fence and HTML."""

    @property
    def backend_name(self) -> str:
        return "hostile"

    def _load(self, model: str) -> Any:
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        return Generation(json.dumps({"summary": SUMMARY}), 50, 20, 1.0)


@pytest.fixture
def hostile(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A hostile posting summarized by a hostile model, flagged for review; the CLI pointed at it."""
    seed_postings(sqlite_url, tmp_path, [POSTING])
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    with DagsterInstance.ephemeral() as instance:
        run_use_case(build_definitions(Settings.from_env(), llm=HostileModel()), instance, [KEY])
    with session_scope(sqlite_url) as session:
        review.flag_for_review(
            session,
            use_case="posting_summary",
            subject_key=KEY,
            use_case_version="1",
            reason=f"spot check {CLEAR}",
            output={"summary": SUMMARY},
        )
    return sqlite_url


def assert_clean(text: str) -> None:
    for control in ("\x1b", "\x07", "\x9b"):
        assert control not in text, f"{control!r} reached the output: {text!r}"


def test_trace_review_and_the_demo_table_print_no_control_sequences(
    hostile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trace", KEY]) == 0
    summary = capsys.readouterr().out
    assert main(["trace", KEY, "--full"]) == 0
    trace = capsys.readouterr().out
    assert main(["review", "--status", "all"]) == 0
    assert main(["review", "show", "1"]) == 0
    reviewed = capsys.readouterr().out
    with session_scope(hostile) as session:
        demo_table = render_postings(session, [KEY])
    for text in (summary, trace, reviewed, demo_table):
        assert_clean(text)
    # still readable: the words around the sequences are all there
    assert "Payments Clerk" in trace and "click here" in trace and "Reconcile accounts weekly." in trace
    assert "RED" in trace and "Acme click here" in trace
    assert "Berlin <script>steal()</script>" in trace  # shown as written: a terminal runs no HTML
    assert "spot check" in reviewed and "click here" in reviewed and "RED" in reviewed
    assert "Payments Clerk" in demo_table and "Acme click here" in demo_table
    assert "Payments Clerk" in summary and "RED" in summary


def test_trace_markdown_keeps_quoted_text_in_its_fences_and_renders_no_html(
    hostile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    markdown_it = pytest.importorskip("markdown_it")
    report = tmp_path / "trace.md"
    assert main(["trace", KEY, "--markdown", str(report)]) == 0
    text = report.read_text()
    assert_clean(text)
    tokens = markdown_it.MarkdownIt("commonmark").parse(text)
    html = markdown_it.MarkdownIt("commonmark").render(text)
    assert "<script>" not in html, "raw HTML from the posting or the model reached the rendered page"
    blocks = [token.content for token in tokens if token.type == "fence"]
    labels = [token.content for token in tokens if token.type == "inline" and token.content.startswith("**")]
    # one code block per verbatim text, each whole: no ``` line inside closed one early
    assert len(blocks) == len(labels), (labels, blocks)
    description = next(block for block in blocks if "Process invoices" in block)
    assert (
        "```\n````\n<script>alert(1)</script>\n````` five backticks\nReconcile accounts weekly."
        in description
    )
    assert any("<script>x()</script>" in block for block in blocks)  # the raw response, verbatim
    headings = [
        token.content for token in tokens if token.type == "inline" and "Payments Clerk" in token.content
    ]
    assert headings and all("<" not in heading for heading in headings)
