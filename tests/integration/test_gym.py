"""The gym: structural checks (pass and fail), the judge's traceable grades, review items, gold
metrics that move with corrections, and versioned reprocessing of stale outputs only."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest
from dagster import AssetCheckSeverity, AssetKey, DagsterInstance
from dagster._core.definitions.data_version import StaleStatus
from sqlalchemy import select

from appdb import discovery, review
from appdb.database import session_scope
from appdb.models import Interaction, OutputGrade, ReviewItem, UseCaseOutput
from domain.language.llm_types import Generation
from domain.language.output_parsing import first_blocking_failure
from domain.quality.judge_rubric import RubricError, load_rubric
from domain.quality.review_actions import Edits, accept, correct, reject
from pipeline_defs.cli.stale_reprocessing import find_stale, plan_batches, reprocess_stale
from pipeline_defs.cli.trace_report import render_text, trace_blocks
from pipeline_defs.definitions import build_definitions
from pipeline_defs.wiring import build_use_cases
from plugins.postings.quality import output_checks
from plugins.postings.quality.postings_rubric import POSTINGS_RUBRIC
from plugins.postings.store.postings_kind import POSTINGS
from plugins.postings.use_cases.posting_skills import POSTING_SKILLS_LLM, SKILLS_SCHEMA
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from plugins.postings.use_cases.shipped import USE_CASES
from resources.app_database import AppDatabase
from tests.support.gym_fakes import (
    GOOD_SUMMARY,
    GYM_POSTINGS,
    HIGH_GRADES,
    LOOP,
    LOW_GRADES,
    POSTING,
    GymFake,
    gym_settings,
)
from tests.support.postings import run_use_case, seed_postings

# --- structural checks on constructed cases ----------------------------------------------------

COPIED = (
    "Brightwave Energy is looking for a Data Engineer to build the pipelines that bring turbine telemetry."
)
LOOPING = "Build pipelines and build pipelines and build pipelines and build pipelines and build pipelines."
AT_PYTHON = {"field": "description", "start": 131, "end": 137}
AT_DBT = {"field": "description", "start": 163, "end": 166}
GROUNDED = {
    "skills": [
        {"mention": "Python", "kind": "knowledge", "evidence": "You write Python and SQL", **AT_PYTHON},
        {"mention": "dbt", "kind": "knowledge", "evidence": "run Dagster and dbt", **AT_DBT},
    ],
    "ungrounded": ["Kubernetes"],
}


@pytest.mark.parametrize(
    ("check", "passing", "failing", "reason"),
    [
        (output_checks.summary_not_empty, {"summary": GOOD_SUMMARY}, {"summary": "  "}, "empty"),
        (
            output_checks.summary_length,
            {"summary": GOOD_SUMMARY},
            {"summary": "A data job."},
            "only 11 characters",
        ),
        (
            output_checks.summary_length,
            {"summary": GOOD_SUMMARY},
            {"summary": "word " * 130},
            "more than 600",
        ),
        (
            output_checks.summary_not_a_copy,
            {"summary": GOOD_SUMMARY},
            {"summary": COPIED},
            "copied from the posting",
        ),
        (
            output_checks.summary_not_degenerate,
            {"summary": GOOD_SUMMARY},
            {"summary": LOOPING},
            "repeats itself",
        ),
        (
            output_checks.schema_valid(SKILLS_SCHEMA),
            GROUNDED,
            {"skills": [{"mention": "SQL"}], "ungrounded": []},
            "kind",
        ),
        (
            output_checks.skills_in_posting,
            GROUNDED,
            {
                "skills": [{"mention": "Rust", "kind": "knowledge", "evidence": "", **AT_PYTHON}],
                "ungrounded": [],
            },
            "do not appear",
        ),
        (
            output_checks.skills_mostly_grounded,
            GROUNDED,
            {"skills": GROUNDED["skills"][:1], "ungrounded": ["Go", "Rust"]},
            "2 of 3 mentions",
        ),
        (
            output_checks.resolution_coverage,
            {"entities": [], "matched": 3, "unmatched": 1},
            {"entities": [], "matched": 1, "unmatched": 2},
            "2 of 3 mentions are unmatched",
        ),
    ],
)
def test_each_structural_check_passes_good_output_and_names_what_is_wrong_with_bad(
    check, passing: dict, failing: dict, reason: str
) -> None:
    assert check(passing, POSTING) is None
    assert reason in check(failing, POSTING)


def test_copy_and_repeat_shares_measure_word_sequences() -> None:
    assert output_checks.copy_share(COPIED, POSTING["description"]) == 1.0
    assert output_checks.copy_share(GOOD_SUMMARY, POSTING["description"]) < 0.2
    assert output_checks.repeated_share(LOOPING) > 0.5
    assert output_checks.repeated_share(GOOD_SUMMARY) == 0.0


def test_blocking_checks_guard_what_flows_downstream() -> None:
    blocking = {c.name for use_case in USE_CASES for c in use_case.checks if c.blocking}
    assert blocking == {
        "summary_not_empty",
        "summary_faithful",
        "summary_not_degenerate",
        "skills_schema_valid",
        "skills_in_posting",
    }
    blocked = first_blocking_failure(POSTING_SUMMARY.checks, {"summary": LOOPING}, POSTING)
    assert blocked is not None and blocked.check == "summary_not_degenerate"
    assert blocked.value == {"summary": LOOPING}
    # a near-copy is a lazy but usable summary: it goes to review, it is not blocked
    assert first_blocking_failure(POSTING_SUMMARY.checks, {"summary": COPIED}, POSTING) is None
    assert first_blocking_failure(POSTING_SUMMARY.checks, {"summary": GOOD_SUMMARY}, POSTING) is None


# --- the pipeline with a fake model that also judges -------------------------------------------


@pytest.fixture
def gym(app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance):  # noqa: ANN201
    seed_postings(app_db_url, tmp_path, GYM_POSTINGS)
    defs = build_definitions(gym_settings(app_db_url), llm=GymFake())
    return defs, dagster_instance, app_db_url


def _evaluations(result) -> dict:  # noqa: ANN001
    return {evaluation.check_name: evaluation for evaluation in result.get_asset_check_evaluations()}


def test_a_blocked_output_is_not_stored_and_its_check_names_the_posting(gym) -> None:
    defs, instance, url = gym
    result = run_use_case(defs, instance, ["g-1", "g-2", "g-3"])
    evaluations = _evaluations(result)

    loop_check = evaluations["summary_not_degenerate"]
    assert not loop_check.passed and loop_check.severity == AssetCheckSeverity.ERROR
    assert [row.data["posting"] for row in loop_check.metadata["failing_postings"].records] == ["g-3"]
    length_check = evaluations["summary_length"]
    assert not length_check.passed and length_check.severity == AssetCheckSeverity.WARN
    assert [row.data["posting"] for row in length_check.metadata["failing_postings"].records] == ["g-2"]
    assert evaluations["summary_not_a_copy"].passed
    with session_scope(url) as session:
        stored = set(session.scalars(select(UseCaseOutput.subject_key)))
        rejected = session.scalars(
            select(Interaction).where(
                Interaction.subject_key == "g-3", Interaction.use_case == "posting_summary"
            )
        ).one()
        items = {item.subject_key: item for item in review.list_review_items(session)}
    assert stored == {"g-1", "g-2"}  # the loop never reaches the outputs downstream use cases read
    assert rejected.status == "item_error" and rejected.error.startswith(
        "blocked by check summary_not_degenerate"
    )
    assert rejected.parsed_output == {"summary": LOOP}  # kept for the trace
    assert items["g-3"].check_name == "summary_not_degenerate"
    assert items["g-3"].output == {"summary": LOOP}
    assert items["g-3"].interaction_id == rejected.id
    assert "summary_length" in items["g-2"].reason


def test_a_run_asks_the_faithfulness_check_once_per_answer_not_again_for_its_report(
    gym, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blocking check is asked as each answer is parsed (a failing one is not stored); the run's report
    of it names those it blocked and does not ask again of those stored (the faithfulness check was a
    twentieth of a summary run's CPU a second time)."""
    from plugins.postings.quality import faithfulness

    defs, instance, _url = gym
    asked: list[str] = []
    real = faithfulness.FaithfulnessChecker.unsupported

    def counted(self, summary, posting):  # noqa: ANN001, ANN202
        asked.append(summary)
        return real(self, summary, posting)

    monkeypatch.setattr(faithfulness.FaithfulnessChecker, "unsupported", counted)
    result = run_use_case(defs, instance, ["g-1", "g-2", "g-3"])
    faithful = _evaluations(result)["summary_faithful"]

    assert faithful.passed and faithful.metadata["checked"].value == 2  # g-3 was blocked by another check
    assert len(asked) == len(set(asked)) == 3  # each answer once, as it was parsed
    blocked = _evaluations(result)["summary_not_degenerate"]
    assert [row.data["posting"] for row in blocked.metadata["failing_postings"].records] == ["g-3"]


