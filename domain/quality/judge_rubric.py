"""The judge: a second model grades outputs against a rubric (the gym's sampled scoring).

The rubric is configuration: criteria with one-line descriptions, and few-shot examples
per use case (posting, output, grades). The default suits a base model such as the
embedded Gemma 3 270M: a completion prompt (instructions, then examples, then the
output to grade) whose answer is forced by a JSON-schema grammar to
`{"faithful": 1-5, "complete": 1-5, "concise": 1-5}`. A file given by
PIPELINE_JUDGE_RUBRIC (JSON: `criteria`, `examples`) replaces it.

A tiny base model mostly echoes the examples' grades; point PIPELINE_JUDGE_MODEL at a
larger model (through Ollama) for grades worth acting on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GRADES = (1, 2, 3, 4, 5)
POSTING_CHARS = 1500
JUDGE_SUFFIX = ":judge"
DETERMINISTIC_JUDGE = "deterministic"
"""The default judge: grades from quality signals (`quality_signals.py`), no model; see docs/gym.md."""
JUDGE_OPTIONS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 40, "repeat_penalty": 1.0}


class RubricError(ValueError):
    """A rubric file that cannot be used (names the file and what is wrong)."""


@dataclass(frozen=True)
class Example:
    posting: str
    output: str
    grades: Mapping[str, int]


@dataclass(frozen=True)
class Rubric:
    """Criteria (name -> description) and few-shot examples per use case."""

    criteria: Mapping[str, str]
    examples: Mapping[str, tuple[Example, ...]] = field(default_factory=dict)

    @property
    def version(self) -> str:
        """A short content hash: grades made under another rubric are told apart."""
        payload = json.dumps(
            {
                "criteria": dict(self.criteria),
                "examples": {
                    name: [[e.posting, e.output, dict(e.grades)] for e in examples]
                    for name, examples in self.examples.items()
                },
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]

    @property
    def answer_order(self) -> list[str]:
        """Criteria in alphabetical order: the order llama.cpp's grammar (built from the schema with
        sorted keys) makes the model answer in, so the examples show the same order."""
        return sorted(self.criteria)

    @property
    def schema(self) -> dict[str, Any]:
        """The grammar of the judge's answer: one grade of 1..5 per criterion."""
        return {
            "type": "object",
            "properties": {name: {"type": "integer", "enum": list(GRADES)} for name in self.answer_order},
            "required": self.answer_order,
            "additionalProperties": False,
        }

    def prompt(self, use_case: str, posting: str, output: str) -> str:
        """The completion prompt grading `output` (made from `posting`) under this rubric."""
        examples = self.examples.get(use_case) or next(iter(self.examples.values()), ())
        lines = [
            "Outputs made from job postings, each graded from 1 (poor) to 5 (excellent) on:",
            *(f"- {name}: {description}" for name, description in self.criteria.items()),
            "",
        ]
        for example in examples:
            lines += [
                f"Posting: {example.posting}",
                f"Output: {example.output}",
                f"Grades: {json.dumps({name: example.grades[name] for name in self.answer_order})}",
                "",
            ]
        posting = " ".join(posting.split())
        if len(posting) > POSTING_CHARS:
            posting = posting[:POSTING_CHARS].rstrip() + " [...]"
        lines += [f"Posting: {posting}", f"Output: {' '.join(output.split())}", "Grades:"]
        return "\n".join(lines)

    def parse(self, text: str) -> dict[str, int]:
        """The grades in the judge's answer; ValueError saying what is wrong."""
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the judge's answer is not JSON: {exc.msg} at character {exc.pos}") from exc
        if not isinstance(value, dict):
            raise ValueError("the judge's answer is not a JSON object")
        grades = {}
        for name in self.criteria:
            grade = value.get(name)
            if not isinstance(grade, int) or isinstance(grade, bool) or grade not in GRADES:
                raise ValueError(f"the judge's answer has no grade 1-5 for {name!r}: {text[:200]!r}")
            grades[name] = grade
        return grades


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

DEFAULT_RUBRIC = Rubric(DEFAULT_CRITERIA, DEFAULT_EXAMPLES)


def load_rubric(path: str | Path | None) -> Rubric:
    """The rubric in a JSON file (`criteria`: name -> description; `examples`: use case -> list of
    {posting, output, grades}), or the default one when no path is given."""
    if not path:
        return DEFAULT_RUBRIC
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RubricError(f"{path}: cannot read the judge rubric: {exc}") from exc
    criteria = data.get("criteria") if isinstance(data, dict) else None
    if (
        not isinstance(criteria, dict)
        or not criteria
        or not all(isinstance(v, str) for v in criteria.values())
    ):
        raise RubricError(f"{path}: `criteria` must map each criterion's name to a description")
    examples: dict[str, tuple[Example, ...]] = {}
    for use_case, items in (data.get("examples") or {}).items():
        parsed = []
        for number, item in enumerate(items, start=1):
            grades = item.get("grades", {}) if isinstance(item, dict) else {}
            if set(grades) != set(criteria) or any(grades[name] not in GRADES for name in criteria):
                raise RubricError(
                    f"{path}: example {number} of {use_case} needs a grade 1-5 for each of {sorted(criteria)}"
                )
            parsed.append(Example(str(item.get("posting", "")), str(item.get("output", "")), grades))
        examples[use_case] = tuple(parsed)
    return Rubric(criteria, examples)


def overall(grades: Mapping[str, int]) -> float:
    """The mean of the criteria's grades."""
    return sum(grades.values()) / len(grades)


def judge_text(posting: Mapping[str, Any]) -> str:
    """The posting as the judge sees it: title, company, location, then the text."""
    head = " · ".join(str(posting[name]) for name in ("title", "company", "location") if posting.get(name))
    return f"{head}. {posting.get('description') or ''}"
