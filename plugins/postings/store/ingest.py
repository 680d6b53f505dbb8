"""Ingest job postings from JSONL or CSV into the application database.

Every row is validated on its own: a bad row is reported with file:line (or file:first-last for a
record over several lines) and the reason, the good rows go in. Files are streamed: records are read,
validated and written `BATCH_ROWS` at a time, so memory stays bounded whatever the file's size, and
all of it happens in the caller's one transaction (nothing half-written if the database or the process
dies; a kill -9 leaves the database as it was). Postings are upserted by key: an unchanged posting
changes nothing; a changed one gets a new content hash, which makes its outputs stale. The rules for
limits and duplicates are in docs/ingest.md.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Session

from appdb.dialects import CHUNK
from appdb.merge_upsert import MergeFunction, merge_with_stored
from appdb.models import KEY_LENGTH, utcnow
from domain.core import progress
from plugins.postings.store.ingest_reader import FIELD_LIMITS, read_records
from plugins.postings.store.tables import Posting

REQUIRED_FIELDS = ("key", "title", "description")
OPTIONAL_TEXT_FIELDS = ("company", "location", "url")
POSTING_FIELDS = (*REQUIRED_FIELDS, *OPTIONAL_TEXT_FIELDS, "posted_at")
# Dagster partition keys may not contain these (and ',' breaks partition selections in the UI).
FORBIDDEN_KEY_SUBSTRINGS = ("...", ",", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")
ASCII_WHITESPACE = " \t\n\r\f\v"
"""Stripped from a key's ends; any other space-like character (U+0085, U+2028, U+3000) is refused."""
# Characters a reader cannot see or that change how text around them reads: a key holding one looks
# like another key, or rewrites the terminal that prints it. Plain space (U+0020) is the one allowed.
_CATEGORY_NAMES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Cs": "a lone surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
    "Zs": "a space other than ' '",
}
BATCH_ROWS = 2_000
"""Postings validated, looked up and written together: bounds memory, and makes writes set-based."""
PROGRESS_RECORDS = 1_000  # records read between two progress updates
REJECTIONS_KEPT = 1_000
"""Rejections an `IngestReport` keeps (the first ones); the rest are counted and handed to the caller's
`on_rejection` as they are found, never all held: 3,000,000 bad lines took 795 MB when they were."""

# Per-ingest scratch tables (TEMPORARY: private to the connection, gone with it; created and dropped in
# the caller's transaction, so a rolled-back ingest leaves nothing behind).
_scratch = MetaData()
_SEEN = Table(
    "ingest_seen_keys",
    _scratch,
    Column("key", String(KEY_LENGTH), primary_key=True),
    Column("file_index", Integer, nullable=False),
    Column("line", Integer, nullable=False),
    prefixes=["TEMPORARY"],
)
_CHANGED = Table(
    "ingest_changed_postings",
    _scratch,
    Column("key", String(KEY_LENGTH), primary_key=True),
    *(Column(name, Text) for name in ("title", "company", "location", "description", "url")),
    Column("posted_at", DateTime),
    Column("content_hash", String(64)),
    Column("updated_at", DateTime),
    prefixes=["TEMPORARY"],
)
_POSTINGS = Posting.__table__


class RowError(ValueError):
    """A row that cannot be ingested; the message says why."""


@dataclass(frozen=True)
class Rejection:
    file: str
    line: int
    reason: str
    last_line: int | None = None
    """The record's last physical line when it spans several (a CSV record over lines)."""

    def __str__(self) -> str:
        lines = (
            f"{self.line}-{self.last_line}" if self.last_line and self.last_line > self.line else self.line
        )
        return f"{self.file}:{lines}: {self.reason}"


RejectionHandler = Callable[[Rejection], None]


@dataclass
class IngestReport:
    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    """The first `REJECTIONS_KEPT` rejections, in file and line order; `rejected_count` counts them all."""
    rejected_count: int = 0

    @property
    def accepted(self) -> int:
        return len(self.inserted) + len(self.updated) + len(self.unchanged)

    def reject(self, rejection: Rejection, on_rejection: RejectionHandler | None) -> None:
        """Count a rejection, keep it if the sample has room, and hand it to `on_rejection`."""
        self.rejected_count += 1
        if len(self.rejected) < REJECTIONS_KEPT:
            self.rejected.append(rejection)
        if on_rejection is not None:
            on_rejection(rejection)

    def summary(self) -> str:
        return (
            f"{len(self.inserted)} new, {len(self.updated)} updated (their outputs are now stale), "
            f"{len(self.unchanged)} unchanged, {self.rejected_count} rejected"
        )


def content_hash(posting: dict[str, Any]) -> str:
    """Hash of every posting field: any change makes the posting's outputs stale."""
    canonical = {name: posting.get(name) for name in POSTING_FIELDS}
    if isinstance(canonical["posted_at"], datetime):
        canonical["posted_at"] = canonical["posted_at"].isoformat()
    encoded = json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


