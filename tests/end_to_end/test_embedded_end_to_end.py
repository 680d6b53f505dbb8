"""The embedded model end to end through Dagster: a real model call, one run, one model load."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from tests.support.fakes import counting_model_loads
from tests.support.postings import POSTINGS, run_use_case, seed_postings

pytestmark = pytest.mark.embedded_llm


def test_embedded_model_summarizes_a_batch_in_one_run_and_trace_shows_the_exact_prompt(
    sqlite_url: str,
    tmp_path: Path,
    dagster_instance,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loads = counting_model_loads(monkeypatch)
    seed_postings(sqlite_url, tmp_path)
    defs = build_definitions(Settings.from_env().changed(database_url=sqlite_url, llm_backend="embedded"))
    keys = [posting["key"] for posting in POSTINGS]

    result = run_use_case(defs, dagster_instance, keys)

    assert result.success
    assert len(loads) == 1
    assert len(dagster_instance.get_run_records()) == 1
    events = result.get_asset_materialization_events()
    assert events and {event.partition for event in events} <= set(keys)
    metadata = events[0].event_specific_data.materialization.metadata
    assert metadata["model"].value == "gemma3:270m" and metadata["backend"].value == "embedded"
    assert metadata["prompt_tokens"].value > 100 and metadata["preview"].value
    with session_scope(sqlite_url) as session:
        outputs = {row.subject_key: row for row in session.scalars(select(UseCaseOutput))}
        interactions = {row.subject_key: row for row in session.scalars(select(Interaction))}
    assert "p-2" in outputs and all(len(o.value["summary"]) > 10 for o in outputs.values())
    for posting in POSTINGS:
        interaction = interactions[posting["key"]]
        expected_prompt, _, _ = POSTING_SUMMARY.render(
            {**posting, "url": "not stated", "posted_at": "not stated"}
        )
        assert interaction.prompt == expected_prompt
        assert posting["description"] in interaction.prompt and "{description}" not in interaction.prompt
        assert (interaction.backend, interaction.run_id) == ("embedded", result.run_id)
        if posting["key"] in outputs:
            assert interaction.status == "ok" and interaction.parsed_output == outputs[posting["key"]].value
        else:  # the 270M model copied a fact from its few-shot examples: blocked, the phrase named
            assert interaction.status == "item_error"
            assert interaction.error.startswith("blocked by check summary_faithful: summary states")

    monkeypatch.setenv("PIPELINE_DATABASE_URL", sqlite_url)
    report = tmp_path / "trace.md"
    assert main(["trace", "p-2", "--full", "--markdown", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "output: current" in printed
    assert interactions["p-2"].raw_response.splitlines()[0] in printed
    assert "\n".join(f"  | {line}" for line in interactions["p-2"].prompt.splitlines()) in printed
    assert interactions["p-2"].prompt in report.read_text()


def test_embedded_model_extracts_grounded_skills_in_the_same_run_as_the_summary(
    sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One group run for one posting: summary and skills, one model load, mentions found in the text."""
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    loads = counting_model_loads(monkeypatch)
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])
    # the embedded model's own skills prompt (the default is the CPU tagger, tested elsewhere)
    settings = Settings.from_env().changed(
        database_url=sqlite_url, llm_backend="embedded", skills_style="llm"
    )
    defs = build_definitions(settings)
    dagster_instance.add_dynamic_partitions("postings", ["p-1"])
    result = defs.resolve_job_def("gemma3_270m_batch_job").execute_in_process(
        instance=dagster_instance,
        tags={ASSET_PARTITION_RANGE_START_TAG: "p-1", ASSET_PARTITION_RANGE_END_TAG: "p-1"},
    )

    assert result.success and len(loads) == 1
    with session_scope(sqlite_url) as session:
        outputs = {row.use_case: row.value for row in session.scalars(select(UseCaseOutput))}
        prompts = {row.use_case: row.prompt for row in session.scalars(select(Interaction))}
    skills = outputs["posting_skills"]["skills"]
    assert skills, outputs["posting_skills"]
    text = f"{POSTINGS[0]['title']}\n{POSTINGS[0]['description']}"
    for skill in skills:  # grounded: every kept mention is in the posting, with its sentence as evidence
        assert skill["mention"].lower() in text.lower() and skill["evidence"] in text
    assert {"posting_summary", "posting_skills"} <= set(prompts)
    assert POSTINGS[0]["description"] in prompts["posting_skills"]


def test_embedded_model_judges_its_own_summary_with_grammar_valid_grades_and_no_second_load(
    sqlite_url: str, tmp_path: Path, dagster_instance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded base model as an LLM judge (calibration off: it fails its calibration set, so by
    default it is refused): grammar-valid grades 1-5 per criterion, from the model the run loaded."""
    from appdb.models import OutputGrade

    loads = counting_model_loads(monkeypatch)
    seed_postings(sqlite_url, tmp_path, POSTINGS[1:2])
    settings = Settings.from_env().changed(
        database_url=sqlite_url,
        llm_backend="embedded",
        judge_sample=1,
        judge_model="gemma3:270m",
        judge_calibration=False,
    )
    defs = build_definitions(settings, use_cases=[POSTING_SUMMARY])

    result = run_use_case(defs, dagster_instance, ["p-2"])

    assert result.success and len(loads) == 1  # the judge reuses the model the run loaded
    [judge] = [e for e in result.get_asset_check_evaluations() if e.check_name == "judge_grades"]
    assert judge.metadata["graded"].value == 1 and judge.metadata["judge_errors"].value == 0
    with session_scope(sqlite_url) as session:
        [grade] = session.scalars(select(OutputGrade)).all()
        call = session.get(Interaction, grade.interaction_id)
    assert set(grade.scores) == {"faithful", "complete", "concise"}
    assert all(score in range(1, 6) for score in grade.scores.values())
    assert (call.use_case, call.model, call.status) == ("posting_summary:judge", "gemma3:270m", "ok")
    assert call.completion_tokens <= 40 and call.prompt.endswith("Grades:")


def test_loading_the_embedded_model_prints_nothing_into_the_terminal(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """llama.cpp's warnings (such as its SWA-cache line) went straight to stderr, through the middle of
    `pipeline demo`'s progress line; they now reach the `llama_cpp.native` logger at DEBUG."""
    from resources.embedded_backend import LLAMA_LOGGER, EmbeddedLLMResource

    with caplog.at_level(logging.DEBUG, logger=LLAMA_LOGGER.name):
        assert EmbeddedLLMResource().ensure_loaded("gemma3:270m")

    assert capfd.readouterr().err == ""
    assert any(record.name == LLAMA_LOGGER.name for record in caplog.records)
