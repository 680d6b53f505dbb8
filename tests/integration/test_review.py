"""The review round on the command line: list, show, accept, reject, correct; clear errors that
change nothing; stale counts for reprocessing; the gym's migration up and down on both engines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from alembic import command
from dagster import DagsterInstance
from sqlalchemy import func, inspect, select, text, update

from appdb import review
from appdb.database import alembic_config, dispose, get_engine, session_scope
from appdb.models import Correction, Interaction, ReviewItem, UseCaseOutput
from pipeline_defs.cli.in_process_runs import load_reference_data
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from plugins.postings.plugin import PLUGIN as POSTINGS_PLUGIN
from plugins.postings.store.tables import PostingSkillConcept
from tests.support.gym_fakes import GYM_POSTINGS, GymFake, gym_settings
from tests.support.postings import run_use_case, seed_postings

PYTHON_URI = "https://posting-enrichment.example/skill/python"


@pytest.fixture
def reviewed(app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A database after one run of summary and skills (fake model, judge on), the CLI pointed at it."""
    seed_postings(app_db_url, tmp_path, GYM_POSTINGS)
    defs = build_definitions(gym_settings(app_db_url), llm=GymFake())
    with DagsterInstance.ephemeral() as instance:
        run_use_case(defs, instance, ["g-1", "g-2", "g-3"])
        run_use_case(defs, instance, ["g-1", "g-2", "g-3"], use_case="posting_skills")
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setenv("PIPELINE_SKILLS_STYLE", "llm")  # as the run above (gym_settings): same version
    return app_db_url


def _item(url: str, key: str, use_case: str = "posting_summary") -> int:
    with session_scope(url) as session:
        return session.scalar(
            select(ReviewItem.id).where(ReviewItem.subject_key == key, ReviewItem.use_case == use_case)
        )


def _flag_current(url: str, use_case: str, key: str) -> int:
    """A reviewer's spot check of a current output (outputs that pass every check are reviewable too)."""
    with session_scope(url) as session:
        output = review.current_output(session, use_case, key)
        return review.flag_for_review(
            session,
            use_case=use_case,
            subject_key=key,
            use_case_version=output.use_case_version,
            reason="spot check",
            output=output.value,
            interaction_id=output.interaction_id,
        )


def test_review_lists_the_quality_figures_and_the_open_items(reviewed: str, capsys) -> None:  # noqa: ANN001
    assert main(["review"]) == 0
    out = capsys.readouterr().out
    summary_row = next(line for line in out.splitlines() if line.startswith("posting_summary "))
    # 2 outputs (the loop was blocked), judge mean (4.67 + 2.0) / 2 over 2 graded, 2 open items
    assert summary_row.split()[:5] == ["posting_summary", "2", "3.33", "(2)", "2"]
    assert f"#{_item(reviewed, 'g-2')}  posting_summary  g-2 (Registered Nurse) grade 2.0" in out
    assert "blocked: summary repeats itself" in out
    assert f"#{_item(reviewed, 'g-1')} " not in out  # a good output is not in the queue


def test_a_review_round_stores_the_corpus_delivers_corrections_and_moves_the_figures(
    reviewed: str, capsys
) -> None:  # noqa: ANN001
    nurse, looping = _item(reviewed, "g-2"), _item(reviewed, "g-3")
    fixed = "Northgate Hospital seeks a nurse for critically ill patients at night, giving medication."

    assert main(["review", "correct", str(nurse), "--summary", fixed, "--note", "too short"]) == 0
    out = capsys.readouterr().out
    assert f"review item {nurse} (posting_summary, g-2): corrected and delivered as the current output" in out
    # model answer "A nurse job." against the correction: 2 shared words ("a", "nurse") of 3 and of 13
    assert "posting_summary: gold 0.67 / 0.15 / 0.25 / 0.00 (1)" in out

    assert main(["review", "accept", str(looping), "--note", "the check is wrong here"]) == 0
    out = capsys.readouterr().out
    assert "accepted and delivered as the current output" in out  # a blocked output, vouched for
    # plus g-3 agreeing on all its 5 distinct words: P 7/8, R 7/18
    assert "posting_summary: gold 0.88 / 0.39 / 0.54 / 0.50 (2)" in out

    with session_scope(reviewed) as session:
        corpus = {c.subject_key: c for c in session.scalars(select(Correction))}
        outputs = {
            o.subject_key: o
            for o in session.scalars(select(UseCaseOutput).where(UseCaseOutput.use_case == "posting_summary"))
        }
        statuses = dict(session.execute(select(ReviewItem.id, ReviewItem.status)).all())
        review_call = session.get(Interaction, outputs["g-2"].interaction_id)
    assert corpus["g-2"].verdict == "corrected" and corpus["g-2"].corrected == {"summary": fixed}
    assert corpus["g-2"].original == {"summary": "A nurse job."} and corpus["g-2"].note == "too short"
    assert corpus["g-3"].verdict == "accepted" and corpus["g-3"].corrected == corpus["g-3"].original
    assert outputs["g-2"].value == {"summary": fixed} and outputs["g-2"].backend == "review"
    assert set(outputs) == {"g-1", "g-2", "g-3"}
    assert (statuses[nurse], statuses[looping]) == ("corrected", "accepted")
    assert review_call.model == "reviewer" and review_call.prompt.startswith(
        f"pipeline review correct {nurse}"
    )

    assert main(["review"]) == 0
    assert "no open review items" in capsys.readouterr().out
    assert main(["review", "--status", "all"]) == 0
    assert f"#{nurse} [corrected]" in capsys.readouterr().out


