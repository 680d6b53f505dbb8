"""autodo items as a kind of subject: kept in the engine's `subjects` table, their fields in its content."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appdb.subject_tables import shared_subject_table
from domain.core.merge import merge_fields
from domain.language.subject_kinds import SubjectKind

KIND = "autodo"
AUTODO_VARIABLES = ("key", "text", "file", "heading", "marker", "root")


def describe_item(item: Mapping[str, Any]) -> str:
    """An item as a judge reads it: where it is, then its text."""
    where = " > ".join(str(item[name]) for name in ("file", "heading") if item.get(name))
    return f"{where}: {item.get('text') or ''}" if where else str(item.get("text") or "")


AUTODO = SubjectKind(
    name=KIND,
    noun="autodo item",
    variables=AUTODO_VARIABLES,
    table=shared_subject_table(KIND, label_field="text"),
    describe=describe_item,
)
# A re-scan brings the item's current text and place; nothing else is kept in the subject.
AUTODO_MERGE = merge_fields({}, default="new")
