"""What a use case reads for a batch: posting fields, upstream outputs, reference data, its own outputs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from appdb.discovery import POSTINGS_KIND
from appdb.models import Posting, ReferenceData, Subject, UseCaseOutput

NOT_STATED = "not stated"
"""What a template sees for an optional posting field that is empty."""


def load_posting_inputs(
    session: Session, keys: Sequence[str], fields: Sequence[str], upstream: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(postings, values) by key: the stored fields (with content_hash), and the template values:
    fields as text ("not stated" when empty) plus each upstream use case's output under its name."""
    postings: dict[str, dict[str, Any]] = {}
    for row in session.scalars(select(Posting).where(Posting.key.in_(keys))):
        postings[row.key] = {name: getattr(row, name) for name in fields}
        postings[row.key]["content_hash"] = row.content_hash
    values: dict[str, dict[str, Any]] = {}
    for key, posting in postings.items():
        values[key] = {name: (posting[name] if posting[name] is not None else NOT_STATED) for name in fields}
        if "posted_at" in values[key]:
            values[key]["posted_at"] = str(posting["posted_at"]) if posting["posted_at"] else NOT_STATED
    if upstream:
        rows = session.scalars(
            select(UseCaseOutput).where(
                UseCaseOutput.use_case.in_(upstream), UseCaseOutput.posting_key.in_(keys)
            )
        )
        for row in rows:
            values[row.posting_key][row.use_case] = row.value
    return postings, values


def load_inputs(
    session: Session, kind: str, keys: Sequence[str], fields: Sequence[str], upstream: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """`load_posting_inputs` for any subject kind: postings from their table, other kinds from
    `subjects` (their content's fields, "not stated" when missing or empty)."""
    if kind == POSTINGS_KIND:
        return load_posting_inputs(session, keys, fields, upstream)
    subjects: dict[str, dict[str, Any]] = {}
    rows = session.execute(
        select(Subject.key, Subject.content, Subject.content_hash).where(
            Subject.kind == kind, Subject.key.in_(list(keys))
        )
    )
    for key, content, digest in rows:
        subjects[key] = {"key": key, **{name: content.get(name) for name in fields if name != "key"}}
        subjects[key]["content_hash"] = digest
    values = {
        key: {name: subject[name] if subject.get(name) not in (None, "") else NOT_STATED for name in fields}
        for key, subject in subjects.items()
    }
    if upstream:
        output_rows = session.scalars(
            select(UseCaseOutput).where(
                UseCaseOutput.use_case.in_(upstream), UseCaseOutput.posting_key.in_(keys)
            )
        )
        for row in output_rows:
            if row.posting_key in values:
                values[row.posting_key][row.use_case] = row.value
    return subjects, values


def existing_outputs(session: Session, use_case: str, keys: Sequence[str]) -> dict[str, UseCaseOutput]:
    """The stored output of each of `keys` that has one."""
    rows = session.scalars(
        select(UseCaseOutput).where(UseCaseOutput.use_case == use_case, UseCaseOutput.posting_key.in_(keys))
    )
    return {row.posting_key: row for row in rows}


def reference_hashes(session: Session, names: Sequence[str]) -> dict[str, str]:
    """The content hash of each named reference data set that is loaded (e.g. the taxonomy)."""
    if not names:
        return {}
    rows = session.scalars(select(ReferenceData).where(ReferenceData.name.in_(names)))
    return {row.name: row.content_hash for row in rows}


def posting_keys(session: Session) -> list[str]:
    """Every posting's key, in the order they were first ingested."""
    return list(session.scalars(select(Posting.key).order_by(Posting.id)))


def latest_posting_update(session: Session) -> Any:
    """When a posting last changed (None with no postings)."""
    return session.scalar(select(func.max(Posting.updated_at)))
