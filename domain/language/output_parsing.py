"""From a raw response to a use case's output: parse, salvage, validate, postprocess, and the blocking checks.

A *blocking* declared check guards what flows downstream: an output that fails one is rejected before it
is stored (`BlockedOutput`, an item error: a failed attempt, retried with backoff, and a review item), so
no downstream use case ever reads it. Non-blocking checks only report (`assets/batch_run.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

from domain.language.declaration import UseCase
from domain.language.llm_types import ItemError
from domain.language.steps import LLMStep


class BlockedOutput(ItemError):
    """An output a blocking check rejected: not stored, a failed attempt, and a review item."""

    PREFIX = "blocked by check "

    def __init__(self, check: str, reason: str, value: dict[str, Any]) -> None:
        super().__init__(f"{self.PREFIX}{check}: {reason}")
        self.check, self.reason, self.value = check, reason, value


def first_blocking_failure(
    declared: Sequence[Any], output: dict[str, Any], subject: Mapping[str, Any]
) -> BlockedOutput | None:
    """The first blocking `OutputCheck` among `declared` that `output` fails, as the error to raise."""
    for check in declared:
        if check.blocking:
            reason = check.check(output, subject)
            if reason:
                return BlockedOutput(check.name, reason, output)
    return None


def describe_check(check: Any) -> str:
    """An `OutputCheck`'s description, saying what a blocking check does to a failing output."""
    if check.blocking:
        return f"{check.description} Blocking: a failing output is rejected (not stored, retried, reviewed)."
    return check.description


def blocked_subjects(check_name: str, failed: Mapping[str, str]) -> dict[str, str]:
    """The subjects of a batch whose output this blocking check rejected, with the reason."""
    prefix = f"{BlockedOutput.PREFIX}{check_name}: "
    return {key: error[len(prefix) :] for key, error in failed.items() if error.startswith(prefix)}


def parse_output(
    use_case: UseCase | LLMStep, text: str, inputs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Parse, validate and postprocess one raw response; raises ItemError saying what is wrong.

    `inputs` are the subject fields and upstream outputs the prompt was made from
    (postprocess uses them, e.g. to check that mentions are grounded in the subject).
    """
    if not text.strip():
        raise ItemError("the model returned an empty response")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        value = salvage_truncated_json(text)
        if value is None:
            raise ItemError(f"the response is not valid JSON: {exc.msg} at character {exc.pos}") from exc
    except (ValueError, RecursionError) as exc:  # e.g. a 5,000-digit number, or nesting 100,000 deep
        raise ItemError(f"the response cannot be read as JSON: {type(exc).__name__}: {exc}"[:500]) from exc
    try:
        use_case.validate_generation(value)
    except jsonschema.ValidationError as exc:
        raise ItemError(f"the response breaks the output schema: {exc.message}") from exc
    if use_case.postprocess is not None:
        try:
            value = use_case.postprocess(value, inputs or {})
        except ValueError as exc:
            raise ItemError(str(exc)) from exc
        except Exception as exc:  # a bug in a declared postprocess is this item's error, not a crash
            raise ItemError(f"postprocess failed: {type(exc).__name__}: {exc}") from exc
    if use_case.generation_schema is not None or use_case.postprocess is not None:
        try:
            use_case.validate_output(value)
        except jsonschema.ValidationError as exc:
            raise ItemError(f"the processed output breaks the output schema: {exc.message}") from exc
    # a chain's steps declare no checks: its final output is checked by `final_output`
    blocked = first_blocking_failure(getattr(use_case, "checks", ()), value, inputs or {})
    if blocked is not None:  # a bad output must not flow downstream: rejected like an unusable answer
        raise blocked
    return value


def salvage_truncated_json(text: str) -> Any | None:
    """Keep the complete items of a response cut off at max_tokens (small models run on in lists).

    Cuts back to the last complete list item and closes the open brackets; returns None
    when nothing sensible remains. The schema check that follows still applies.
    """
    stack: list[str] = []
    in_string = escaped = False
    last_item_end: tuple[int, list[str]] | None = None
    for position, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack or stack.pop() != char:
                return None
            if stack and stack[-1] == "]":
                last_item_end = (position, list(stack))
    if last_item_end is None:
        return None
    position, open_brackets = last_item_end
    try:
        return json.loads(text[: position + 1] + "".join(reversed(open_brackets)))
    except (ValueError, RecursionError):
        return None


def final_output(use_case: UseCase, value: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A chain's last step output, through the use case's postprocess, output schema and blocking checks."""
    if use_case.postprocess is not None:
        try:
            value = use_case.postprocess(value, inputs)
        except ValueError as exc:
            raise ItemError(f"chain output: {exc}") from exc
        except Exception as exc:  # a bug in a declared postprocess is this item's error, not a crash
            raise ItemError(f"chain output: postprocess failed: {type(exc).__name__}: {exc}") from exc
    try:
        use_case.validate_output(value)
    except jsonschema.ValidationError as exc:
        raise ItemError(f"chain output breaks the use case's output schema: {exc.message}") from exc
    blocked = first_blocking_failure(use_case.checks, value, inputs)
    if blocked is not None:  # the gym's blocking checks apply to a chain's result as to any output
        raise blocked
    return value