def test_the_judge_grades_a_sample_traceably_and_low_grades_go_to_review(gym) -> None:
    defs, instance, url = gym
    result = run_use_case(defs, instance, ["g-1", "g-2", "g-3"])
    judge = _evaluations(result)["judge_grades"]

    assert judge.metadata["graded"].value == 2  # g-3 was blocked, so only two outputs exist
    assert judge.metadata["faithful"].value == pytest.approx((5 + 2) / 2)  # numeric: plotted by the UI
    assert judge.metadata["overall"].value == pytest.approx((14 / 3 + 2) / 2, abs=1e-3)
    assert judge.metadata["below_threshold"].value == 1 and not judge.passed
    with session_scope(url) as session:
        grades = {g.subject_key: g for g in session.scalars(select(OutputGrade))}
        calls = {
            c.subject_key: c
            for c in session.scalars(
                select(Interaction).where(Interaction.use_case == "posting_summary:judge")
            )
        }
        outputs = {o.subject_key: o for o in session.scalars(select(UseCaseOutput))}
        nurse_item = session.scalars(select(ReviewItem).where(ReviewItem.subject_key == "g-2")).one()
        blocks = list(
            trace_blocks(
                session, "g-2", [POSTINGS], [item.spec for item in build_use_cases(gym_settings(url))]
            )
        )
    assert set(grades) == {"g-1", "g-2"}
    assert grades["g-2"].scores == LOW_GRADES and grades["g-2"].overall == pytest.approx(2.0)
    assert grades["g-2"].input_hash == outputs["g-2"].input_hash  # the grade names the output it graded
    call = calls["g-2"]
    assert grades["g-2"].interaction_id == call.id
    assert (call.model, call.run_id, call.status) == ("judge:test", result.run_id, "ok")
    assert "Output: A nurse job." in call.prompt and call.prompt.endswith("Grades:")
    assert json.loads(call.raw_response) == LOW_GRADES and call.parsed_output == LOW_GRADES
    assert call.options["graded_interaction"] == outputs["g-2"].interaction_id
    assert nurse_item.score == pytest.approx(2.0) and "judge judge:test graded 2.0" in nurse_item.reason
    assert "summary_length" in nurse_item.reason  # one open item per output, both findings
    text = render_text(blocks)
    assert "== posting_summary:judge ==" in text and '"complete": 1' in text


