"""The autodo commands' logic over a session: scan (read, match, record, write anchors back) and the
item commands, with their rules (known priorities, no dependency cycles)."""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.orm import Session

from plugins.autodo import autodo_store as store
from plugins.autodo.autodo_kind import AUTODO_MERGE
from plugins.autodo.identity import KnownItem, Match, match_items, next_key_number
from plugins.autodo.planning import (
    PRIORITIES,
    STALE_AFTER_SCANS,
    DependencyError,
    PlanItem,
    check_dependency,
)
from plugins.autodo.scanner import MAX_FILE_BYTES, Problem, ScanResult, scan_paths


@dataclass
class ScanOutcome:
    record: store.ScanRecord
    problems: list[Problem]
    matches: list[Match]
    anchors_written: list[str] = field(default_factory=list)


class AutodoError(ValueError):
    """A command that cannot be done as asked (unknown item, bad priority, a cycle)."""


def scan(
    session: Session,
    paths: Sequence[Path],
    root: Path,
    *,
    write_anchors: bool = False,
    max_bytes: int = MAX_FILE_BYTES,
    follow_symlinks: bool = False,
) -> ScanOutcome:
    """Scan, match every item to its stored identity, record it; optionally write anchors back."""
    result: ScanResult = scan_paths(paths, root, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    stored = store.stored_items(session)
    known = [KnownItem(i.key, i.file, i.fingerprint, i.text) for i in stored.values()]
    matches = match_items(result.items, known)
    seen = {
        m.key: {
            "text": m.item.text,
            "file": m.item.file,
            "line": m.item.line,
            "heading": m.item.heading,
            "marker": m.item.marker,
            "fingerprint": m.item.fingerprint,
            "anchor": m.item.anchor,
            "checked": m.item.checked,
            "root": str(root.resolve()),  # where `autodo_context` searches for the item's code
        }
        for m in matches
    }
    prefixes = [_relative(Path(path), root) for path in paths]
    record = store.record_scan(
        session,
        seen,
        # an item in a directory or file the scan could not read was not looked for: it is not missing
        in_scope=lambda file: _under(file, prefixes) and not _under(file, result.unread),
        merge=AUTODO_MERGE,
        stale_after=STALE_AFTER_SCANS,
    )
    outcome = ScanOutcome(record, result.problems, matches)
    if write_anchors:
        outcome.anchors_written = _write_anchors(matches, root, outcome.problems)
    return outcome


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _under(file: str, prefixes: Sequence[str]) -> bool:
    return any(p in ("", ".") or file == p or file.startswith(p.rstrip("/") + "/") for p in prefixes)


def _write_anchors(matches: Sequence[Match], root: Path, problems: list[Problem]) -> list[str]:
    """Append ``<!-- TODO:KEY -->`` to each matched line that has no anchor yet (if the line still
    holds the item's text)."""
    by_file: dict[str, list[Match]] = {}
    for match in matches:
        if match.item.anchor is None:
            by_file.setdefault(match.item.file, []).append(match)
    written = []
    for file, file_matches in by_file.items():
        path = Path(file) if Path(file).is_absolute() else root / file
        try:
            lines = path.read_bytes().decode("utf-8").splitlines(keepends=True)  # CRLF kept
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(file, 0, f"anchors not written: {exc}"))
            continue
        anchored: list[str] = []
        for match in file_matches:
            index = match.item.line - 1
            if index >= len(lines) or _words(match.item.text)[:40] not in _words(lines[index]):
                problems.append(Problem(file, match.item.line, "the line changed since the scan: no anchor"))
                continue
            body = lines[index].rstrip("\r\n")
            ending = lines[index][len(body) :]
            closing = body.endswith("*/")
            if closing:
                body = body[:-2].rstrip()
            lines[index] = f"{body} <!-- TODO:{match.key} -->{' */' if closing else ''}{ending}"
            anchored.append(match.key)
        if not anchored:
            continue
        try:
            _replace_text(path, "".join(lines))
        except OSError as exc:
            problems.append(Problem(file, 0, f"anchors not written: {exc}"))
            continue
        written += anchored
    return written


def _words(text: str) -> str:
    """The text's words alone: an item's text is the line without its Markdown (`- **Merge**: x` is
    the item "Merge: x"), so the two are compared word for word."""
    return " ".join(re.findall(r"\w+", text))


def _replace_text(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path` (same mode), then rename it over `path`: an
    interrupted or failed write leaves the user's file as it was, never half-written."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".autodo")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, stat.S_IMODE(path.stat().st_mode))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def plan_items(session: Session) -> dict[str, PlanItem]:
    return {
        key: PlanItem(
            key,
            i.text,
            i.status,
            i.priority,
            i.created_at,
            i.parent,
            tuple(d for d, _ in i.depends_on),
            i.file,
            i.line,
        )
        for key, i in store.stored_items(session).items()
    }


def require(session: Session, key: str) -> store.StoredItem:
    found = store.stored_items(session, [key])
    if key not in found:
        raise AutodoError(f"no item {key} (`pipeline autodo list` shows them)")
    return found[key]


def set_priority(session: Session, key: str, priority: str) -> None:
    priority = priority.upper()
    if priority not in PRIORITIES:
        raise AutodoError(f"priority must be one of {', '.join(PRIORITIES)}, not {priority!r}")
    require(session, key)
    store.set_priority(session, key, priority)


def split(session: Session, key: str, texts: Sequence[str]) -> list[str]:
    """Children of `key`, one per text; the parent waits for them (`pick` skips it until they close)."""
    require(session, key)
    texts = [text.strip() for text in texts if text.strip()]
    if not texts:
        raise AutodoError("split needs the children's texts")
    first = next_key_number(store.all_keys(session))
    return store.add_children(session, key, {f"WI-{first + n:03d}": text for n, text in enumerate(texts)})


def depend(session: Session, key: str, other: str, reason: str) -> None:
    try:
        check_dependency(plan_items(session), key, other)
    except DependencyError as exc:
        raise AutodoError(str(exc)) from None
    store.add_dependency(session, key, other, reason)
