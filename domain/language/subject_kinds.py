"""What the engine works on: a kind of subject, as a plugin declares it.

The engine knows a subject as a kind, a key, its fields and a content hash. Everything else about a kind
comes from its plugin through `SubjectKind`: what one is called in messages, the fields its prompts may
name, where its rows are stored, and how a judge or a reviewer reads one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from appdb.subject_tables import SubjectTable


def fields_as_text(subject: Mapping[str, Any]) -> str:
    """A subject as a judge reads it when its kind says nothing better: its fields as JSON."""
    shown = {name: value for name, value in subject.items() if name != "content_hash"}
    return json.dumps(shown, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class SubjectKind:
    """One kind of subject.

    name: the kind, also the name of its Dagster dynamic partitions and of its source asset.
    noun: one subject in messages and descriptions ("posting", "work item"); `plural` adds an "s".
    variables: the fields of a subject that prompts may name (`{title}`).
    table: where its subjects are stored (`appdb.subject_tables`).
    describe: one subject's fields as a judge or a reviewer reads them.
    group_suffix: added to the name of a work group of this kind (`gemma3_270m_autodo`), so a run never
        mixes kinds; "" keeps the bare model name (for the kind a deployment knew first).
    """

    name: str
    noun: str
    variables: tuple[str, ...]
    table: SubjectTable
    describe: Callable[[Mapping[str, Any]], str] = fields_as_text
    group_suffix: str | None = None

    def __post_init__(self) -> None:
        if self.table.kind != self.name:
            raise ValueError(f"kind {self.name}: its table is declared for kind {self.table.kind}")

    @property
    def plural(self) -> str:
        return f"{self.noun}s"

    @property
    def field_kind(self) -> str:
        """How errors name one of its fields: "a posting" (field), "an autodo item" (field)."""
        return f"{'an' if self.noun[:1].lower() in 'aeiou' else 'a'} {self.noun}"

    @property
    def suffix(self) -> str:
        return f"_{self.name}" if self.group_suffix is None else self.group_suffix
