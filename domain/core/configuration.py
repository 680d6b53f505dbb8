"""How a setting is declared: its environment variable, config-file key, default, parser and one line of doc.

Settings are typed dataclasses whose fields are made with `setting(...)`: the core's in
`pipeline_defs/settings.py`, each plugin's section beside the plugin. This module only declares; the
one reader of the environment and the config file is `pipeline_defs/settings.py`, which also writes the
configuration doc (docs/configuration.md) from these declarations.

A default may be a value or a function of the values read before it (`Derived`): the LLM backend is
Ollama when OLLAMA_HOST is set, the Dagster storage pooled on a model server, and so on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MISSING = dataclasses.MISSING


class SettingError(ValueError):
    """A value a setting cannot take; the reader adds the variable's name and where the value came from."""


@dataclass(frozen=True)
class Derived:
    """A default computed from the values read so far (`values`: field name -> value, the core's too)."""

    compute: Callable[[Mapping[str, Any]], Any]
    doc: str


@dataclass(frozen=True)
class Setting:
    """One setting. `parse(text)` turns the environment's (or the config file's) text into the value and
    raises `SettingError` saying what is wrong; `also`: older or other tools' variables read when
    `variable` is unset (OPENAI_API_KEY for PIPELINE_OPENAI_API_KEY). `secret`: never printed."""

    variable: str
    doc: str
    default: Any = None
    parse: Callable[[str], Any] = str
    also: tuple[str, ...] = ()
    secret: bool = False
    example: str = ""

    def default_for(self, values: Mapping[str, Any]) -> Any:
        return self.default.compute(values) if isinstance(self.default, Derived) else self.default

    def describe_default(self) -> str:
        if isinstance(self.default, Derived):
            return self.default.doc
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if self.default in (None, "", ()):
            return "unset"
        if isinstance(self.default, tuple):
            return ",".join(map(str, self.default))
        return str(self.default)


def setting(variable: str, doc: str, default: Any = None, **options: Any) -> Any:
    """A dataclass field declared as a setting (see `Setting`)."""
    declared = Setting(variable, doc, default, **options)
    field_default: Any = None if isinstance(default, Derived) else default
    if isinstance(field_default, list | dict):
        return dataclasses.field(
            default_factory=lambda: type(field_default)(field_default), metadata={"setting": declared}
        )
    return dataclasses.field(default=field_default, metadata={"setting": declared})


def declared_settings(section: type) -> list[tuple[str, Setting]]:
    """(field name, its declaration) of every setting of a section, in declaration order."""
    return [
        (item.name, item.metadata["setting"])
        for item in dataclasses.fields(section)
        if "setting" in item.metadata
    ]


# --- parsers: each says what it expects --------------------------------------------------------


def text(value: str) -> str:
    return value.strip()


def positive_int(value: str) -> int:
    value = value.strip()
    if not value.isdigit() or int(value) < 1:
        raise SettingError(f"must be a positive integer, not {value!r}")
    return int(value)


def whole_number(value: str) -> int:
    value = value.strip()
    if not value.isdigit():
        raise SettingError(f"must be a whole number, not {value!r}")
    return int(value)


def number_between(low: float, high: float, what: str = "a number") -> Callable[[str], float]:
    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not low <= number <= high:  # NaN fails here too
            raise SettingError(f"must be {what} from {low:g} to {high:g}, not {value!r}")
        return number

    return parse


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        value = value.strip()
        if value not in choices:
            raise SettingError(f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    return parse


def on_off(value: str) -> bool:
    value = value.strip().lower()
    if value not in ("on", "off", "true", "false", "1", "0", "yes", "no"):
        raise SettingError(f"must be on or off, not {value!r}")
    return value in ("on", "true", "1", "yes")


def name_list(value: str) -> tuple[str, ...]:
    """Comma-separated names, blanks dropped."""
    return tuple(name.strip() for name in value.split(",") if name.strip())


def name_pairs(value: str) -> tuple[tuple[str, str], ...]:
    """`a=b,c=d` pairs."""
    pairs = []
    for pair in value.split(","):
        if not pair.strip():
            continue
        left, _, right = pair.partition("=")
        if not left.strip() or not right.strip():
            raise SettingError(f"takes name=value pairs, not {pair!r}")
        pairs.append((left.strip(), right.strip()))
    return tuple(pairs)


def json_object(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise SettingError(f"must be a JSON object: {exc}") from None
    if not isinstance(parsed, dict):
        raise SettingError(f"must be a JSON object, not {value!r}")
    return parsed
