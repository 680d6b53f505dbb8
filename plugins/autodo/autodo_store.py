"""autodo's statements: record a scan, and the item commands (status, notes, priority, split, deps).

An item's text and place are its `subjects` row (kind ``autodo``: what the work core runs use cases
on); its autodo state is the `autodo_items` row of the same key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from appdb.merge_upsert import MergeFunction
from appdb.models import Subject, UseCaseOutput, utcnow
from appdb.subjects import upsert_subjects
from plugins.autodo.autodo_kind import KIND
from plugins.autodo.autodo_tables import AutodoDependency, AutodoItem


@dataclass(frozen=True)
class StoredItem:
    key: str
    text: str
    status: str
    priority: str
    parent: str | None
    file: str | None
    line: int | None
    heading: str
    marker: str
    fingerprint: str | None
    anchor: str | None
    notes: tuple[str, ...]
    created_at: Any
    depends_on: tuple[tuple[str, str], ...] = ()  # (key, reason)


@dataclass
class ScanRecord:
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # ticked checkboxes
    reopened: list[str] = field(default_factory=list)  # stale items seen again
    unseen: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)


def stored_items(session: Session, keys: Sequence[str] | None = None) -> dict[str, StoredItem]:
    """Every autodo item (or these), with its text and dependencies."""
    query = select(AutodoItem, Subject.content).join(
        Subject, (Subject.kind == KIND) & (Subject.key == AutodoItem.key)
    )
    if keys is not None:
        query = query.where(AutodoItem.key.in_(list(keys)))
    deps: dict[str, list[tuple[str, str]]] = {}
    for row in session.scalars(select(AutodoDependency).order_by(AutodoDependency.created_at)):
        deps.setdefault(row.item_key, []).append((row.depends_on, row.reason))
    items = {}
    for item, content in session.execute(query.order_by(AutodoItem.created_at, AutodoItem.key)):
        items[item.key] = StoredItem(
            item.key,
            content.get("text", ""),
            item.status,
            item.priority,
            item.parent_key,
            item.file,
            item.line,
            content.get("heading", ""),
            content.get("marker", ""),
            item.fingerprint,
            item.anchor,
            tuple(item.notes or ()),
            item.created_at,
            tuple(deps.get(item.key, ())),
        )
    return items


def record_scan(
    session: Session,
    seen: Mapping[str, Mapping[str, Any]],
    *,
    in_scope: Callable[[str], bool],
    merge: MergeFunction | None = None,
    stale_after: int = 3,
) -> ScanRecord:
    """Store what a scan saw (key -> content with text, file, line, heading, marker, fingerprint,
    anchor, checked) and count a miss for every open item of a scanned file it did not see; the
    `stale_after`-th miss in a row makes the item `stale`."""
    record = ScanRecord()
    now = utcnow()
    contents = {
        key: {name: value.get(name) for name in ("text", "file", "heading", "marker", "root")}
        for key, value in seen.items()
    }
    upserted = upsert_subjects(session, KIND, contents, merge)
    state = {
        row.key: row for row in session.scalars(select(AutodoItem).where(AutodoItem.key.in_(list(seen))))
    }
    for key, value in seen.items():
        fields = {
            "file": value["file"],
            "line": value["line"],
            "fingerprint": value["fingerprint"],
            "anchor": value.get("anchor"),
            "unseen_scans": 0,
            "updated_at": now,
        }
        if key not in state:
            status = "done" if value.get("checked") else "open"
            session.execute(
                insert(AutodoItem).values(
                    key=key,
                    status=status,
                    priority="P2",
                    notes=[],
                    created_at=now,
                    closed_at=now if status == "done" else None,
                    **fields,
                )
            )
            record.new.append(key)
            continue
        current = state[key]
        if value.get("checked") and current.status not in ("done", "wontfix"):
            fields.update(status="done", closed_at=now)
            record.done.append(key)
        elif current.status == "stale":
            fields["status"] = "open"
            record.reopened.append(key)
        session.execute(update(AutodoItem).where(AutodoItem.key == key).values(**fields))
        (record.changed if key in upserted.updated else record.unchanged).append(key)
    missing = session.scalars(
        select(AutodoItem).where(
            AutodoItem.key.not_in(list(seen)) if seen else True,
            AutodoItem.file.is_not(None),
            AutodoItem.status == "open",
        )
    ).all()
    for item in missing:
        if not in_scope(item.file or ""):
            continue
        misses = item.unseen_scans + 1
        values: dict[str, Any] = {"unseen_scans": misses, "updated_at": now}
        if misses >= stale_after:
            values["status"] = "stale"
            record.stale.append(item.key)
        else:
            record.unseen.append(item.key)
        session.execute(update(AutodoItem).where(AutodoItem.key == item.key).values(**values))
    return record


def set_status(session: Session, key: str, status: str) -> bool:
    closed = utcnow() if status in ("done", "wontfix") else None
    result = session.execute(
        update(AutodoItem)
        .where(AutodoItem.key == key)
        .values(status=status, closed_at=closed, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount > 0


def add_note(session: Session, key: str, text: str) -> bool:
    item = session.get(AutodoItem, key)
    if item is None:
        return False
    item.notes = [*(item.notes or []), f"{utcnow():%Y-%m-%d %H:%M} {text}"]
    item.updated_at = utcnow()
    return True


def set_priority(session: Session, key: str, priority: str) -> bool:
    result = session.execute(
        update(AutodoItem)
        .where(AutodoItem.key == key)
        .values(priority=priority, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount > 0


def add_children(session: Session, parent: str, children: Mapping[str, str]) -> list[str]:
    """Split `parent` into children (key -> text), which inherit its priority, file and heading."""
    item = session.get(AutodoItem, parent)
    content = session.scalars(
        select(Subject.content).where(Subject.kind == KIND, Subject.key == parent)
    ).one()
    upsert_subjects(
        session,
        KIND,
        {
            key: {"text": text, "file": None, "heading": content.get("heading", ""), "marker": "split"}
            for key, text in children.items()
        },
    )
    now = utcnow()
    for key in children:
        session.execute(
            insert(AutodoItem).values(
                key=key,
                status="open",
                priority=item.priority,
                parent_key=parent,
                file=None,
                line=None,
                fingerprint=None,
                anchor=None,
                unseen_scans=0,
                notes=[],
                created_at=now,
                updated_at=now,
            )
        )
    return list(children)


def add_dependency(session: Session, key: str, depends_on: str, reason: str) -> None:
    session.execute(
        delete(AutodoDependency).where(
            AutodoDependency.item_key == key, AutodoDependency.depends_on == depends_on
        )
    )
    session.execute(
        insert(AutodoDependency).values(
            item_key=key, depends_on=depends_on, reason=reason, created_at=utcnow()
        )
    )


def all_keys(session: Session) -> list[str]:
    return list(session.scalars(select(AutodoItem.key)))


def outputs_of(session: Session, key: str) -> dict[str, dict[str, Any]]:
    """Every use case's current output for this item (e.g. its scope), by use case."""
    rows = session.scalars(select(UseCaseOutput).where(UseCaseOutput.subject_key == key))
    return {row.use_case: row.value for row in rows}