def _invisible_character(key: str) -> str | None:
    """The first character of `key` in a refused Unicode category (`_CATEGORY_NAMES`), or None."""
    for character in key:
        if character != " " and unicodedata.category(character) in _CATEGORY_NAMES:
            return character
    return None


def validate_row(raw: Any) -> dict[str, Any]:
    """Turn one raw record into clean posting fields, or raise RowError saying why not."""
    if not isinstance(raw, dict):
        raise RowError(f"expected an object with posting fields, got {type(raw).__name__}")
    clean: dict[str, Any] = {}
    key = raw.get("key")
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise RowError(
            "missing 'key'" if key in (None, "") else f"'key' must be text, got {type(key).__name__}"
        )
    key = str(key).strip(ASCII_WHITESPACE)
    if not key:
        raise RowError("missing 'key'")
    _check_length("key", key)
    if key.startswith("-"):
        raise RowError("'key' may not start with '-' (a command line would read it as an option)")
    bad = [s for s in FORBIDDEN_KEY_SUBSTRINGS if s in key]
    if bad:
        raise RowError(f"'key' may not contain {bad[0]!r} (it becomes a Dagster partition key)")
    invisible = _invisible_character(key)
    if invisible is not None:
        raise RowError(
            f"'key' may not contain {invisible!r} (U+{ord(invisible):04X}, "
            f"{_CATEGORY_NAMES[unicodedata.category(invisible)]}): a key is typed, printed and matched "
            "as it reads"
        )
    clean["key"] = key
    for name in ("title", "description"):
        value = raw.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise RowError(f"missing '{name}'")
        if not isinstance(value, str):
            raise RowError(f"'{name}' must be text, got {type(value).__name__}")
        clean[name] = _check_length(name, value.strip())
    for name in OPTIONAL_TEXT_FIELDS:
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise RowError(f"'{name}' must be text, got {type(value).__name__}")
        clean[name] = _check_length(name, value.strip()) or None if isinstance(value, str) else None
    clean["posted_at"] = _parse_posted_at(raw.get("posted_at"))
    for name, value in clean.items():
        if isinstance(value, str) and "\x00" in value:
            raise RowError(f"'{name}' contains a NUL character")
        if isinstance(value, str) and _has_surrogates(value):  # e.g. JSON "\ud800": not storable text
            raise RowError(f"'{name}' contains an unpaired surrogate (not valid Unicode)")
    return clean


def _check_length(name: str, value: str) -> str:
    """`value`, or a RowError naming the field and its limit (docs/ingest.md: a 5 MB title made
    10 MB prompts; the limits keep every field to what a posting can need)."""
    limit = FIELD_LIMITS[name]
    if len(value) > limit:
        raise RowError(f"'{name}' is {len(value):,} characters long; the limit is {limit:,}")
    return value


def _parse_posted_at(value: Any) -> datetime | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise RowError(f"'posted_at' must be an ISO date text, got {type(value).__name__}")
    text = _check_length("posted_at", value.strip()).replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            parsed = datetime.combine(date.fromisoformat(text), datetime.min.time())
        except ValueError:
            raise RowError(f"'posted_at' is not an ISO date: {value!r}") from None
    if parsed.tzinfo is not None:
        try:
            parsed = parsed.astimezone(UTC).replace(tzinfo=None)
        except OverflowError:  # e.g. 0001-01-01T00:00+01:00 is before year 1 in UTC
            raise RowError(f"'posted_at' is out of range in UTC: {value!r}") from None
    return parsed


def _has_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def ingest_files(
    session: Session,
    paths: Iterable[Path],
    merge: MergeFunction | None = None,
    on_rejection: RejectionHandler | None = None,
) -> IngestReport:
    """Validate and upsert every file's rows in the caller's transaction; `merge(stored, incoming)`
    decides the fields of a posting already stored (default: the incoming row replaces it);
    `on_rejection` gets every rejection as it is found, in file and line order (the report keeps a
    bounded sample and the count).

    A key met again within the same ingest (same file or another) is rejected, naming where it was
    first seen; that first row is kept (docs/ingest.md)."""
    report = IngestReport()
    connection = session.connection()
    for table in (_SEEN, _CHANGED):
        table.create(connection, checkfirst=True)
        session.execute(delete(table))
    files = [Path(path) for path in paths]
    # The files' lines, counted only when a terminal shows the progress (one quick pass in binary)
    line_counts = [_count_lines(path) for path in files] if progress.watched() else None
    with progress.progress_task("ingest", sum(line_counts) if line_counts else None, "lines") as task:
        for index in range(len(files)):
            before = task.done
            last_line = _ingest_file(session, files, index, report, merge, task, on_rejection)
            task.update(before + (line_counts[index] if line_counts else last_line))
    for table in (_CHANGED, _SEEN):
        table.drop(connection)
    return report


def _count_lines(path: Path) -> int:
    """The lines of a file (a last line without a newline counts), read in binary blocks."""
    lines, last = 0, b"\n"
    try:
        with path.open("rb") as handle:
            while block := handle.read(1 << 20):
                lines += block.count(b"\n")
                last = block[-1:]
    except OSError:
        return 0  # the ingest itself says what is wrong with the file
    return lines + (last != b"\n")


