"""PIPELINE_LINK_STYLE=linker+llm: a model referees the linker's unsure answers in skill_entities,
each step traced, the chosen candidates stored and the concept index following them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dagster import DagsterInstance
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput
from domain.language.llm_types import Generation
from pipeline_defs.cli.in_process_runs import load_reference_data
from pipeline_defs.definitions import build_definitions
from plugins.postings.plugin import PLUGIN as POSTINGS_PLUGIN
from plugins.postings.skills.link_referee import ASK_BELOW, REFEREE_PROMPT
from plugins.postings.store.tables import PostingSkillConcept
from tests.support.gym_fakes import GYM_POSTINGS, GymFake, gym_settings
from tests.support.postings import run_use_case, seed_postings

REFEREE_MODEL = "referee:big"


class Referee(GymFake):
    """The gym's fake model; as referee, it answers "b" (the linker's second concept) for every phrase."""

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        if model != REFEREE_MODEL:
            return super()._generate(handle, model, prompt, system_prompt, schema, options)
        listing = prompt.rsplit("Phrases:\n", 1)[1].rsplit("\nAnswer:", 1)[0]
        phrases = [line for line in listing.splitlines() if " | in: " in line]
        return Generation(json.dumps({"choices": ["b"] * len(phrases)}), 200, 10, 1.0)


def _entities(url: str) -> dict[str, list[dict[str, Any]]]:
    with session_scope(url) as session:
        rows = session.scalars(select(UseCaseOutput).where(UseCaseOutput.use_case == "skill_entities"))
        return {row.subject_key: row.value["entities"] for row in rows}


def test_the_referee_chooses_among_the_candidates_of_the_unsure_answers_only(
    app_db_url: str, tmp_path: Path
) -> None:
    keys = [posting["key"] for posting in GYM_POSTINGS]
    seed_postings(app_db_url, tmp_path, GYM_POSTINGS)
    linker_only = build_definitions(gym_settings(app_db_url), llm=GymFake())
    refereed = build_definitions(
        gym_settings(app_db_url, link_style="linker+llm", link_referee_model=REFEREE_MODEL), llm=Referee()
    )
    with DagsterInstance.ephemeral() as instance:
        run_use_case(linker_only, instance, keys, use_case="posting_skills")
        assert load_reference_data(linker_only, instance, POSTINGS_PLUGIN.reference_jobs)
        run_use_case(linker_only, instance, keys, use_case="skill_entities")
        before = _entities(app_db_url)
        # another style is another version of skill_entities: every posting is done again
        assert run_use_case(refereed, instance, keys, use_case="skill_entities").success
    after = _entities(app_db_url)
    with session_scope(app_db_url) as session:
        calls = session.scalars(select(Interaction).where(Interaction.use_case == "skill_entities")).all()
        indexed = {(row.posting_key, row.concept_uri) for row in session.scalars(select(PostingSkillConcept))}
    referee_calls = [call for call in calls if call.options.get("chain", {}).get("step") == "referee"]
    assert referee_calls and all(call.model == REFEREE_MODEL for call in referee_calls)
    assert all(REFEREE_PROMPT.split("\n", 1)[0] in call.prompt for call in referee_calls)
    switched = 0
    for key in keys:
        for old, new in zip(before[key], after[key], strict=True):
            asked = (
                old["stage"] in ("learned", "unmatched")
                and old["confidence"] < ASK_BELOW
                and len(old["candidates"]) > 1
            )
            if asked:  # the referee's "b": the linker's second concept, marked as the referee's
                assert (new["concept_uri"], new["stage"], new["referee"]) == (
                    old["candidates"][1]["concept_uri"],
                    "referee",
                    "b",
                ), (old, new)
                assert (key, new["concept_uri"]) in indexed
                switched += 1
            else:  # a sure answer is not asked and stays as the linker gave it
                assert new == old
    assert switched >= 1, before  # the gym's postings hold unsure answers (else this test shows nothing)
    # one call per posting with unsure answers; the others go straight to the final step
    assert len(referee_calls) == sum(any(e.get("referee") for e in entities) for entities in after.values())