def test_correcting_skills_and_concepts(reviewed: str, capsys, tmp_path: Path) -> None:  # noqa: ANN001
    skills = _flag_current(reviewed, "posting_skills", "g-1")
    assert (
        main(
            [
                "review",
                "correct",
                str(skills),
                "--remove-skill",
                "python and sql",
                "--add-skill",
                "knowledge:Python",
            ]
        )
        == 0
    )
    with session_scope(reviewed) as session:
        value = review.current_output(session, "posting_skills", "g-1").value
    assert [(s["mention"], s["kind"]) for s in value["skills"]] == [
        ("dbt", "knowledge"),
        ("Python", "knowledge"),
    ]
    assert value["skills"][1]["evidence"].startswith("You write Python and SQL")
    capsys.readouterr()

    # resolve the corrected skills, then point "dbt" at another concept
    defs = build_definitions(gym_settings(reviewed), llm=GymFake())
    with DagsterInstance.ephemeral() as instance:
        assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
        run_use_case(defs, instance, ["g-1"], use_case="skill_entities")
    entities = _flag_current(reviewed, "skill_entities", "g-1")
    assert main(["review", "correct", str(entities), "--concept", f"dbt={PYTHON_URI}"]) == 0
    with session_scope(reviewed) as session:
        resolved = {
            e["mention"]: e for e in review.current_output(session, "skill_entities", "g-1").value["entities"]
        }
        by_concept = session.scalars(
            select(PostingSkillConcept.mention).where(PostingSkillConcept.concept_uri == PYTHON_URI)
        ).all()
    assert resolved["dbt"]["concept_uri"] == PYTHON_URI and resolved["dbt"]["stage"] == "review"
    assert sorted(by_concept) == ["Python", "dbt"]  # the concept index follows the correction


def test_a_reviewer_picks_one_of_the_linkers_candidates_by_number(reviewed: str, capsys) -> None:  # noqa: ANN001
    defs = build_definitions(gym_settings(reviewed), llm=GymFake())
    with DagsterInstance.ephemeral() as instance:
        assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
        run_use_case(defs, instance, ["g-1"], use_case="skill_entities")
    with session_scope(reviewed) as session:
        before = review.current_output(session, "skill_entities", "g-1").value["entities"]
    # the learned linker (MiniLM, installed by make) keeps its three best concepts on each entity
    assert all(1 <= len(e["candidates"]) <= 3 for e in before), before
    entity = before[0]
    second = entity["candidates"][1]
    item = _flag_current(reviewed, "skill_entities", "g-1")
    assert main(["review", "correct", str(item), "--concept", f"{entity['mention']}=4"]) == 2
    assert f"{entity['mention']!r} has 3 candidates: write a number from 1 to 3" in capsys.readouterr().err
    assert main(["review", "correct", str(item), "--concept", f"{entity['mention']}=2"]) == 0
    with session_scope(reviewed) as session:
        after = review.current_output(session, "skill_entities", "g-1").value["entities"][0]
    assert (after["concept_uri"], after["concept_label"]) == (second["concept_uri"], second["concept_label"])
    assert after["stage"] == "review"


BAD_VERDICTS = [
    (["accept", "999"], "no review item 999"),
    (["correct", "{nurse}"], "say what to correct: posting_summary takes --summary"),
    (["correct", "{nurse}", "--summary", "x" * 700], "breaks the output schema at summary"),
    (
        ["correct", "{nurse}", "--summary", "A nurse job."],
        "leaves review item {nurse}'s output as it was",
    ),
    (
        ["correct", "{nurse}", "--add-skill", "Python"],
        "--add-skill does not apply to posting_summary outputs (they take --summary)",
    ),
    (["correct", "{skills}", "--add-skill", "Kubernetes"], "'Kubernetes' does not appear in the posting"),
    (
        ["correct", "{skills}", "--remove-skill", "Rust"],
        "no mention 'Rust' to remove (mentions: 'Python and SQL'",
    ),
    (
        ["correct", "{skills}", "--concept", "dbt"],
        "--concept does not apply to posting_skills outputs (they take --add-skill, --remove-skill)",
    ),
    (
        ["correct", "{nurse}", "--concept", "dbt=https://x.example/none"],
        "--concept does not apply to posting_summary outputs",
    ),
    (
        [
            "correct",
            "{nurse}",
            "--summary",
            GYM_POSTINGS[1]["description"] + " " + GYM_POSTINGS[1]["description"],
        ],
        "fails the blocking check summary_not_degenerate",
    ),
]


