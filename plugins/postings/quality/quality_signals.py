"""A deterministic judge for summaries: grades from signals a reader can verify, no model.

The embedded judge (Gemma 3 270M) echoes its few-shot grades: it gave real, invented and
looping summaries all about 5. This judge grades the same three criteria as the LLM rubric
(`faithful`, `complete`, `concise`: 1-5, the same dict shape), from:
- faithful: the facts the posting does not support (`faithfulness.py`): none 5, one 2, more 1;
  a summary whose words are mostly not the posting's (grounding below `MIN_GROUNDING`) loses 1;
- complete: 1 + one point for each key fact of the posting it carries: the role, the company,
  the place, and one of the main requirements (terms of the posting's requirement sentences);
- concise: 5, less 4 for a loop (repeated word trigrams above the blocking limit, or fewer than
  half the words distinct), 3 for a partial loop (over 15% repeated: whole phrases again), 2 for
  a length outside 40-600 characters (1 above 400), 1 for a near-copy.

`needs_review` flags a summary when any criterion is graded below the review threshold: a
summary that invents a fact is not rescued by being complete and concise (with the mean alone,
faithful 2 / complete 5 / concise 5 would pass a threshold of 3).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from domain.quality.judge_rubric import needs_review
from plugins.postings.quality import output_checks
from plugins.postings.quality.faithfulness import (
    STOPWORDS,
    FaithfulnessChecker,
    content_tokens,
    default_checker,
    extract_claims,
    stem,
)

CRITERIA = ("faithful", "complete", "concise")
MIN_GROUNDING = 0.5
IDEAL_MAX_CHARS = 400
PARTIAL_LOOP_SHARE = 0.15
MIN_DISTINCT_SHARE = 0.5  # normal prose has 0.7-1.0 distinct words; "Barista Barista Barista ..." 0.17
MIN_WORDS_FOR_DISTINCT = 6
REQUIREMENT_CUE = re.compile(
    r"\b(require[sd]?|requirement|must|you have|you hold|you bring|you speak|experience|qualification|"
    r"degree|licen[cs]e|registration|certificat\w*|fluent|knowledge of|years?)\b",
    re.IGNORECASE,
)
_TITLE_QUALIFIERS = {"senior", "junior", "lead", "head", "chief", "assistant", "trainee", "night", "shift"}


@dataclass(frozen=True)
class QualityGrade:
    """Grades per criterion (the LLM judge's shape), whether to review, and why."""

    grades: dict[str, int]
    flagged: bool
    reasons: list[str] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)


def key_facts(posting: Mapping[str, Any]) -> dict[str, list[str]]:
    """What a complete summary carries: stems naming the role, company and place, and the main
    requirements' terms (numbers, codes and names in the posting's requirement sentences)."""

    def field(name: str) -> str:
        value = str(posting.get(name) or "")
        return "" if value.strip().lower() == "not stated" else value

    title = re.split(r"\s[-–(]|\(|,", field("title"))[0]
    role = [stem(w) for w in content_tokens(title) if w not in _TITLE_QUALIFIERS]
    company = [stem(w) for w in content_tokens(field("company"))][:1]
    place = [stem(w) for w in content_tokens(field("location").split(",")[0])][:2]
    requirements: list[str] = []
    for sentence in re.split(r"(?<=[.!?;])\s+", str(posting.get("description") or "")):
        if REQUIREMENT_CUE.search(sentence):
            for claim in extract_claims(sentence):
                words = [stem(w) for w in content_tokens(claim.text)]
                if claim.kind not in ("role", "detail", "praise") and words:
                    requirements.append(" ".join(words))
    facts = {
        "role": role,
        "company": company,
        "place": place,
        "requirements": list(dict.fromkeys(requirements)),
    }
    return {name: value for name, value in facts.items() if value and "not stated" not in " ".join(value)}


