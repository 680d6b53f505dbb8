"""Where each kind's subjects are stored: the one place the engine's statements learn a kind's table.

A subject is a kind, a key, its fields and a content hash. A plugin says where its kind's subjects live
with a `SubjectTable`: a table of its own with `id`, `key`, `content_hash` and `updated_at` columns (the
postings plugin keeps its `postings` table), or the engine's shared `subjects` table, where every other
kind keeps its rows (`shared_subject_table(kind)`: `content` holds the fields). Discovery, a run's
inputs, retirement, reviews and the command line read subjects only through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from appdb.dialects import CHUNK
from appdb.models import Subject


@dataclass(frozen=True)
class SubjectTable:
    """The table of one kind's subjects. `model` is its mapped class (columns `id`, `key`,
    `content_hash`, `updated_at`); `fields(row)` is a row's fields as templates and checks see them;
    `shared`: the table holds other kinds too, told apart by its `kind` column; `label_field`: the field
    that names a subject in one line (a posting's title), shown beside its key in listings."""

    kind: str
    model: Any
    fields: Callable[[Any], dict[str, Any]]
    shared: bool = False
    label_field: str | None = None

    def of_kind(self) -> list[ColumnElement[bool]]:
        """The condition that keeps this kind's rows of the table."""
        return [self.model.kind == self.kind] if self.shared else []

    def rows(self, session: Session, keys: Sequence[str]) -> dict[str, Any]:
        """The rows of those of `keys` that are stored, by key."""
        found: dict[str, Any] = {}
        for start in range(0, len(keys), CHUNK):
            chunk = list(keys[start : start + CHUNK])
            query = select(self.model).where(*self.of_kind(), self.model.key.in_(chunk))
            found.update((row.key, row) for row in session.scalars(query))
        return found

    def read(self, session: Session, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Each stored subject's fields, with its `content_hash`, by key."""
        return {
            key: {**self.fields(row), "content_hash": row.content_hash}
            for key, row in self.rows(session, keys).items()
        }

    def get(self, session: Session, key: str) -> Any:
        """One subject's row, or None."""
        return session.scalar(select(self.model).where(*self.of_kind(), self.model.key == key))

    def content_hashes(self, session: Session, keys: Sequence[str]) -> dict[str, str]:
        hashes: dict[str, str] = {}
        for start in range(0, len(keys), CHUNK):
            chunk = list(keys[start : start + CHUNK])
            query = select(self.model.key, self.model.content_hash).where(
                *self.of_kind(), self.model.key.in_(chunk)
            )
            hashes.update((key, digest) for key, digest in session.execute(query))
        return hashes

    def keys(self, session: Session) -> list[str]:
        """Every subject's key, in the order they were first stored."""
        return list(session.scalars(select(self.model.key).where(*self.of_kind()).order_by(self.model.id)))

    def count(self, session: Session) -> int:
        return session.scalar(select(func.count(self.model.id)).where(*self.of_kind())) or 0

    def latest_update(self, session: Session) -> Any:
        """When a subject of this kind last changed (None with none)."""
        return session.scalar(select(func.max(self.model.updated_at)).where(*self.of_kind()))

    def labels(self, session: Session, keys: Sequence[str]) -> dict[str, str]:
        """Each subject's one-line label (its `label_field`), by key; empty without a label field."""
        if self.label_field is None:
            return {}
        return {
            key: str(fields.get(self.label_field) or "")
            for key, fields in self.read(session, list(dict.fromkeys(keys))).items()
        }

    def arrival_columns(self) -> list[Any]:
        """Scalar subqueries that move when a subject arrives or changes (the daemon's wake-up marker)."""
        return [
            select(func.max(self.model.id)).where(*self.of_kind()).scalar_subquery(),
            select(func.max(self.model.updated_at)).where(*self.of_kind()).scalar_subquery(),
        ]

    def change_columns(self) -> list[Any]:
        """Scalar subqueries that move when a subject arrives, changes or goes (a sensor's change marker)."""
        return [
            select(func.count(self.model.id)).where(*self.of_kind()).scalar_subquery(),
            select(func.max(self.model.updated_at)).where(*self.of_kind()).scalar_subquery(),
        ]


def _content_fields(row: Subject) -> dict[str, Any]:
    return {"key": row.key, **(row.content or {})}


def shared_subject_table(kind: str, label_field: str | None = None) -> SubjectTable:
    """The table of a kind that keeps its subjects in the engine's `subjects` table."""
    return SubjectTable(kind, Subject, _content_fields, shared=True, label_field=label_field)
