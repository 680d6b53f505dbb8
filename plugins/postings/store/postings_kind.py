"""Postings as a kind of subject: their fields, their table, how a judge reads one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appdb.subject_tables import SubjectTable
from domain.language.subject_kinds import SubjectKind
from plugins.postings.store.tables import Posting

POSTING_VARIABLES = ("key", "title", "company", "location", "description", "url", "posted_at")
"""A posting's fields, as prompts name them (`{title}`) and checks and corrections see them."""


def posting_fields(row: Posting) -> dict[str, Any]:
    return {name: getattr(row, name) for name in POSTING_VARIABLES}


def describe_posting(posting: Mapping[str, Any]) -> str:
    """The posting as a judge reads it: title, company, location, then the text."""
    head = " · ".join(str(posting[name]) for name in ("title", "company", "location") if posting.get(name))
    return f"{head}. {posting.get('description') or ''}"


POSTINGS_TABLE = SubjectTable("postings", Posting, posting_fields, label_field="title")
POSTINGS = SubjectKind(
    name="postings",
    noun="posting",
    variables=POSTING_VARIABLES,
    table=POSTINGS_TABLE,
    describe=describe_posting,
    group_suffix="",  # the first kind: its work groups keep the bare model name (gemma3_270m)
)