def test_the_judge_is_off_with_sample_zero_and_never_grades_an_output_twice(
    app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    seed_postings(app_db_url, tmp_path, GYM_POSTINGS[:2])
    off = build_definitions(gym_settings(app_db_url, judge_sample=0), llm=GymFake())
    result = run_use_case(off, dagster_instance, ["g-1", "g-2"])
    assert _evaluations(result)["judge_grades"].metadata["graded"].value == 0
    on = build_definitions(gym_settings(app_db_url), llm=GymFake())
    again = run_use_case(
        on,
        dagster_instance,
        ["g-1", "g-2"],
        run_config={"ops": {"posting_summary": {"config": {"force": True}}}},
    )
    first = _evaluations(again)["judge_grades"].metadata["graded"].value
    with session_scope(app_db_url) as session:
        assert len(session.scalars(select(OutputGrade)).all()) == first == 2
    run_use_case(
        on,
        dagster_instance,
        ["g-1", "g-2"],
        run_config={"ops": {"posting_summary": {"config": {"force": True}}}},
    )
    with session_scope(app_db_url) as session:  # same outputs (same input hash): not graded again
        assert len(session.scalars(select(OutputGrade)).all()) == 2


def test_rubric_files_replace_the_default_and_bad_ones_are_named(tmp_path: Path) -> None:
    assert POSTINGS_RUBRIC.schema["properties"]["faithful"]["enum"] == [1, 2, 3, 4, 5]
    path = tmp_path / "rubric.json"
    path.write_text(json.dumps({"criteria": {"accurate": "no invented facts"}, "examples": {}}))
    rubric = load_rubric(path)
    assert list(rubric.criteria) == ["accurate"] and rubric.version != POSTINGS_RUBRIC.version
    assert rubric.parse('{"accurate": 4}') == {"accurate": 4}
    with pytest.raises(ValueError, match="no grade 1-5 for 'accurate'"):
        rubric.parse('{"accurate": 9}')
    path.write_text(json.dumps({"criteria": {"a": "x"}, "examples": {"s": [{"grades": {"b": 1}}]}}))
    with pytest.raises(RubricError, match=r"rubric.json: example 1 of s needs a grade 1-5"):
        load_rubric(path)


# --- gold evaluation ---------------------------------------------------------------------------


def _gold(defs, instance: DagsterInstance) -> dict:  # noqa: ANN001
    result = defs.resolve_job_def("gym_evaluation_job").execute_in_process(instance=instance)
    return {
        evaluation.asset_key.to_user_string(): evaluation
        for evaluation in result.get_asset_check_evaluations()
    }


def test_corrections_change_the_gold_metrics(gym) -> None:
    defs, instance, url = gym
    run_use_case(defs, instance, ["g-1", "g-2", "g-3"], use_case="posting_skills")
    before = _gold(defs, instance)["posting_skills"]
    assert before.passed and before.metadata["corpus"].value == 0 and "f1" not in before.metadata

    with session_scope(url) as session:
        ids = {}
        for key in ("g-1", "g-2"):  # skills pass every check; a reviewer looks at them anyway
            ids[key] = review.flag_for_review(
                session,
                use_case="posting_skills",
                subject_key=key,
                use_case_version=POSTING_SKILLS_LLM.version,  # the gym's skills come from the fake model
                reason="spot check",
                output=review.current_output(session, "posting_skills", key).value,
                interaction_id=review.current_output(session, "posting_skills", key).interaction_id,
            )
    registry = {use_case.name: use_case for use_case in (*USE_CASES, POSTING_SKILLS_LLM)}
    with session_scope(url) as session:
        accept(session, ids["g-2"], registry)
    accepted = _gold(defs, instance)["posting_skills"].metadata
    assert (accepted["precision"].value, accepted["recall"].value, accepted["agreement"].value) == (
        1.0,
        1.0,
        1.0,
    )

    with session_scope(url) as session:  # "Python and SQL" was two mentions; dbt was right
        verdict = correct(
            session,
            ids["g-1"],
            registry,
            Edits({"remove-skill": ["Python and SQL"], "add-skill": ["knowledge:Python", "knowledge:SQL"]}),
        )
    assert verdict.delivered
    after = _gold(defs, instance)["posting_skills"]
    # g-1: model {python and sql, dbt} vs gold {python, sql, dbt}: 1 shared; g-2: 2 of 2 shared
    assert after.metadata["precision"].value == pytest.approx(3 / 4)
    assert after.metadata["recall"].value == pytest.approx(3 / 5)
    assert after.metadata["f1"].value == pytest.approx(2 * 0.75 * 0.6 / 1.35, abs=1e-4)
    assert after.metadata["agreement"].value == 0.5
    with session_scope(url) as session:
        delivered = review.current_output(session, "posting_skills", "g-1")
    assert {s["mention"] for s in delivered.value["skills"]} == {"Python", "SQL", "dbt"}
    assert delivered.backend == "review"


def test_a_rejection_counts_as_a_disagreement(gym) -> None:
    defs, instance, url = gym
    run_use_case(defs, instance, ["g-1", "g-2"])
    with session_scope(url) as session:
        [item] = review.list_review_items(session)  # g-2: too short, judged low
        reject(session, item.id, note="says nothing")
        g1 = review.current_output(session, "posting_summary", "g-1")
        spot = review.flag_for_review(
            session,
            use_case="posting_summary",
            subject_key="g-1",
            use_case_version=POSTING_SUMMARY.version,
            reason="spot check",
            output=g1.value,
            interaction_id=g1.interaction_id,
        )
        accept(session, spot, {use_case.name: use_case for use_case in USE_CASES})
    figures = _gold(defs, instance)["posting_summary"].metadata
    assert figures["agreement"].value == 0.5 and figures["rejected"].value == 1
    assert figures["compared"].value == 1


def test_public_gold_scores_skillspan_postings_when_its_path_is_configured(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    gold = tmp_path / "dev.json"
    sentence = {
        "idx": 7,
        "source": "tech",
        "tokens": ["You", "use", "Docker", "and", "Jenkins", "."],
        "tags_skill": ["O"] * 6,
        "tags_knowledge": ["O", "O", "B", "O", "B", "O"],
    }
    gold.write_text(json.dumps(sentence) + "\n")
    posting = {
        "key": "skillspan-tech-7",
        "title": "not stated",
        "description": "You use Docker and Jenkins .",
    }
    seed_postings(sqlite_url, tmp_path, [posting])
    defs = build_definitions(gym_settings(sqlite_url, gold_skillspan_path=str(gold)), llm=GymFake())
    run_use_case(defs, dagster_instance, ["skillspan-tech-7"], use_case="posting_skills")

    figures = _gold(defs, dagster_instance)["posting_skills"].metadata
    # answer {docker, use} against gold {docker, jenkins}
    assert figures["skillspan_compared"].value == 1
    assert (figures["skillspan_precision"].value, figures["skillspan_recall"].value) == (0.5, 0.5)
    assert "precision" not in figures  # no corrections yet: only the public gold


def gym_sensor_tick(gym, cursor: str | None):  # noqa: ANN001, ANN201
    """One evaluation of the gym sensor against the fixture's instance and database."""
    from dagster import build_sensor_context

    defs, instance, url = gym
    context = build_sensor_context(
        instance=instance, cursor=cursor, resources={"app_db": AppDatabase(url=url)}
    )
    return defs.resolve_sensor_def("gym_evaluation_sensor")(context)


def test_the_gym_sensor_evaluates_again_only_when_corrections_or_outputs_changed(gym, tmp_path: Path) -> None:
    from dagster import SensorResult, SkipReason

    defs, instance, url = gym

    def tick(cursor: str | None):  # noqa: ANN202
        return gym_sensor_tick(gym, cursor)

    first = tick(None)
    assert isinstance(first, SensorResult) and len(first.run_requests) == 1
    assert defs.resolve_sensor_def("gym_evaluation_sensor").job_name == "gym_evaluation_job"
    assert isinstance(tick(first.cursor), SkipReason)  # nothing changed: no evaluation
    run_use_case(defs, instance, ["g-1"])  # new outputs move the figures
    after_run = tick(first.cursor)
    assert isinstance(after_run, SensorResult) and after_run.cursor != first.cursor
    with session_scope(url) as session:
        g1 = review.current_output(session, "posting_summary", "g-1")
        item = review.flag_for_review(
            session,
            use_case="posting_summary",
            subject_key="g-1",
            use_case_version=g1.use_case_version,
            reason="spot check",
            output=g1.value,
            interaction_id=g1.interaction_id,
        )
        accept(session, item, {use_case.name: use_case for use_case in USE_CASES})
    assert isinstance(tick(after_run.cursor), SensorResult)  # a verdict moves them too


def test_the_gym_sensor_waits_for_enrichment_runs_to_end_but_not_forever(gym) -> None:
    """New outputs while a work group's run goes: no evaluation of a half-written corpus on the CPU the
    run needs; once the run ends, or MAX_DEFER_SECONDS after the last evaluation, it runs."""
    import time

    from dagster import DagsterRunStatus, SensorResult, SkipReason
    from dagster._core.test_utils import create_run_for_test

    from sensors.gym_sensor import MAX_DEFER_SECONDS

    defs, instance, _ = gym

    def tick(cursor: str | None):  # noqa: ANN202
        return gym_sensor_tick(gym, cursor)

    first = tick(None)
    assert isinstance(first, SensorResult)
    run_use_case(defs, instance, ["g-1"])  # new outputs
    group_job = next(job.name for job in defs.resolve_all_job_defs() if job.name.endswith("_batch_job"))
    going = create_run_for_test(instance, job_name=group_job, status=DagsterRunStatus.STARTED)
    deferred = tick(first.cursor)
    assert isinstance(deferred, SkipReason) and "waits for the enrichment runs" in deferred.skip_message
    long_ago = json.dumps({**json.loads(first.cursor), "at": time.time() - MAX_DEFER_SECONDS - 1})
    assert isinstance(tick(long_ago), SensorResult)  # a long backlog still gets its figures
    instance.report_run_canceled(instance.get_run_by_id(going.run_id))
    assert isinstance(tick(first.cursor), SensorResult)  # the runs ended: evaluate now
    assert isinstance(tick("an-old-bare-marker"), SensorResult)  # a cursor from before the deferral
    going = create_run_for_test(instance, job_name=group_job, status=DagsterRunStatus.STARTED)
    assert isinstance(tick(None), SkipReason)  # a first look while runs go defers too


# --- versioned reprocessing --------------------------------------------------------------------


def dagster_staleness(defs, instance: DagsterInstance, partition: str) -> tuple:  # noqa: ANN001
    """What the Dagster UI shows for a posting_summary partition: status and causes."""
    from dagster._utils.test.data_versions import get_stale_status_resolver

    resolver = get_stale_status_resolver(instance, list(defs.resolve_asset_graph().assets_defs))
    key = AssetKey("posting_summary")
    return resolver.get_status(key, partition), [c.reason for c in resolver.get_stale_causes(key, partition)]


def test_a_version_bump_makes_outputs_stale_and_reprocessing_redoes_only_those(
    app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    seed_postings(app_db_url, tmp_path, GYM_POSTINGS[:2])
    settings = gym_settings(app_db_url, judge_sample=0)
    defs = build_definitions(settings, use_cases=[POSTING_SUMMARY], llm=GymFake())
    run_use_case(defs, dagster_instance, ["g-1", "g-2"])
    seed_postings(app_db_url, tmp_path, GYM_POSTINGS[2:])  # a new posting: pending, but not stale

    bumped = replace(POSTING_SUMMARY, version="2026-12-01.1")
    [item] = build_use_cases(settings, [bumped])
    with session_scope(app_db_url) as session:
        stale = find_stale(session, item)
    assert stale.keys == ["g-1", "g-2"] and stale.missing == ["g-3"]
    assert dict(stale.reasons) == {f"made by version {POSTING_SUMMARY.version}": 2}
    bumped_defs = build_definitions(settings, use_cases=[bumped], llm=GymFake())
    node = bumped_defs.resolve_asset_graph().get(AssetKey("posting_summary"))
    assert node.code_version == "2026-12-01.1@gemma3:270m"  # what Dagster shows as the code version
    # the UI's view: fresh under the old code version, stale ("has a new code version") under the new
    assert dagster_staleness(defs, dagster_instance, "g-1") == (StaleStatus.FRESH, [])
    assert dagster_staleness(bumped_defs, dagster_instance, "g-1") == (
        StaleStatus.STALE,
        ["has a new code version"],
    )

    [report] = reprocess_stale(bumped_defs, [item], dagster_instance, AppDatabase(url=app_db_url))

    assert (report.stale_before, report.stale_after, len(report.runs)) == (2, 0, 1)
    with session_scope(app_db_url) as session:
        versions = dict(
            session.execute(select(UseCaseOutput.subject_key, UseCaseOutput.use_case_version)).all()
        )
        assert discovery.find_pending_work(session, item.spec) == ["g-3"]  # the never-made one is left alone
    assert versions == {"g-1": "2026-12-01.1", "g-2": "2026-12-01.1"}
    assert dagster_staleness(bumped_defs, dagster_instance, "g-2") == (StaleStatus.FRESH, [])

    moved = replace(bumped, model="gemma3:1b")  # same version, another model: stale too
    [on_new_model] = build_use_cases(settings, [moved])
    with session_scope(app_db_url) as session:
        assert dict(find_stale(session, on_new_model).reasons) == {"made by gemma3:270m": 2}


def test_stale_batches_never_span_a_posting_without_output() -> None:
    order = ["a", "b", "c", "d", "e", "f"]
    assert plan_batches(["a", "b", "d", "e", "f"], ["c"], order, batch_size=2) == [
        ["a", "b"],
        ["d", "e"],
        ["f"],
    ]
    assert plan_batches(["a", "f"], [], order, batch_size=10) == [["a", "f"]]  # current ones are skipped


# --- the judge on every backend: deterministic by default, an LLM judge only once calibrated -------


class FlatteringJudge(GymFake):
    """Summarizes like GymFake, and as a judge grades everything 5: it cannot tell good from bad."""

    calls: ClassVar[list[str]] = []

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        if prompt.endswith("Grades:"):
            FlatteringJudge.calls.append(model)
            return Generation(json.dumps(HIGH_GRADES | {"faithful": 5, "complete": 5}), 50, 10, 1.0)
        return super()._generate(handle, model, prompt, system_prompt, schema, options)


def test_the_default_judge_is_deterministic_and_grades_every_new_output(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    seed_postings(sqlite_url, tmp_path, GYM_POSTINGS)
    settings = gym_settings(sqlite_url, judge_model="deterministic", judge_sample=1)
    result = run_use_case(build_definitions(settings, llm=GymFake()), dagster_instance, ["g-1", "g-2", "g-3"])
    judge = _evaluations(result)["judge_grades"]
    assert judge.metadata["judge_model"].value == "deterministic"
    assert judge.metadata["graded"].value == 2  # every stored output, not a sample of one
    with session_scope(sqlite_url) as session:
        grades = {g.subject_key: g for g in session.scalars(select(OutputGrade))}
        call = session.scalars(
            select(Interaction).where(Interaction.use_case == "posting_summary:judge")
        ).first()
    assert set(grades) == {"g-1", "g-2"} and grades["g-1"].judge_model == "deterministic"
    assert grades["g-1"].scores["faithful"] == 5 and call.backend == "script"  # traced like any judge


def test_an_llm_judge_that_fails_its_calibration_is_refused_and_the_deterministic_one_grades(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    FlatteringJudge.calls.clear()
    seed_postings(sqlite_url, tmp_path, GYM_POSTINGS)
    settings = gym_settings(sqlite_url, judge_model="flatterer:1b", judge_calibration=True)
    defs = build_definitions(settings, llm=FlatteringJudge())
    result = run_use_case(defs, dagster_instance, ["g-1", "g-2"])
    judge = _evaluations(result)["judge_grades"]
    assert "judge flatterer:1b refused" in judge.metadata["judge_refused"].value
    assert judge.metadata["judge_model"].value == "deterministic"
    calibration_calls = len(FlatteringJudge.calls)
    assert calibration_calls >= 20  # its calibration set, every case asked
    run_use_case(defs, dagster_instance, ["g-3"])  # the verdict is remembered: no second calibration
    assert len(FlatteringJudge.calls) == calibration_calls
