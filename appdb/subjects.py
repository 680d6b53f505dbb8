"""Subjects of kinds other than postings: upsert by (kind, key) through the kind's merge strategy."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from appdb.merge_upsert import MergeFunction
from appdb.models import Subject, utcnow


def subject_hash(content: Mapping[str, Any]) -> str:
    """Hash of a subject's content: any change makes its outputs stale."""
    encoded = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


@dataclass
class SubjectUpsert:
    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def upsert_subjects(
    session: Session, kind: str, contents: Mapping[str, Mapping[str, Any]], merge: MergeFunction | None = None
) -> SubjectUpsert:
    """Store each key's content; a stored subject is merged by `merge(stored, incoming)` (default: replaced).

    `updated_at` moves only when the content hash changes, so an unchanged re-scan makes nothing stale.
    """
    report = SubjectUpsert()
    stored = _contents(session, kind, list(contents)) if merge is not None else {}
    rows = [
        {"key": key, "content": merge(stored.get(key), content) if merge is not None else dict(content)}
        for key, content in contents.items()
    ]
    hashes = _hashes(session, kind, [row["key"] for row in rows])
    now = utcnow()
    for row in rows:
        digest = subject_hash(row["content"])
        if row["key"] not in hashes:
            session.execute(
                insert(Subject).values(
                    kind=kind,
                    key=row["key"],
                    content=row["content"],
                    content_hash=digest,
                    created_at=now,
                    updated_at=now,
                )
            )
            report.inserted.append(row["key"])
        elif hashes[row["key"]] != digest:
            session.execute(
                update(Subject)
                .where(Subject.kind == kind, Subject.key == row["key"])
                .values(content=row["content"], content_hash=digest, updated_at=now)
            )
            report.updated.append(row["key"])
        else:
            report.unchanged.append(row["key"])
    return report


def _hashes(session: Session, kind: str, keys: Sequence[str]) -> dict[str, str]:
    rows = session.execute(
        select(Subject.key, Subject.content_hash).where(Subject.kind == kind, Subject.key.in_(list(keys)))
    )
    return dict(rows.all())


def _contents(session: Session, kind: str, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    rows = session.execute(
        select(Subject.key, Subject.content).where(Subject.kind == kind, Subject.key.in_(list(keys)))
    )
    return {key: dict(content) for key, content in rows}


def subject_contents(session: Session, kind: str, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The content of each of `keys` that is stored, with its content hash under `content_hash`."""
    rows = session.execute(
        select(Subject.key, Subject.content, Subject.content_hash).where(
            Subject.kind == kind, Subject.key.in_(list(keys))
        )
    )
    return {key: {**content, "content_hash": digest} for key, content, digest in rows}


def subject_keys(session: Session, kind: str) -> list[str]:
    return list(session.scalars(select(Subject.key).where(Subject.kind == kind).order_by(Subject.id)))


def subject_count(session: Session, kind: str) -> int:
    return session.scalar(select(func.count(Subject.id)).where(Subject.kind == kind)) or 0
