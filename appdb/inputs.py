"""What a use case reads for a batch: subjects' fields, upstream outputs, reference data, its own outputs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from appdb.models import ReferenceData, UseCaseOutput
from appdb.subject_tables import SubjectTable

NOT_STATED = "not stated"
"""What a template sees for a field that is missing or empty."""


def load_inputs(
    session: Session, table: SubjectTable, keys: Sequence[str], fields: Sequence[str], upstream: Sequence[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(subjects, values) by key: each stored subject's fields (with its content_hash), and the template
    values: the fields as text ("not stated" when missing or empty; dates as text) plus each upstream use
    case's output under its name."""
    stored = table.read(session, keys)
    subjects = {
        key: {**{name: row.get(name) for name in fields}, "content_hash": row["content_hash"]}
        for key, row in stored.items()
    }
    values = {
        key: {name: _as_value(subject.get(name)) for name in fields} for key, subject in subjects.items()
    }
    if upstream:
        rows = session.scalars(
            select(UseCaseOutput).where(
                UseCaseOutput.use_case.in_(upstream), UseCaseOutput.subject_key.in_(keys)
            )
        )
        for row in rows:
            if row.subject_key in values:
                values[row.subject_key][row.use_case] = row.value
    return subjects, values


def _as_value(value: Any) -> Any:
    if value is None or value == "":
        return NOT_STATED
    if isinstance(value, datetime | date):
        return str(value)
    return value


def existing_outputs(session: Session, use_case: str, keys: Sequence[str]) -> dict[str, UseCaseOutput]:
    """The stored output of each of `keys` that has one."""
    rows = session.scalars(
        select(UseCaseOutput).where(UseCaseOutput.use_case == use_case, UseCaseOutput.subject_key.in_(keys))
    )
    return {row.subject_key: row for row in rows}


def reference_hashes(session: Session, names: Sequence[str]) -> dict[str, str]:
    """The content hash of each named reference data set that is loaded (e.g. the taxonomy)."""
    if not names:
        return {}
    rows = session.scalars(select(ReferenceData).where(ReferenceData.name.in_(names)))
    return {row.name: row.content_hash for row in rows}
