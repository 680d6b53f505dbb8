"""The code location loads, and a use case is a declaration: the factory does the rest."""

from __future__ import annotations

import pytest
from dagster import AssetCheckKey, AssetKey

from domain.language.declaration import UseCase, model_label
from domain.language.declaration_parts import DeclarationError
from domain.language.templates import TemplateVariableError
from pipeline_defs.definitions import build_definitions, defs
from pipeline_defs.settings import Settings
from plugins.postings.store.postings_kind import POSTINGS
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from plugins.postings.use_cases.shipped import USE_CASES

SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}


def test_every_declared_use_case_has_its_asset_checks_job_and_sensor() -> None:
    repository = defs.get_repository_def()
    graph = repository.asset_graph
    assert AssetKey("postings") in graph.get_all_asset_keys()
    for use_case in USE_CASES:
        key = AssetKey(use_case.name)
        node = graph.get(key)
        assert node.partitions_def is not None and node.partitions_def.name == "postings"
        assert AssetKey("postings") in node.parent_keys
        assert node.code_version == f"{use_case.version}@{model_label(use_case)}"  # both are its identity
        expected_checks = {"outputs_valid", "gold_agreement", *(check.name for check in use_case.checks)}
        if use_case.quality.judge_view is not None and use_case.uses_llm:
            expected_checks.add("judge_grades")
        assert {check.name for check in node.check_keys} == expected_checks
        assert repository.has_job(f"{use_case.name}_job")
    # LLM use cases sharing a model are discovered and run together; a script use case (or a chain of
    # script steps, as the skills tagger) alone, outside the `llm` pool.
    assert repository.get_sensor_def("gemma3_270m_discovery").job_name == "gemma3_270m_batch_job"
    assert repository.get_sensor_def("skill_entities_discovery").job_name == "skill_entities_batch_job"
    assert repository.get_sensor_def("posting_skills_discovery").job_name == "posting_skills_batch_job"
    group_job = repository.get_job("gemma3_270m_batch_job")
    assert {key.to_user_string() for key in group_job.asset_layer.executable_asset_keys} == {
        "posting_summary"
    }
    entities = graph.get(AssetKey("skill_entities"))
    assert {AssetKey("posting_skills"), AssetKey("skills_taxonomy")} <= entities.parent_keys


def test_a_new_use_case_is_only_a_declaration() -> None:
    scoring = UseCase(
        subject=POSTINGS,
        name="posting_seniority",
        version="2026-11-22.1",
        model="gemma3:270m",
        prompt="Summary: {posting_summary.summary}\nTitle: {title}\nSeniority 1-5 JSON:",
        output_schema=SCHEMA,
        upstream=("posting_summary",),
        batch_size=10,
    )
    built = build_definitions(Settings.from_env(), use_cases=[POSTING_SUMMARY, scoring])
    graph = built.get_repository_def().asset_graph
    assert AssetKey("posting_summary") in graph.get(AssetKey("posting_seniority")).parent_keys
    assert AssetCheckKey(AssetKey("posting_seniority"), "outputs_valid") in graph.asset_check_keys
    # same model as the summary: discovered by the model's sensor, run in the model's batch job
    assert built.get_repository_def().get_sensor_def("gemma3_270m_discovery")
    assert built.get_repository_def().has_job("posting_seniority_job")


def test_unknown_template_variables_fail_when_the_declaration_is_made() -> None:
    with pytest.raises(DeclarationError, match=r"\{salary\}"):
        UseCase(
            subject=POSTINGS,
            name="bad",
            version="2026-11-22.1",
            model="m",
            prompt="Pay: {salary}",
            output_schema=SCHEMA,
        )
    with pytest.raises(DeclarationError, match="version"):
        UseCase(subject=POSTINGS, name="bad", version="v1", model="m", prompt="{title}", output_schema=SCHEMA)
    with pytest.raises(DeclarationError, match="not a valid JSON schema"):
        UseCase(
            subject=POSTINGS,
            name="bad",
            version="2026-11-22.1",
            model="m",
            prompt="{title}",
            output_schema={"type": 5},
        )


def test_rendering_never_sends_a_literal_placeholder() -> None:
    use_case = UseCase(
        subject=POSTINGS,
        name="needs_summary",
        version="2026-11-22.1",
        model="m",
        output_schema=SCHEMA,
        prompt='Example: {"score": 3}\nSummary: {posting_summary.summary}\nTitle: {title}',
        upstream=("posting_summary",),
        input_limits={"title": 5},
    )
    prompt, _, truncated = use_case.render({"title": "Chief Baker", "posting_summary": {"summary": "Bakes."}})
    assert prompt == 'Example: {"score": 3}\nSummary: Bakes.\nTitle: Chief [...]'
    assert truncated == {"title": 6}
    with pytest.raises(TemplateVariableError, match=r"\{posting_summary.summary\}"):
        use_case.render({"title": "Baker"})


def test_a_placeholder_deeper_than_one_field_is_rejected() -> None:
    with pytest.raises(DeclarationError, match="deeper than one field"):
        UseCase(
            subject=POSTINGS,
            name="deep",
            version="2026-11-22.1",
            model="m",
            output_schema=SCHEMA,
            prompt="{posting_summary.skills.first}",
            upstream=("posting_summary",),
        )
