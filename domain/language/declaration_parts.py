"""The small parts a declaration is made of: its error, an output check, a script's context, schemas."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonschema


class DeclarationError(ValueError):
    """A use-case declaration that cannot work; raised when the code location loads."""


@dataclass(frozen=True)
class OutputCheck:
    """A structural check of one output: returns None when fine, else the reason it fails.

    `warm_up` loads what the check needs (a word list, a model) ahead of the first output: a run
    calls it in a thread beside its first calls, so the first output is not held up by it."""

    name: str
    description: str
    check: Callable[[dict[str, Any], Mapping[str, Any]], str | None]
    blocking: bool = False
    warm_up: Callable[[], object] | None = None


@dataclass(frozen=True)
class ScriptContext:
    """What a script use case's function gets beside its inputs: the run's resources and log, and the
    content hash of each reference input as the run read it once at its start (its input hashes
    are made from them), so a script need not query them again per posting."""

    resources: Any
    app_db: Any
    log: Any
    references: Mapping[str, str] = field(default_factory=dict)


_VALIDATORS: dict[str, Any] = {}


def validate_json(value: Any, schema: Mapping[str, Any]) -> None:
    """What `jsonschema.validate` does (raises the best-matching error), with a checked validator
    kept per schema: re-checking the schema on every call cost more than the rest of storing an output."""
    key = json.dumps(schema, sort_keys=True)
    validator = _VALIDATORS.get(key)
    if validator is None:
        schema = copy.deepcopy(dict(schema))  # key order kept: it decides which error is reported
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
        validator = _VALIDATORS[key] = validator_class(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is not None:
        raise error