def _ingest_file(
    session: Session,
    files: Sequence[Path],
    index: int,
    report: IngestReport,
    merge: MergeFunction | None,
    task: progress.ProgressTask,
    on_rejection: RejectionHandler | None,
) -> int:
    """Ingest one file; the number of its last line read.

    Rejections wait in `held` until the batch they may interleave with is written (a duplicate of an
    earlier batch is found only then), and are reported sorted by line; a batch is written when it
    is full or when `BATCH_ROWS` rejections wait behind it, so a file of bad lines holds no more."""
    path = files[index]
    held: list[Rejection] = []
    batch: dict[str, tuple[dict[str, Any], int]] = {}
    lines_before, last_line = task.done, 0

    def write_and_report() -> None:
        nonlocal batch
        if batch:
            _write_batch(session, files, index, batch, report, held, merge)
            batch = {}
        for rejection in sorted(held, key=lambda rejection: rejection.line):
            report.reject(rejection, on_rejection)
        held.clear()

    for number, record in enumerate(read_records(path), 1):
        last_line = record.last_line
        if number % PROGRESS_RECORDS == 0:
            task.update(lines_before + last_line)
        if record.error is not None or record.fields is None:
            held.append(Rejection(str(path), record.line, record.error or "empty", record.last_line))
        else:
            try:
                clean = validate_row(record.fields)
            except RowError as exc:
                held.append(Rejection(str(path), record.line, str(exc), record.last_line))
            else:
                key = clean["key"]
                if key in batch:
                    held.append(_duplicate(files, index, record.line, key, index, batch[key][1]))
                else:
                    batch[key] = (clean, record.line)
        if len(batch) >= BATCH_ROWS or len(held) >= BATCH_ROWS:
            write_and_report()
    write_and_report()
    return last_line


def _duplicate(
    files: Sequence[Path], index: int, line: int, key: str, first_index: int, first_line: int
) -> Rejection:
    first = f"line {first_line}" if first_index == index else f"{files[first_index]}:{first_line}"
    return Rejection(str(files[index]), line, f"duplicate key {key!r} (first at {first}, kept)")


def _write_batch(
    session: Session,
    files: Sequence[Path],
    index: int,
    batch: dict[str, tuple[dict[str, Any], int]],
    report: IngestReport,
    rejected: list[Rejection],
    merge: MergeFunction | None,
) -> None:
    """Drop the keys an earlier batch of this ingest had, remember the rest, and upsert them."""
    keys = list(batch)
    for start in range(0, len(keys), CHUNK):
        query = select(_SEEN.c.key, _SEEN.c.file_index, _SEEN.c.line).where(
            _SEEN.c.key.in_(keys[start : start + CHUNK])
        )
        for key, first_index, first_line in session.execute(query):
            rejected.append(_duplicate(files, index, batch.pop(key)[1], key, first_index, first_line))
    if not batch:
        return
    session.execute(
        insert(_SEEN), [{"key": key, "file_index": index, "line": line} for key, (_, line) in batch.items()]
    )
    rows = [clean for clean, _ in batch.values()]
    if merge is not None:  # the domain's merge strategy (domain/core/merge.py) instead of replacing
        rows = merge_with_stored(session, Posting, rows, merge)
    _upsert(session, rows, report)


def _upsert(session: Session, postings: list[dict[str, Any]], report: IngestReport) -> None:
    """Insert the new postings and update the changed ones, each set in one statement (not one per
    row: 100,000 changed postings took 96 s on PostgreSQL row by row)."""
    now = utcnow()
    existing: dict[str, str] = {}
    keys = [posting["key"] for posting in postings]
    for start in range(0, len(keys), CHUNK):
        chunk = keys[start : start + CHUNK]
        existing.update(
            session.execute(
                select(_POSTINGS.c.key, _POSTINGS.c.content_hash).where(_POSTINGS.c.key.in_(chunk))
            ).all()
        )
    new_rows, changed_rows = [], []
    for posting in postings:
        digest = content_hash(posting)
        old = existing.get(posting["key"])
        if old is None:
            new_rows.append({**posting, "content_hash": digest, "ingested_at": now, "updated_at": now})
            report.inserted.append(posting["key"])
        elif old == digest:
            report.unchanged.append(posting["key"])
        else:
            changed_rows.append({**posting, "content_hash": digest, "updated_at": now})
            report.updated.append(posting["key"])
    if new_rows:
        session.execute(insert(_POSTINGS), new_rows)
    if changed_rows:
        session.execute(delete(_CHANGED))
        session.execute(insert(_CHANGED), changed_rows)
        columns = [column.key for column in _CHANGED.columns if column.key != "key"]
        session.execute(
            update(_POSTINGS)
            .where(_POSTINGS.c.key == _CHANGED.c.key)
            .values({name: _CHANGED.c[name] for name in columns})
        )
