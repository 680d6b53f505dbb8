"""The one quality report for any backend, against a fake Ollama and a tiny copy of the public data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from benchmarks import llm_quality, skills_extraction
from plugins.postings.commands.demo_command import DEMO_POSTINGS
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from tests.support.fakes import FakeOllama
from tests.support.taxonomy_files import URI, write_taxonomy

SKILLS = [
    [f"{URI}python", "Python (computer programming)", "python", "knowledge", "The Python language."],
    [f"{URI}teamwork", "work in teams", "teamwork", "skill/competence", "Work with others."],
    [f"{URI}sql", "SQL", "structured query language", "knowledge", "The SQL language."],
]
SENTENCE = "You write Python and SQL and collaborate with others."


def tiny_shared_data(root: Path) -> Path:
    """ESCO (three skills), Decorte validation spans (a sentence per split), SkillSpan dev (two postings)."""
    (root / "esco").mkdir(parents=True)
    write_taxonomy(root / "esco" / "skills_en_v1.1.1.csv", SKILLS)
    (root / "decorte_esco_linked").mkdir()
    for split in ("tech", "house"):
        with (root / "decorte_esco_linked" / f"{split}_validation_annotations.csv").open(
            "w", newline=""
        ) as f:
            writer = csv.writer(f)
            writer.writerow(["sentence", "span", "sub_span", "label"])
            writer.writerow([SENTENCE, "Python", "", "Python (computer programming)"])
            writer.writerow([SENTENCE, "collaborate", "", "work in teams"])
    (root / "skillspan").mkdir()
    rows = [
        ("tech", 1, "We need a developer who knows Python and SQL .", {"Python": "K", "SQL": "K"}),
        ("house", 2, "You will manage a small team and plan shifts .", {"manage": "S"}),
    ]
    with (root / "skillspan" / "dev.json").open("w") as handle:
        for source, idx, text, tags in rows:
            tokens = text.split()
            knowledge = ["B" if tags.get(token) == "K" else "O" for token in tokens]
            skill = ["B" if tags.get(token) == "S" else "O" for token in tokens]
            row = {
                "idx": idx,
                "tokens": tokens,
                "tags_skill": skill,
                "tags_knowledge": knowledge,
                "source": source,
            }
            handle.write(json.dumps(row) + "\n")
    return root


def test_both_prompt_styles_give_a_row_per_measure_in_one_table(
    httpserver: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    fake = FakeOllama(httpserver)
    monkeypatch.setenv("OLLAMA_HOST", httpserver.url_for("/").rstrip("/"))
    monkeypatch.setattr(llm_quality, "ASK_BELOW", 1.01)  # the tiny taxonomy's answers are sure: ask them all
    data = tiny_shared_data(tmp_path / "shared")
    out = tmp_path / "results"
    code = llm_quality.main(
        [
            "--backend", "ollama", "--model", "gemma3:270m", "--prompt-style", "both", "--limit", "1",
            "--data-dir", str(data), "--embedding-cache", str(tmp_path / "cache"), "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads((out / "llm_quality.json").read_text())["results"]
    rows = report["rows"]
    assert {(row["measure_id"], row["style"]) for row in rows} == {
        (measure, style) for measure in llm_quality.MEASURES for style in ("completion", "chat")
    }
    assert not [row for row in rows if row["result"] == "skipped"]
    assert all(row["calls"] >= 1 for row in rows), rows
    assert "1 demo postings" in next(row["sample"] for row in rows if row["measure_id"] == "summary-demo")
    # the table on stdout and in results/: one line per measure and style, side by side
    table = (out / "llm_quality.md").read_text()
    assert table in capsys.readouterr().out or "| summary faithfulness |" in table
    for name in ("summary faithfulness", "judge discrimination", "skills verification", "linking referee"):
        lines = [line for line in table.splitlines() if line.startswith(f"| {name} |")]
        assert {line.split(" | ")[2] for line in lines} == {"completion", "chat"}, name
    # completion through /api/generate, chat through /api/chat with the posting in a message of its own
    paths = {request["path"] for request in fake.generations}
    assert paths == {"/api/generate", "/api/chat"}
    chats = [request for request in fake.generations if request["path"] == "/api/chat"]
    assert all(request["messages"][0]["role"] == "system" for request in chats)
    demo_posting = json.loads(DEMO_POSTINGS.read_text().splitlines()[0])
    [summary_chat] = [r for r in chats if demo_posting["description"][:60] in r["messages"][-1]["content"]]
    assert demo_posting["description"][:60] not in summary_chat["messages"][0]["content"]
    assert summary_chat["format"] == dict(POSTING_SUMMARY.grammar_schema)


def test_an_unknown_measure_is_one_clear_error(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        llm_quality.main(["--measures", "summary-demo,speed"])
    assert "unknown measures ['speed']" in capsys.readouterr().err


def test_the_skills_benchmark_llm_configurations_run_on_the_configured_model(
    httpserver: HTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the model hard-coded for the 270M era: PIPELINE_MODEL chooses it, as in the pipeline."""
    fake = FakeOllama(httpserver, models=(), instruct=("qwen2.5:7b-instruct",))
    monkeypatch.setenv("OLLAMA_HOST", httpserver.url_for("/").rstrip("/"))
    monkeypatch.setenv("PIPELINE_MODEL", "qwen2.5:7b-instruct")
    data = tiny_shared_data(tmp_path / "shared")
    code = skills_extraction.main(
        [
            "--configs", "llm,tagger+ollama-verify", "--domains", "skillspan", "--limit", "1",
            "--data-dir", str(data), "--out", str(tmp_path / "results"),
        ]
    )  # fmt: skip
    assert code == 0
    assert fake.generations and {request["model"] for request in fake.generations} == {"qwen2.5:7b-instruct"}
    report = json.loads((tmp_path / "results" / "skills_extraction.json").read_text())["results"]
    configs = report["domains"]["skillspan"]["configs"]
    assert configs["llm"]["model"] == configs["tagger+ollama-verify"]["model"] == "qwen2.5:7b-instruct"
