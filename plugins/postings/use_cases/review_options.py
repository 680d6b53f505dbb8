"""The options of `pipeline review correct` that the postings' use cases take (a light module: the
command line lists them without loading the use cases)."""

from __future__ import annotations

from domain.quality.corrections import EditOption

SUMMARY = EditOption("summary", "the corrected summary")
ADD_SKILL = EditOption(
    "add-skill",
    "a mention from the posting (repeatable; prefix knowledge: for knowledge)",
    repeatable=True,
    metavar="MENTION",
)
REMOVE_SKILL = EditOption(
    "remove-skill", "a mention to remove (repeatable)", repeatable=True, metavar="MENTION"
)
CONCEPT = EditOption(
    "concept",
    "resolve a mention to a taxonomy concept: its URI, N for the mention's N-th candidate, or `none` "
    "(repeatable)",
    repeatable=True,
    metavar="MENTION=URI|N",
)
POSTINGS_REVIEW_OPTIONS = (SUMMARY, ADD_SKILL, REMOVE_SKILL, CONCEPT)
