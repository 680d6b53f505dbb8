"""The judge: a second model grades outputs against a rubric (the gym's sampled scoring).

A rubric is criteria with one-line descriptions and few-shot examples per use case (subject, output,
grades); a use case declares its own (`QualityLoop.judge_rubric`), and a file given by PIPELINE_JUDGE_RUBRIC
(JSON: `criteria`, `examples`) replaces it. The prompt is a completion (instructions, then examples,
then the output to grade) whose answer is forced by a JSON-schema grammar to one grade 1-5 per
criterion, so it suits a base model such as the embedded Gemma 3 270M.

A tiny base model mostly echoes the examples' grades; point PIPELINE_JUDGE_MODEL at a
larger model (through Ollama) for grades worth acting on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GRADES = (1, 2, 3, 4, 5)
SUBJECT_CHARS = 1500
JUDGE_SUFFIX = ":judge"
DETERMINISTIC_JUDGE = "deterministic"
"""The default judge: grades from quality signals (`quality_signals.py`), no model; see docs/gym.md."""
JUDGE_OPTIONS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 40, "repeat_penalty": 1.0}


class RubricError(ValueError):
    """A rubric file that cannot be used (names the file and what is wrong)."""


@dataclass(frozen=True)
class Example:
    subject: str
    output: str
    grades: Mapping[str, int]


@dataclass(frozen=True)
class Rubric:
    """Criteria (name -> description) and few-shot examples per use case; `made_from` says what the
    outputs are made from ("job postings") and `label` how a subject is introduced ("Posting")."""

    criteria: Mapping[str, str]
    examples: Mapping[str, tuple[Example, ...]] = field(default_factory=dict)
    made_from: str = "subjects"
    label: str = "Subject"

    @property
    def version(self) -> str:
        """A short content hash: grades made under another rubric are told apart."""
        payload = json.dumps(
            {
                "criteria": dict(self.criteria),
                "examples": {
                    name: [[e.subject, e.output, dict(e.grades)] for e in examples]
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

    def prompt(self, use_case: str, subject: str, output: str) -> str:
        """The completion prompt grading `output` (made from `subject`) under this rubric."""
        examples = self.examples.get(use_case) or next(iter(self.examples.values()), ())
        lines = [
            f"Outputs made from {self.made_from}, each graded from 1 (poor) to 5 (excellent) on:",
            *(f"- {name}: {description}" for name, description in self.criteria.items()),
            "",
        ]
        for example in examples:
            lines += [
                f"{self.label}: {example.subject}",
                f"Output: {example.output}",
                f"Grades: {json.dumps({name: example.grades[name] for name in self.answer_order})}",
                "",
            ]
        subject = " ".join(subject.split())
        if len(subject) > SUBJECT_CHARS:
            subject = subject[:SUBJECT_CHARS].rstrip() + " [...]"
        lines += [f"{self.label}: {subject}", f"Output: {' '.join(output.split())}", "Grades:"]
        return "\n".join(lines)

    def messages(self, use_case: str, subject: str, output: str) -> list[dict[str, str]]:
        """The same grading in chat form, for an instruction-tuned judge: the criteria in a system message,
        the examples as turns, the output to grade (with what it was made from) in a message of its own."""
        examples = self.examples.get(use_case) or next(iter(self.examples.values()), ())
        system = "\n".join(
            [
                f"You grade outputs made from {self.made_from}, each from 1 (poor) to 5 (excellent) on:",
                *(f"- {name}: {description}" for name, description in self.criteria.items()),
                "Answer with JSON only, one grade per criterion, e.g. "
                + json.dumps({name: 3 for name in self.answer_order})
                + ".",
            ]
        )
        messages = [{"role": "system", "content": system}]
        for example in examples:
            grades = json.dumps({name: example.grades[name] for name in self.answer_order})
            messages += [
                {"role": "user", "content": f"{self.label}: {example.subject}\nOutput: {example.output}"},
                {"role": "assistant", "content": grades},
            ]
        subject = " ".join(subject.split())
        if len(subject) > SUBJECT_CHARS:
            subject = subject[:SUBJECT_CHARS].rstrip() + " [...]"
        messages.append(
            {"role": "user", "content": f"{self.label}: {subject}\nOutput: {' '.join(output.split())}"}
        )
        return messages

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


def load_rubric(path: str | Path, like: Rubric | None = None) -> Rubric:
    """The rubric in a JSON file (`criteria`: name -> description; `examples`: use case -> list of
    {subject, output, grades}); it introduces subjects as `like` does (a use case's own)."""
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
            # the subject: `subject`, or the one other field (a rubric for postings may say `posting`)
            others = [value for name, value in item.items() if name not in ("output", "grades")]
            subject = item.get("subject", others[0] if len(others) == 1 else "")
            parsed.append(Example(str(subject), str(item.get("output", "")), grades))
        examples[use_case] = tuple(parsed)
    if like is None:
        return Rubric(criteria, examples)
    return Rubric(criteria, examples, made_from=like.made_from, label=like.label)


def overall(grades: Mapping[str, int]) -> float:
    """The mean of the criteria's grades."""
    return sum(grades.values()) / len(grades)


def needs_review(grades: Mapping[str, int], review_below: float) -> bool:
    """Any criterion graded below the threshold (which includes a mean below it)."""
    return min(grades.values()) < review_below


Grader = Callable[[Mapping[str, Any], str], Mapping[str, int]]
"""`grade(subject fields, output text) -> {criterion: 1..5}`: a judge, by rules or by a model."""


def llm_grader(
    generate: Callable[..., str],
    rubric: Rubric,
    use_case: str,
    describe: Callable[[Mapping[str, Any]], str],
    *,
    chat: bool = False,
) -> Grader:
    """A grader that asks an LLM: `generate(prompt, schema) -> text` (with `chat`, `generate(messages,
    schema)`), parsed under the rubric; `describe` shows it the subject (its kind's `describe`)."""

    def grade(subject: Mapping[str, Any], output: str) -> Mapping[str, int]:
        if chat:
            return rubric.parse(generate(rubric.messages(use_case, describe(subject), output), rubric.schema))
        return rubric.parse(generate(rubric.prompt(use_case, describe(subject), output), rubric.schema))

    return grade