def test_bad_verdicts_are_refused_with_a_clear_error_and_change_nothing(reviewed: str, capsys) -> None:  # noqa: ANN001
    ids = {"nurse": _item(reviewed, "g-2"), "skills": _flag_current(reviewed, "posting_skills", "g-1")}
    with session_scope(reviewed) as session:
        before = session.execute(
            select(UseCaseOutput.subject_key, UseCaseOutput.use_case, UseCaseOutput.updated_at)
        ).all()
    for args, message in BAD_VERDICTS:
        assert main(["review", *(arg.format(**ids) for arg in args)]) == 2, args
        assert message.format(**ids) in capsys.readouterr().err
    with session_scope(reviewed) as session:
        assert session.scalar(select(func.count(Correction.id))) == 0
        assert set(session.scalars(select(ReviewItem.status))) == {"open"}
        after = session.execute(
            select(UseCaseOutput.subject_key, UseCaseOutput.use_case, UseCaseOutput.updated_at)
        ).all()
    assert sorted(after) == sorted(before)


def test_a_resolved_item_cannot_be_resolved_again(reviewed: str, capsys) -> None:  # noqa: ANN001
    nurse = _item(reviewed, "g-2")
    assert main(["review", "reject", str(nurse)]) == 0
    assert main(["review", "accept", str(nurse)]) == 2
    assert f"review item {nurse} is already rejected" in capsys.readouterr().err


def test_reprocess_counts_stale_outputs_and_why_before_doing_anything(reviewed: str, capsys) -> None:  # noqa: ANN001
    with session_scope(reviewed) as session:
        session.execute(
            update(UseCaseOutput)
            .where(UseCaseOutput.use_case == "posting_summary", UseCaseOutput.subject_key == "g-1")
            .values(use_case_version="2026-01-01.1")
        )
    assert main(["reprocess", "--stale", "--use-case", "posting_summary", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        "posting_summary (version 2026-11-24.1, gemma3:270m): 1 stale outputs "
        "(1 made by version 2026-01-01.1)" in out
    )
    assert "dry run: nothing changed" in out
    with session_scope(reviewed) as session:
        assert (
            session.scalar(
                select(UseCaseOutput.use_case_version).where(
                    UseCaseOutput.use_case == "posting_summary", UseCaseOutput.subject_key == "g-1"
                )
            )
            == "2026-01-01.1"
        )
    assert main(["reprocess", "--stale", "--use-case", "nope"]) == 2


def test_the_gym_migration_goes_down_and_up_again(app_db_url: str, tmp_path: Path) -> None:
    seed_postings(app_db_url, tmp_path, GYM_POSTINGS[:1])
    gym_tables = {"output_grades", "review_items", "corrections"}
    config = alembic_config(app_db_url)
    with get_engine(app_db_url).begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0002")
    assert not gym_tables & set(inspect(get_engine(app_db_url)).get_table_names())
    with get_engine(app_db_url).begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    assert gym_tables <= set(inspect(get_engine(app_db_url)).get_table_names())
    dispose(app_db_url)


def test_a_correction_may_name_the_postings_location(
    reviewed: str,
    tmp_path: Path,
    capsys,  # noqa: ANN001
) -> None:
    """The checks see every field of the posting: a summary naming where the job is passes when the
    posting says so (the faithfulness check once saw only title, description and company)."""
    seed_postings(reviewed, tmp_path, [{**GYM_POSTINGS[1], "location": "Utrecht"}])
    nurse = _item(reviewed, "g-2")
    invented = "Northgate Hospital in Rotterdam seeks a nurse for critically ill patients at night."
    assert main(["review", "correct", str(nurse), "--summary", invented]) == 2
    refused = capsys.readouterr().err
    assert "the blocking check summary_faithful" in refused and "Rotterdam" in refused  # still checked
    named = "Northgate Hospital in Utrecht seeks a nurse for critically ill patients at night."
    assert main(["review", "correct", str(nurse), "--summary", named]) == 0
    assert f"review item {nurse} (posting_summary, g-2): corrected" in capsys.readouterr().out


def test_a_reviewers_correction_exports_as_the_reviewers_not_the_models(
    reviewed: str, tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    nurse = _item(reviewed, "g-2")
    fixed = "Northgate Hospital seeks a nurse for critically ill patients at night, giving medication."
    assert main(["review", "correct", str(nurse), "--summary", fixed]) == 0
    out = tmp_path / "enriched.jsonl"
    assert main(["export", "--format", "jsonl", "--out", str(out)]) == 0
    rows = {row["key"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows["g-2"]["summary"] == fixed and rows["g-2"]["summary_model"] == "reviewer"
    assert rows["g-1"]["summary_model"] not in (None, "reviewer")  # the model's own output says the model
    with session_scope(reviewed) as session:
        viewed = dict(session.execute(text("SELECT key, summary_model FROM enriched_postings")).all())
    assert viewed["g-2"] == "reviewer" and viewed["g-1"] == rows["g-1"]["summary_model"]
