"""Prompt templates: the `{variables}` they name and how values are put in.

A variable is a field of the subject (a posting's `{title}`, `{description}`, ...), the output of a
declared upstream use case (`{posting_summary}`, or one field of it: `{posting_summary.summary}`), or in
a chain an earlier step's output. Braces that do not hold an identifier (such as JSON in few-shot
examples) are left alone.
A variable with no value for an item is that item's error (`TemplateVariableError`), never a prompt
with a literal `{placeholder}`.

Every value is put in through `neutralize_markers`: a subject's text cannot imitate the template's
structure (close its `<posting>` block, start a line with one of its `Field:` labels, or write its JSON
answer shape), so a description cannot end its own record and open a forged one (docs/prompt-injection.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")
_TEMPLATE_TAG = re.compile(r"</?([A-Za-z][\w-]*)>")
_TEMPLATE_LABEL = re.compile(r"^[ \t]*([A-Za-z][A-Za-z ]{0,30}?)[ \t]*:", re.MULTILINE)
_TEMPLATE_JSON_KEY = re.compile(r'\{\s*"([A-Za-z_]\w*)"\s*:')
# Characters a tokenizer or a reader may take for a line break, beside \n.
_LINE_BREAKS = re.compile(r"\r\n?|[\v\f\x1c-\x1e\x85\u2028\u2029]")


class TemplateVariableError(ValueError):
    """A variable that has no value for this subject (an item error, never a literal placeholder)."""


def template_variables(prompt: str, system_prompt: str) -> tuple[str, ...]:
    """The `{variables}` a prompt and its system prompt use, in order of first use."""
    found = _VARIABLE.findall(system_prompt) + _VARIABLE.findall(prompt)
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class TemplateMarkers:
    """What gives a template its structure: delimiter tags (`<posting>`), the labels its lines start
    with (`Title:`, `Summary:`) and the keys of its JSON answers (`{"summary":`)."""

    tags: frozenset[str]
    labels: frozenset[str]
    json_keys: frozenset[str]

    @classmethod
    def of(cls, *templates: str) -> TemplateMarkers:
        text = "\n".join(templates)
        return cls(
            frozenset(tag.lower() for tag in _TEMPLATE_TAG.findall(text)),
            frozenset(label.strip().lower() for label in _TEMPLATE_LABEL.findall(text)),
            frozenset(_TEMPLATE_JSON_KEY.findall(text)),
        )


def neutralize_markers(text: str, markers: TemplateMarkers, *, json_shape: bool = True) -> str:
    """`text` as a value inside a template, unable to imitate the template's structure.

    Line breaks of every kind become `\\n`; a delimiter tag of the template becomes `(tag)` /
    `(/tag)`; a line that starts with one of the template's labels keeps the word but loses the
    colon (`Title - Payments Clerk`); the start of a JSON answer (`{"summary":`) loses its brace.
    Ordinary text (no marker of this template) comes back unchanged."""
    text = _LINE_BREAKS.sub("\n", text)
    if markers.tags:
        names = "|".join(re.escape(tag) for tag in sorted(markers.tags))
        text = re.sub(
            rf"<\s*(/?)\s*({names})\s*>",
            lambda match: f"({match.group(1)}{match.group(2)})",
            text,
            flags=re.IGNORECASE,
        )
    if markers.labels:
        names = "|".join(re.escape(label).replace(r"\ ", r"\s+") for label in sorted(markers.labels))
        text = re.sub(
            rf"^([ \t]*(?:{names}))[ \t]*:",
            lambda match: f"{match.group(1)} -",
            text,
            flags=re.IGNORECASE | re.MULTILINE,
        )
    if json_shape and markers.json_keys:
        names = "|".join(re.escape(key) for key in sorted(markers.json_keys))
        text = re.sub(rf'\{{(\s*"(?:{names})"\s*:)', r"(\1", text, flags=re.IGNORECASE)
    return text


def render_templates(
    prompt: str,
    system_prompt: str,
    input_limits: Mapping[str, int],
    values: Mapping[str, Any],
    *,
    structure: Sequence[str] = (),
) -> tuple[str, str, dict[str, int]]:
    """Substitute variables (cut to their input limits); (prompt, system prompt, {variable: chars cut}).
    `structure`: more fixed text whose markers a value may not imitate (a chat prompt's examples).

    Raises TemplateVariableError naming a variable with no value: never a literal placeholder."""
    markers = TemplateMarkers.of(prompt, system_prompt, *structure)
    resolved: dict[str, str] = {}
    truncated: dict[str, int] = {}
    for variable in template_variables(prompt, system_prompt):
        text, is_text = _lookup(values, variable)
        limit = input_limits.get(variable)
        if limit is not None and len(text) > limit:
            truncated[variable] = len(text) - limit
            text = text[:limit].rstrip() + " [...]"
        # JSON we wrote ourselves (an upstream output) keeps its shape; the text in it is still defused
        resolved[variable] = neutralize_markers(text, markers, json_shape=is_text)

    def substitute(template: str) -> str:
        return _VARIABLE.sub(lambda match: resolved[match.group(1)], template)

    return substitute(prompt), substitute(system_prompt), truncated


def _lookup(values: Mapping[str, Any], variable: str) -> tuple[str, bool]:
    """(the variable's text, whether it is text rather than JSON we made of a value)."""
    root, _, attribute = variable.partition(".")
    if root not in values or values[root] is None:
        raise TemplateVariableError(f"template variable {{{variable}}} has no value for this subject")
    value = values[root]
    if attribute:
        if not isinstance(value, Mapping) or value.get(attribute) is None:
            raise TemplateVariableError(f"template variable {{{variable}}} has no value for this subject")
        value = value[attribute]
    if isinstance(value, str):
        return value, True
    return json.dumps(value, ensure_ascii=False), False


RETRY_NOTE_CHARS = 300
RETRY_MIN_TEMPERATURE = 0.4


def retry_note(error: str, noun: str = "subject") -> str:
    """What a retry tells the model: the earlier answer's error (at temperature 0 with the same seed it
    would otherwise answer the same again)."""
    return (
        f"(An earlier answer for this {noun} was rejected: {' '.join(error.split())[:RETRY_NOTE_CHARS]}. "
        "Answer again without that mistake.)"
    )


def retry_prompt(prompt: str, error: str, noun: str = "subject") -> str:
    """The completion prompt of a retry: the note right before the answer's cue (the last line, such as
    `Summary:`), so the model does not make the same mistake."""
    head, _, cue = prompt.rstrip("\n").rpartition("\n")
    note = retry_note(error, noun)
    return f"{head}\n{note}\n{cue}" if head else f"{note}\n{cue}"


def retry_options(options: Mapping[str, Any], attempts: int) -> dict[str, Any]:
    """Generation options of the retry after `attempts` failures: another seed, and some temperature."""
    temperature = max(float(options.get("temperature", 0.0)), RETRY_MIN_TEMPERATURE)
    return {**options, "seed": attempts, "temperature": temperature}
