"""The gym's test world: postings, a fake model that summarizes, extracts and judges by title, and
the gym's settings."""

from __future__ import annotations

import json
from typing import Any

from domain.language.llm_types import Generation
from pipeline_defs.settings import Settings
from resources.llm import LLMResource

POSTING = {
    "title": "Data Engineer",
    "description": (
        "Brightwave Energy is looking for a Data Engineer to build the pipelines that bring turbine "
        "telemetry into our warehouse. You write Python and SQL, run Dagster and dbt, and care about "
        "data quality. Hybrid in Berlin."
    ),
}


GOOD_SUMMARY = "Brightwave Energy hires a Data Engineer in Berlin for telemetry pipelines in Python and SQL."


GYM_POSTINGS = [
    {
        "key": "g-1",
        "title": "Data Engineer",
        "company": "Brightwave Energy",
        **{"description": POSTING["description"]},
    },
    {
        "key": "g-2",
        "title": "Registered Nurse",
        "company": "Northgate Hospital",
        "description": "Care for critically ill patients at night, administer medication, keep records.",
    },
    {
        "key": "g-3",
        "title": "Electrician",
        "company": "Volt & Partners",
        "description": (
            "Install cabling, switchboards and lighting in new homes across Lyon, test every circuit "
            "safely and explain the installation to the owners when the work is done."
        ),
    },
]


LOOP = "Install cabling, install cabling, install cabling, install cabling, install cabling in new homes."


FAKE_SUMMARIES = {
    "Data Engineer": GOOD_SUMMARY,
    "Registered Nurse": "A nurse job.",  # too short: a non-blocking check fails, the output is kept
    "Electrician": LOOP,  # degenerate: blocked, never stored
}


FAKE_SKILLS = {
    "Data Engineer": {"knowledge": ["Python and SQL", "dbt"], "skills": []},
    "Registered Nurse": {"knowledge": [], "skills": ["administer medication", "keep records"]},
    "Electrician": {"knowledge": [], "skills": ["Install cabling", "test every circuit"]},
    "not stated": {"knowledge": ["Docker", "use"], "skills": []},  # a SkillSpan posting (no title)
}


LOW_GRADES = {"faithful": 2, "complete": 1, "concise": 3}


HIGH_GRADES = {"faithful": 5, "complete": 4, "concise": 5}


class GymFake(LLMResource):
    """Summaries and skills by title; as judge, low grades for outputs that mention a nurse."""

    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        if prompt.endswith("Grades:"):
            output = prompt.rsplit("Output: ", 1)[1]
            text = json.dumps(LOW_GRADES if "nurse" in output.lower() else HIGH_GRADES)
        else:
            title = prompt.rsplit("Title: ", 1)[1].split("\n", 1)[0]
            if prompt.endswith("Answer:"):
                text = json.dumps(FAKE_SKILLS[title])
            else:
                text = json.dumps({"summary": FAKE_SUMMARIES[title]})
        return Generation(text=text, prompt_tokens=50, completion_tokens=10, latency_ms=2.0)


def gym_settings(url: str, **changes: Any) -> Settings:
    return Settings.from_env().changed(
        # the skills come from the fake model's prompt (PIPELINE_SKILLS_STYLE=llm), not the CPU tagger;
        # the fake judge is for the LLM judge's mechanics, not a calibrated judge: calibration off
        **{
            "database_url": url,
            "judge_sample": 3,
            "judge_model": "judge:test",
            "judge_calibration": False,
            "skills_style": "llm",
            **changes,
        },
    )
