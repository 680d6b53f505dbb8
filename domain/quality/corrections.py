"""What a reviewer's correction is made of, and what a use case's correction hooks get.

A use case declares the corrections it accepts as `ReviewEdit`s: the options of `pipeline review
correct` that make one (`--summary TEXT`, `--add-skill M`), and the hook that applies them,
`apply(output, Edits, CorrectionContext) -> corrected output`, raising `CorrectionError` when it cannot.
The review logic (`review_actions.py`) stays generic: it refuses an option no hook of the item's use case
takes, then checks the result against the schema and the blocking checks. The command line offers the
options every declared use case accepts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


class CorrectionError(ValueError):
    """A correction that cannot be made (names the item and why)."""


@dataclass(frozen=True)
class EditOption:
    """One option of `pipeline review correct`: `--<name> VALUE`, given once or (`repeatable`) many times."""

    name: str
    help: str
    repeatable: bool = False
    metavar: str = "TEXT"

    @property
    def flag(self) -> str:
        return f"--{self.name}"


@dataclass(frozen=True)
class Edits:
    """What `pipeline review correct` changes: each option given, with its values in order."""

    values: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def all(self, name: str) -> list[str]:
        return list(self.values.get(name) or ())

    def one(self, name: str) -> str | None:
        given = self.all(name)
        return given[-1] if given else None

    @property
    def names(self) -> list[str]:
        """The options given, in a fixed order (as declared by the command line)."""
        return [name for name, given in self.values.items() if given]

    @property
    def empty(self) -> bool:
        return not self.names

    def describe(self) -> str:
        """The options as they were given on the command line (recorded with the delivered value)."""
        return " ".join(
            f"--{name} {json.dumps(value, ensure_ascii=False)}"
            for name in self.names
            for value in self.all(name)
        )


@dataclass(frozen=True)
class CorrectionContext:
    """What a correction hook may need: the subject's fields, where the correction is (for messages), and
    the open session (a hook that checks a value against the plugin's own tables queries through it)."""

    subject: Mapping[str, Any]
    where: str
    session: Any = None


@dataclass(frozen=True)
class ReviewEdit:
    """A kind of correction a use case accepts: the options that make it and the hook that applies them."""

    options: tuple[EditOption, ...]
    apply: Callable[[dict[str, Any], Edits, CorrectionContext], dict[str, Any]]

    @property
    def option_names(self) -> set[str]:
        return {option.name for option in self.options}


def edit_options(review_edits: Iterable[ReviewEdit]) -> list[EditOption]:
    """The options these corrections take, each once, in the order declared."""
    seen: dict[str, EditOption] = {}
    for edit in review_edits:
        for option in edit.options:
            seen.setdefault(option.name, option)
    return list(seen.values())


def flags(options: Iterable[EditOption]) -> str:
    return ", ".join(option.flag for option in options) or "none"