def coverage(summary: str, posting: Mapping[str, Any]) -> dict[str, bool]:
    """Which key facts of the posting the summary carries (a requirement: any one of them)."""
    stems = {stem(word) for word in content_tokens(summary)}
    found: dict[str, bool] = {}
    for name, value in key_facts(posting).items():
        if name == "requirements":
            found[name] = any(set(term.split()) <= stems for term in value)
        else:
            found[name] = any(word in stems for word in value)
    return found


def grounding(summary: str, posting: Mapping[str, Any]) -> float:
    """Share of the summary's content words (stemmed) that occur in the posting."""
    text = " ".join(str(posting.get(name) or "") for name in ("title", "company", "location", "description"))
    posting_stems = {stem(word) for word in content_tokens(text)}
    words = [stem(word) for word in content_tokens(summary) if word not in STOPWORDS]
    return sum(word in posting_stems for word in words) / len(words) if words else 0.0


def quality_grade(
    summary: str,
    posting: Mapping[str, Any],
    review_below: float = 3.0,
    checker: FaithfulnessChecker | None = None,
) -> QualityGrade:
    """Grade one summary of `posting` on faithful / complete / concise (1-5) from its signals."""
    checker = checker or default_checker()
    reasons: list[str] = []
    unsupported = checker.unsupported(summary, posting)
    grounded = grounding(summary, posting)
    faithful = 5 if not unsupported else 2 if len(unsupported) == 1 else 1
    if unsupported:
        reasons.append("not in the posting: " + ", ".join(unsupported))
    if grounded < MIN_GROUNDING:
        faithful = max(1, faithful - 1)
        reasons.append(f"only {grounded:.0%} of its words are the posting's")

    covered = coverage(summary, posting)
    complete = min(5, 1 + sum(covered.values()) + (4 - len(covered)))  # a fact the posting lacks counts
    missing = [name for name, found in covered.items() if not found]
    if missing:
        reasons.append("misses the posting's " + ", ".join(missing))

    concise = 5
    repeats = output_checks.repeated_share(summary)
    words = output_checks.words(summary)
    if len(words) >= MIN_WORDS_FOR_DISTINCT and len(set(words)) / len(words) < MIN_DISTINCT_SHARE:
        concise -= 4
        reasons.append(f"loops (only {len(set(words))} distinct words in {len(words)})")
    elif len(words) >= output_checks.MIN_WORDS_FOR_REPEATS:
        if repeats > output_checks.MAX_REPEATED_SHARE:
            concise -= 4
            reasons.append(f"loops ({repeats:.0%} of its word trigrams repeat)")
        elif repeats > PARTIAL_LOOP_SHARE:
            concise -= 3
            reasons.append(f"repeats itself ({repeats:.0%} of its word trigrams)")
    length = len(summary)
    if not output_checks.SUMMARY_MIN_CHARS * 2 <= length <= output_checks.SUMMARY_MAX_CHARS:
        concise -= 2
        reasons.append(f"{length} characters")
    elif length > IDEAL_MAX_CHARS:
        concise -= 1
        reasons.append(f"long ({length} characters)")
    copied = output_checks.copy_share(summary, str(posting.get("description") or ""))
    if copied > output_checks.MAX_COPY_SHARE and len(words) >= output_checks.MIN_WORDS_FOR_COPY:
        concise -= 1
        reasons.append(f"copied ({copied:.0%} of its 5-word sequences are the posting's)")
    grades = {"faithful": faithful, "complete": complete, "concise": max(1, concise)}
    return QualityGrade(
        grades=grades,
        flagged=needs_review(grades, review_below),
        reasons=reasons,
        signals={
            "unsupported": unsupported,
            "grounding": round(grounded, 3),
            "coverage": covered,
            "repeated_share": round(repeats, 3),
            "copy_share": round(copied, 3),
            "chars": length,
        },
    )


def deterministic_judge(posting: Mapping[str, Any], output: str) -> dict[str, int]:
    """The judge's answer for one output, as the LLM judge's parsed grades are: criterion -> 1..5."""
    return quality_grade(output, posting).grades
