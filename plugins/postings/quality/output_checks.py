"""Structural checks of single outputs: pure functions, `check(output, posting) -> reason | None`.

Use cases declare them as `OutputCheck`s (see `plugins/postings/use_cases/`). A *blocking* check
guards what flows downstream: an output that fails it is rejected before it is stored
(a failed attempt, like an unparseable answer), so no use case ever reads it, and it
goes to review. A non-blocking check only reports (and sends the output to review).

Copy and degeneration are measured on word n-grams, so they work for any language
that separates words with spaces:
- copy share: the share of the output's word 5-grams found verbatim in the posting
  (an extractive copy scores near 1; a paraphrase with a few quoted names stays low);
- repeated share: the share of word trigrams that repeat an earlier trigram of the
  same output (a looping small model scores high; normal prose near 0).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jsonschema

from domain.language.declaration_parts import validate_json
from plugins.postings.quality import faithfulness

CheckFunction = Callable[[dict[str, Any], Mapping[str, Any]], str | None]

SUMMARY_MIN_CHARS = 20
SUMMARY_MAX_CHARS = 600
COPY_NGRAM = 5
MAX_COPY_SHARE = 0.8
MIN_WORDS_FOR_COPY = 12
DEGENERATE_NGRAM = 3
MAX_REPEATED_SHARE = 0.3
MIN_WORDS_FOR_REPEATS = 9
MAX_QUOTED = 5

_WORD = re.compile(r"\w+(?:[-'’]\w+)*", re.UNICODE)


def words(text: str) -> list[str]:
    """Lowercased words (punctuation dropped), the unit of the n-gram measures."""
    return [word.lower() for word in _WORD.findall(text)]


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def copy_share(text: str, source: str, n: int = COPY_NGRAM) -> float:
    """Share of `text`'s word n-grams that occur verbatim in `source` (0.0 when it has none)."""
    grams = ngrams(words(text), n)
    if not grams:
        return 0.0
    source_grams = set(ngrams(words(source), n))
    return sum(gram in source_grams for gram in grams) / len(grams)


def repeated_share(text: str, n: int = DEGENERATE_NGRAM) -> float:
    """Share of `text`'s word n-grams that repeat an earlier one (0.0 when it has none)."""
    grams = ngrams(words(text), n)
    if not grams:
        return 0.0
    return (len(grams) - len(set(grams))) / len(grams)


# --- posting_summary ---------------------------------------------------------------------------


def summary_not_empty(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    if not str(output.get("summary", "")).strip():
        return "summary is empty"
    return None


def summary_length(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    length = len(str(output.get("summary", "")))
    if length < SUMMARY_MIN_CHARS:
        return f"summary has only {length} characters (fewer than {SUMMARY_MIN_CHARS})"
    if length > SUMMARY_MAX_CHARS:
        return f"summary has {length} characters (more than {SUMMARY_MAX_CHARS})"
    return None


def summary_not_a_copy(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    summary = str(output.get("summary", ""))
    if len(words(summary)) < MIN_WORDS_FOR_COPY:
        return None
    share = copy_share(summary, str(posting.get("description", "")))
    if share > MAX_COPY_SHARE:
        return (
            f"summary is copied from the posting: {share:.0%} of its {COPY_NGRAM}-word sequences "
            f"appear there verbatim (at most {MAX_COPY_SHARE:.0%})"
        )
    return None


def summary_not_degenerate(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    summary = str(output.get("summary", ""))
    if len(words(summary)) < MIN_WORDS_FOR_REPEATS:
        return None
    share = repeated_share(summary)
    if share > MAX_REPEATED_SHARE:
        return (
            f"summary repeats itself: {share:.0%} of its {DEGENERATE_NGRAM}-word sequences are repeats "
            f"(at most {MAX_REPEATED_SHARE:.0%})"
        )
    return None


def summary_faithful(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    """Every number, code, name and role the summary states is supported by the posting
    (`faithfulness.py`); the reason quotes each unsupported phrase, so a retry can be told."""
    unsupported = faithfulness.default_checker().unsupported(str(output.get("summary", "")), posting)
    if unsupported:
        return f"summary states what the posting does not: {', '.join(unsupported[:MAX_QUOTED])}" + (
            f" and {len(unsupported) - MAX_QUOTED} more" if len(unsupported) > MAX_QUOTED else ""
        )
    return None


# --- posting_skills ----------------------------------------------------------------------------


def schema_valid(schema: Mapping[str, Any]) -> CheckFunction:
    """A check that the stored output follows `schema` (what downstream use cases rely on)."""

    def check(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
        try:
            validate_json(output, schema)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(part) for part in exc.absolute_path) or "the output"
            return f"{where}: {exc.message}"
        return None

    return check


def squash(text: str) -> str:
    """Lowercase with runs of whitespace collapsed: the "modulo case and whitespace" comparison."""
    return " ".join(text.lower().split())


def skills_in_posting(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    """Every kept mention is in the posting: at its offsets when it has them (`field`, `start`, `end`),
    else anywhere in the title or text (modulo case and whitespace)."""
    text = squash(f"{posting.get('title') or ''}\n{posting.get('description') or ''}")

    def found(skill: Mapping[str, Any]) -> bool:
        if "start" in skill:
            source = str(posting.get(skill.get("field") or "description") or "")
            return squash(source[skill["start"] : skill["end"]]) == squash(skill["mention"])
        return squash(skill["mention"]) in text

    missing = [skill["mention"] for skill in output.get("skills", []) if not found(skill)]
    if missing:
        return f"{len(missing)} mentions do not appear in the posting: {missing[:5]}"
    return None


def skills_mostly_grounded(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    """The model invented fewer mentions than it found (ungrounded ones are dropped and counted)."""
    dropped = output.get("ungrounded", [])
    kept = len(output.get("skills", []))
    if dropped and len(dropped) > kept:
        return f"{len(dropped)} of {len(dropped) + kept} mentions were not found in the posting"
    return None


# --- skill_entities ----------------------------------------------------------------------------

MAX_UNMATCHED_SHARE = 0.5


def resolution_coverage(output: dict[str, Any], posting: Mapping[str, Any]) -> str | None:
    total = output["matched"] + output["unmatched"]
    if total and output["unmatched"] / total > MAX_UNMATCHED_SHARE:
        return (
            f"{output['unmatched']} of {total} mentions are unmatched (more than {MAX_UNMATCHED_SHARE:.0%})"
        )
    return None
