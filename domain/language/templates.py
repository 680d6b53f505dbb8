"""Prompt templates: the `{variables}` they name and how values are put in.

A variable is a posting field (`{title}`, `{description}`, ...), the output of a declared upstream use
case (`{posting_summary}`, or one field of it: `{posting_summary.summary}`), or in a chain an earlier
step's output. Braces that do not hold an identifier (such as JSON in few-shot examples) are left alone.
A variable with no value for an item is that item's error (`TemplateVariableError`), never a prompt
with a literal `{placeholder}`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

POSTING_VARIABLES = ("key", "title", "company", "location", "description", "url", "posted_at")
_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}")


class TemplateVariableError(ValueError):
    """A variable that has no value for this posting (an item error, never a literal placeholder)."""


def template_variables(prompt: str, system_prompt: str) -> tuple[str, ...]:
    """The `{variables}` a prompt and its system prompt use, in order of first use."""
    found = _VARIABLE.findall(system_prompt) + _VARIABLE.findall(prompt)
    return tuple(dict.fromkeys(found))


def render_templates(
    prompt: str, system_prompt: str, input_limits: Mapping[str, int], values: Mapping[str, Any]
) -> tuple[str, str, dict[str, int]]:
    """Substitute variables (cut to their input limits); (prompt, system prompt, {variable: chars cut}).

    Raises TemplateVariableError naming a variable with no value: never a literal placeholder."""
    resolved: dict[str, str] = {}
    truncated: dict[str, int] = {}
    for variable in template_variables(prompt, system_prompt):
        text = _lookup(values, variable)
        limit = input_limits.get(variable)
        if limit is not None and len(text) > limit:
            truncated[variable] = len(text) - limit
            text = text[:limit].rstrip() + " [...]"
        resolved[variable] = text

    def substitute(template: str) -> str:
        return _VARIABLE.sub(lambda match: resolved[match.group(1)], template)

    return substitute(prompt), substitute(system_prompt), truncated


def _lookup(values: Mapping[str, Any], variable: str) -> str:
    root, _, attribute = variable.partition(".")
    if root not in values or values[root] is None:
        raise TemplateVariableError(f"template variable {{{variable}}} has no value for this posting")
    value = values[root]
    if attribute:
        if not isinstance(value, Mapping) or value.get(attribute) is None:
            raise TemplateVariableError(f"template variable {{{variable}}} has no value for this posting")
        value = value[attribute]
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


RETRY_NOTE_CHARS = 300
RETRY_MIN_TEMPERATURE = 0.4


def retry_prompt(prompt: str, error: str) -> str:
    """The prompt of a retry: the earlier answer's error, right before the answer's cue (the last line,
    such as `Summary:`), so the model does not make the same mistake; at temperature 0 with the same
    seed it otherwise answers the same again."""
    head, _, cue = prompt.rstrip("\n").rpartition("\n")
    note = (
        f"(An earlier answer for this posting was rejected: {' '.join(error.split())[:RETRY_NOTE_CHARS]}. "
        "Answer again without that mistake.)"
    )
    return f"{head}\n{note}\n{cue}" if head else f"{note}\n{cue}"


def retry_options(options: Mapping[str, Any], attempts: int) -> dict[str, Any]:
    """Generation options of the retry after `attempts` failures: another seed, and some temperature."""
    temperature = max(float(options.get("temperature", 0.0)), RETRY_MIN_TEMPERATURE)
    return {**options, "seed": attempts, "temperature": temperature}
