"""The judge's rubric for the postings' use cases: three criteria, and few-shot examples per use case.

Its content is unchanged from when it was the engine's default (so a judge's calibration verdict,
remembered by the rubric's version, still holds). PIPELINE_JUDGE_RUBRIC replaces it with a file.
"""

from __future__ import annotations

from domain.quality.judge_rubric import Example, Rubric

DEFAULT_CRITERIA = {
    "faithful": "everything the output says is stated in the posting",
    "complete": "nothing important in the posting is missing from the output",
    "concise": "no repetition, filler or irrelevant detail",
}

_BAKER = (
    "Brightline Bakery in Leeds needs a baker for early shifts (4am-12pm). You bake bread and "
    "pastries, keep the kitchen clean and order flour. A food hygiene certificate is required."
)
_ANALYST = (
    "Harbor Insurance is hiring a Data Analyst in Rotterdam to build Power BI dashboards and "
    "write SQL for the claims team. Two years of experience and fluent Dutch are required."
)

# The last example weighs most with a small base model (it tends to echo it), so the good one
# comes last: a weak judge then flags little rather than flooding the review queue.
DEFAULT_EXAMPLES: dict[str, tuple[Example, ...]] = {
    "posting_summary": (
        Example(
            _ANALYST,
            "Harbor Insurance offers a remote senior analyst role in London with a high salary and "
            "stock options.",
            {"faithful": 1, "complete": 2, "concise": 4},
        ),
        Example(
            _BAKER,
            "Brightline Bakery needs a baker. The baker bakes bread. The baker bakes bread and "
            "pastries. The baker bakes bread.",
            {"faithful": 4, "complete": 2, "concise": 1},
        ),
        Example(
            _BAKER,
            "Brightline Bakery in Leeds is hiring a baker for early shifts to bake bread and pastries; "
            "a food hygiene certificate is required.",
            {"faithful": 5, "complete": 5, "concise": 5},
        ),
    ),
    "posting_skills": (
        Example(_BAKER, "Python; project management", {"faithful": 1, "complete": 1, "concise": 3}),
        Example(_ANALYST, "SQL", {"faithful": 5, "complete": 2, "concise": 5}),
        Example(
            _ANALYST,
            "Power BI; SQL; build dashboards; fluent Dutch",
            {"faithful": 5, "complete": 5, "concise": 5},
        ),
    ),
}

POSTINGS_RUBRIC = Rubric(DEFAULT_CRITERIA, DEFAULT_EXAMPLES, made_from="job postings", label="Posting")
