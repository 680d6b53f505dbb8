"""The shipped multi-step examples: the refined summary (extract, grade, improve, final) and the
expert fan-out with its synthesizer, opt-in through settings; fan-in waits for every expert."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from dagster import AssetKey, DagsterInstance
from sqlalchemy import select

from appdb import discovery
from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput
from assets.factory import build_work_groups
from domain.language.declaration import UseCase
from domain.language.declaration_parts import DeclarationError
from domain.language.fan_out import fan_in
from domain.language.llm_types import Generation
from domain.language.steps import StepContext, StepRecord
from pipeline_defs.catalog import declared_use_cases
from pipeline_defs.cli.in_process_runs import run_pending
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.store.postings_kind import POSTINGS as POSTINGS_KIND
from plugins.postings.use_cases.posting_assessment import POSTING_CONTRACT, POSTING_SENIORITY, rate_seniority
from plugins.postings.use_cases.refined_summary import grade_summary, keep_best_summary
from plugins.postings.use_cases.shipped import USE_CASES
from resources.app_database import AppDatabase
from resources.llm import LLMResource
from tests.support.postings import POSTINGS, run_use_case, seed_postings

PROFILE = "A permanent, hybrid role."


class ShippedPrompts(LLMResource):
    """Answers the shipped prompts by their first line; records (task, title) per call."""

    calls: ClassVar[list[tuple[str, str]]] = []
    loads: ClassVar[list[str]] = []
    summaries: ClassVar[dict[str, list[str]]] = {}

    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        ShippedPrompts.loads.append(model)
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        title = prompt.rsplit("Title: ", 1)[1].split("\n", 1)[0]
        first = prompt.split("\n", 1)[0]
        answers = {
            "where the work happens": {"mode": "hybrid"},
            "kind of contract": {"contract": "permanent"},
            "reviewers' notes": {"profile": PROFILE},
            "knowledge and skills": {"knowledge": [], "skills": []},
        }
        task = next((name for name in answers if name in first), None)
        if task is None:  # a summary prompt: extract ("Summary:") or improve ("Rewritten:")
            task = "improve" if prompt.rstrip().endswith("Rewritten:") else "extract"
            answer: dict = {"summary": ShippedPrompts.summaries[title].pop(0)}
        else:
            answer = answers[task]
        ShippedPrompts.calls.append((task, title))
        return Generation(json.dumps(answer), 100, 10, 1.0)


@pytest.fixture
def fake() -> type[ShippedPrompts]:
    ShippedPrompts.calls.clear()
    ShippedPrompts.loads.clear()
    ShippedPrompts.summaries.clear()
    return ShippedPrompts


def _settings(url: str, **changes: Any) -> Settings:
    return Settings.from_env().changed(database_url=url, **changes)


# --- settings choose the examples; the default set is unchanged -------------------------------------


def test_the_examples_are_opt_in_and_the_default_use_cases_are_unchanged() -> None:
    default = Settings.from_env()
    assert declared_use_cases(default) == USE_CASES
    refined = declared_use_cases(default.changed(summary_style="refined"))
    summary = next(use_case for use_case in refined if use_case.name == "posting_summary")
    assert summary.steps is not None and summary.model == "gemma3:270m"
    assert [step.name for step in summary.steps.steps] == ["extract", "grade", "improve", "final"]
    extras = declared_use_cases(default.changed(extra_use_cases=("posting_assessment",)))
    assert [use_case.name for use_case in extras][-4:] == [
        "posting_seniority",
        "posting_work_mode",
        "posting_contract",
        "posting_assessment",
    ]
    with pytest.raises(ValueError, match="PIPELINE_SUMMARY_STYLE must be one of plain, refined, not 'fancy'"):
        declared_use_cases(default.changed(summary_style="fancy"))
    with pytest.raises(ValueError, match="PIPELINE_EXTRA_USE_CASES: no opt-in use cases 'experts'"):
        declared_use_cases(default.changed(extra_use_cases=("experts",)))


def test_settings_read_the_summary_style_and_extras_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PIPELINE_SUMMARY_STYLE", "refined")
    monkeypatch.setenv("PIPELINE_EXTRA_USE_CASES", " posting_assessment , ")
    settings = Settings.from_env()
    assert (settings.postings.summary_style, settings.postings.extra_use_cases) == (
        "refined",
        ("posting_assessment",),
    )


# --- the refined summary -----------------------------------------------------------------------------


def _step_context(history: list[StepRecord]) -> StepContext:
    return StepContext(resources=None, app_db=None, log=None, history=tuple(history))


def _inputs(summary: str, posting: dict = POSTINGS[0]) -> dict:
    return {**posting, "url": "not stated", "current_summary": {"summary": summary}}


def test_the_grade_lists_the_problems_and_final_keeps_the_best_graded_version() -> None:
    good = "Brightwave Energy in Berlin is hiring a Data Engineer to build Python and SQL pipelines."
    assert grade_summary(_inputs(good), _step_context([])) == {
        "passed": True,
        "score": 5,
        "feedback": "None.",
    }
    no_company = "A Data Engineer builds Python and SQL pipelines for turbine telemetry in Berlin."
    assert grade_summary(_inputs(no_company), _step_context([]))["feedback"] == (
        "Name the company: Brightwave Energy."
    )
    both = "A Data Engineer with 7 years of experience builds Python and SQL pipelines in Berlin."
    assert grade_summary(_inputs(both), _step_context([])) == {
        "passed": False,
        "score": 3,
        "feedback": 'Name the company: Brightwave Energy. Remove "7": it is not in the posting.',
    }
    invented = "Brightwave Energy seeks a Data Engineer with 7 years of Python and SQL experience."
    assert grade_summary(_inputs(invented), _step_context([]))["feedback"] == (
        'Remove "7": it is not in the posting.'
    )
    history = [
        StepRecord("extract", "current_summary", 1, {"summary": "first"}),
        StepRecord("grade", "grade", 1, {"score": 4, "passed": False, "feedback": "x"}),
        StepRecord("improve", "current_summary", 1, {"summary": "second"}),
        StepRecord("grade", "grade", 2, {"score": 3, "passed": False, "feedback": "y"}),
        StepRecord("improve", "current_summary", 2, {"summary": "third"}),
        StepRecord("grade", "grade", 3, {"score": 4, "passed": False, "feedback": "z"}),
    ]
    assert keep_best_summary(_inputs("third"), _step_context(history)) == {"summary": "first"}


def test_the_refined_summary_improves_a_draft_with_the_grades_feedback(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])
    improved = "Brightwave Energy is hiring a Data Engineer in Berlin to build Python and SQL pipelines."
    fake.summaries["Data Engineer"] = [
        "A Data Engineer builds Python and SQL pipelines for telemetry.",
        improved,
    ]
    defs = build_definitions(_settings(sqlite_url, summary_style="refined"), llm=ShippedPrompts())

    result = run_use_case(defs, dagster_instance, ["p-1"])

    assert result.success and fake.loads == ["gemma3:270m"]
    with session_scope(sqlite_url) as session:
        output = session.scalar(select(UseCaseOutput).where(UseCaseOutput.use_case == "posting_summary"))
        steps = list(session.scalars(select(Interaction).order_by(Interaction.id)))
        assert output.value == {"summary": improved} and output.model == "gemma3:270m"
        assert output.interaction_id == steps[-1].id
        path = [(row.options["chain"]["step"], row.options["chain"]["route"]) for row in steps]
        assert path == [
            ("extract", "grade"),
            ("grade", "improve"),
            ("improve", "grade"),
            ("grade", "final"),
            ("final", "END"),
        ]
        improve_prompt = steps[2].prompt
    assert (
        'Draft: {"summary": "A Data Engineer builds Python and SQL pipelines for telemetry."}'
        in improve_prompt
    )
    assert "Feedback: Name the company: Brightwave Energy.\nRewritten:" in improve_prompt
    materialization = result.get_asset_materialization_events()[0].event_specific_data.materialization
    assert materialization.metadata["chain_path"].value == "extract → grade → improve → grade → final → END"


# --- fan-out and fan-in ----------------------------------------------------------------------------------


def test_fan_in_makes_every_expert_a_parent_of_the_synthesizer_in_the_lineage() -> None:
    defs = build_definitions(
        Settings.from_env(),
        use_cases=declared_use_cases(Settings.from_env().changed(extra_use_cases=("posting_assessment",))),
    )
    graph = defs.get_repository_def().asset_graph
    parents = graph.get(AssetKey("posting_assessment")).parent_keys
    assert {
        AssetKey(name) for name in ("posting_seniority", "posting_work_mode", "posting_contract")
    } <= parents
    stage2 = defs.get_repository_def().get_job("gemma3_270m_stage2_batch_job")
    assert stage2.asset_layer.executable_asset_keys == {AssetKey("posting_assessment")}


def test_the_seniority_expert_says_which_words_decided() -> None:
    def rate(title: str, description: str) -> dict:
        return rate_seniority({"title": title, "description": description}, None)

    assert rate("Senior Backend Developer", "Java, 3+ years") == {"level": "senior", "evidence": "Senior"}
    assert rate("Engineering Manager", "You manage a team of six.") == {
        "level": "lead",
        "evidence": "manage a team",
    }
    assert rate("Analyst", "You lead the migration; 2+ years of SQL.") == {
        "level": "mid",
        "evidence": "2+ years",
    }
    assert rate("Care Assistant", "No experience is needed.")["level"] == "entry"
    assert rate("Pharmacist", "Dispense medicines.") == {"level": "not stated", "evidence": ""}


def test_fan_in_refuses_experts_that_read_each_other() -> None:
    dependent = replace(POSTING_CONTRACT, upstream=("posting_seniority",))
    with pytest.raises(DeclarationError, match="expert posting_contract reads posting_seniority"):
        fan_in(
            (POSTING_SENIORITY, dependent),
            name="synth",
            version="2026-11-22.1",
            model="m",
            prompt="x",
            output_schema={},
        )


def test_the_synthesizer_runs_for_a_posting_only_when_every_expert_is_current(
    app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake
) -> None:
    seed_postings(app_db_url, tmp_path)
    settings = _settings(app_db_url, extra_use_cases=("posting_assessment",))
    built = {item.use_case.name: item for item in build_use_cases(settings)}
    defs = build_definitions(settings, llm=ShippedPrompts())
    all_keys = ["p-1", "p-2", "p-3"]

    def pending() -> list[str]:
        with session_scope(app_db_url) as session:
            return discovery.find_pending_work(session, built["posting_assessment"].spec)

    assert run_use_case(defs, dagster_instance, all_keys, "posting_seniority").success
    assert run_use_case(defs, dagster_instance, ["p-1", "p-2"], "posting_work_mode").success
    assert run_use_case(defs, dagster_instance, ["p-1"], "posting_contract").success
    assert pending() == ["p-1"]  # p-2 lacks the contract expert, p-3 two experts

    fake.calls.clear()
    assert run_use_case(defs, dagster_instance, all_keys, "posting_assessment").success
    assert fake.calls == [("reviewers' notes", "Data Engineer")]
    with session_scope(app_db_url) as session:
        assessment = session.get(UseCaseOutput, ("posting_assessment", "p-1")).value
    assert assessment == {
        "profile": PROFILE,
        "seniority": "not stated",  # the script expert found no cue in p-1's one sentence
        "work_mode": "hybrid",
        "contract": "permanent",
    }

    # The posting changes: every expert output is stale, so the synthesizer waits again until
    # all three are redone, even though two of them are redone first.
    seed_postings(
        app_db_url, tmp_path, [{**POSTINGS[0], "description": POSTINGS[0]["description"] + " Remote."}]
    )
    assert pending() == []
    assert run_use_case(defs, dagster_instance, ["p-1"], "posting_seniority").success
    assert run_use_case(defs, dagster_instance, ["p-1"], "posting_work_mode").success
    assert pending() == []
    assert run_use_case(defs, dagster_instance, ["p-1"], "posting_contract").success
    assert pending() == ["p-1"]


def test_pipeline_run_does_the_experts_then_the_synthesizer_in_a_second_stage(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake
) -> None:
    """Dagster skips a step whose upstream step in the same run yielded no output, so the
    synthesizer is a stage-2 group of its own: it runs after the experts, never skipped."""
    seed_postings(sqlite_url, tmp_path)
    fake.summaries.update({p["title"]: [f"{p['company']} is hiring a {p['title']}."] for p in POSTINGS})
    # skills by the prompt, so they share the model's group (the CPU tagger is a group of its own)
    settings = _settings(sqlite_url, extra_use_cases=("posting_assessment",), skills_style="llm")
    built = build_use_cases(settings)
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups, llm=ShippedPrompts())
    assert {group.name: group.use_case_names for group in groups} == {
        "gemma3_270m": ["posting_summary", "posting_skills", "posting_work_mode", "posting_contract"],
        "posting_seniority": ["posting_seniority"],  # a script expert: a group of its own
        "gemma3_270m_stage2": ["posting_assessment"],
        "skill_entities": ["skill_entities"],
    }
    assert defs.get_repository_def().get_sensor_def("gemma3_270m_stage2_discovery")

    reports = run_pending(defs, groups[:3], dagster_instance, AppDatabase(url=sqlite_url), source="test")

    assert [(len(report.runs), report.failed_runs) for report in reports] == [(1, []), (1, []), (1, [])]
    assert fake.loads == ["gemma3:270m", "gemma3:270m"]  # once per LLM stage run; none for the script
    tasks = [task for task, _ in fake.calls]
    assert tasks[-3:] == ["reviewers' notes"] * 3 and tasks.count("reviewers' notes") == 3
    with session_scope(sqlite_url) as session:
        done = session.scalars(
            select(UseCaseOutput.subject_key).where(UseCaseOutput.use_case == "posting_assessment")
        )
        assert sorted(done) == ["p-1", "p-2", "p-3"]


def test_an_expert_whose_own_input_moved_on_is_not_current_so_the_synthesizer_waits(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    from tests.integration.test_chains import DRAFT_SCHEMA, TwoModels

    TwoModels.respond = staticmethod(lambda step, title, prompt: json.dumps({"text": f"{step} of {title}"}))
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])

    def llm_use_case(name: str, body: str = "", upstream: tuple[str, ...] = ()) -> dict:
        prompt = f"STEP {name}\nTitle: {{title}}\n{body}Answer:"
        return {
            "name": name,
            "version": "2026-11-22.1",
            "model": "m",
            "prompt": prompt,
            "upstream": upstream,
            "output_schema": DRAFT_SCHEMA,
        }

    notes = UseCase(subject=POSTINGS_KIND, **llm_use_case("notes"))
    experts = (
        UseCase(subject=POSTINGS_KIND, **llm_use_case("expert_a", "{notes.text}\n", ("notes",))),
        UseCase(subject=POSTINGS_KIND, **llm_use_case("expert_b")),
    )
    use_cases = [notes, *fan_in(experts, **llm_use_case("synth", "{expert_a.text} {expert_b.text}\n"))]
    settings = _settings(sqlite_url)
    specs = {item.use_case.name: item.spec for item in build_use_cases(settings, use_cases)}
    defs = build_definitions(settings, use_cases=use_cases, llm=TwoModels())

    def pending(name: str) -> list[str]:
        with session_scope(sqlite_url) as session:
            return discovery.find_pending_work(session, specs[name])

    for name in ("notes", "expert_a", "expert_b"):
        assert run_use_case(defs, dagster_instance, ["p-1"], name).success
    assert pending("synth") == ["p-1"]

    forced = {"ops": {"notes": {"config": {"force": True}}}}
    assert run_use_case(defs, dagster_instance, ["p-1"], "notes", run_config=forced).success
    assert pending("expert_a") == ["p-1"]  # its input is newer than its output
    assert pending("synth") == []  # so the synthesizer waits: expert_a's output is not current
    assert run_use_case(defs, dagster_instance, ["p-1"], "expert_a").success
    assert pending("synth") == ["p-1"]
