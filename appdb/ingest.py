"""Ingest job postings from JSONL or CSV into the application database.

Every row is validated on its own: a bad row is reported with file:line and the
reason, the good rows go in, all in one transaction (nothing half-written if the
database itself fails). Postings are upserted by key: an unchanged posting changes
nothing; a changed one gets a new content hash, which makes its outputs stale.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from appdb.merge_upsert import MergeFunction, merge_with_stored
from appdb.models import KEY_LENGTH, Posting, utcnow

REQUIRED_FIELDS = ("key", "title", "description")
OPTIONAL_TEXT_FIELDS = ("company", "location", "url")
POSTING_FIELDS = (*REQUIRED_FIELDS, *OPTIONAL_TEXT_FIELDS, "posted_at")
# Dagster partition keys may not contain these (and ',' breaks partition selections in the UI).
FORBIDDEN_KEY_SUBSTRINGS = ("...", ",", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")
_LOOKUP_CHUNK = 500
MAX_CSV_FIELD = 64 * 1024 * 1024


class RowError(ValueError):
    """A row that cannot be ingested; the message says why."""


@dataclass(frozen=True)
class Rejection:
    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass
class IngestReport:
    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return len(self.inserted) + len(self.updated) + len(self.unchanged)

    def summary(self) -> str:
        return (
            f"{len(self.inserted)} new, {len(self.updated)} updated (their outputs are now stale), "
            f"{len(self.unchanged)} unchanged, {len(self.rejected)} rejected"
        )


@dataclass(frozen=True)
class _Row:
    line: int
    fields: dict[str, Any] | None
    error: str | None = None


def content_hash(posting: dict[str, Any]) -> str:
    """Hash of every posting field: any change makes the posting's outputs stale."""
    canonical = {name: posting.get(name) for name in POSTING_FIELDS}
    if isinstance(canonical["posted_at"], datetime):
        canonical["posted_at"] = canonical["posted_at"].isoformat()
    encoded = json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


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
    key = str(key).strip()
    if not key:
        raise RowError("missing 'key'")
    if len(key) > KEY_LENGTH:
        raise RowError(f"'key' is longer than {KEY_LENGTH} characters")
    bad = [s for s in FORBIDDEN_KEY_SUBSTRINGS if s in key]
    if bad:
        raise RowError(f"'key' may not contain {bad[0]!r} (it becomes a Dagster partition key)")
    clean["key"] = key
    for name in ("title", "description"):
        value = raw.get(name)
        if value is None or (isinstance(value, str) and not value.strip()):
            raise RowError(f"missing '{name}'")
        if not isinstance(value, str):
            raise RowError(f"'{name}' must be text, got {type(value).__name__}")
        clean[name] = value.strip()
    for name in OPTIONAL_TEXT_FIELDS:
        value = raw.get(name)
        if value is not None and not isinstance(value, str):
            raise RowError(f"'{name}' must be text, got {type(value).__name__}")
        clean[name] = value.strip() or None if isinstance(value, str) else None
    clean["posted_at"] = _parse_posted_at(raw.get("posted_at"))
    for name, value in clean.items():
        if isinstance(value, str) and "\x00" in value:
            raise RowError(f"'{name}' contains a NUL character")
        if isinstance(value, str) and _has_surrogates(value):  # e.g. JSON "\ud800": not storable text
            raise RowError(f"'{name}' contains an unpaired surrogate (not valid Unicode)")
    return clean


def _parse_posted_at(value: Any) -> datetime | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise RowError(f"'posted_at' must be an ISO date text, got {type(value).__name__}")
    text = value.strip().replace("Z", "+00:00")
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


def read_rows(path: Path) -> Iterator[_Row]:
    """Read JSONL (.jsonl/.ndjson/.json) or CSV (.csv) records with their line numbers."""
    data = path.read_bytes()
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        yield from _read_jsonl(data)
    elif suffix == ".csv":
        yield from _read_csv(data)
    else:
        raise ValueError(f"{path}: unsupported file type {suffix!r}: use .jsonl or .csv")


def _read_jsonl(data: bytes) -> Iterator[_Row]:
    for number, raw_line in enumerate(data.splitlines(), start=1):
        try:
            line = raw_line.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as exc:
            yield _Row(number, None, f"invalid UTF-8 at byte {exc.start}")
            continue
        if not line.strip():
            continue
        try:
            yield _Row(number, json.loads(line))
        except json.JSONDecodeError as exc:
            yield _Row(number, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
        except RecursionError:
            yield _Row(number, None, "invalid JSON: nested too deeply")
        except ValueError as exc:  # a number with more digits than Python converts
            yield _Row(number, None, f"invalid JSON: {str(exc).split(';')[0]}")


def _read_csv(data: bytes) -> Iterator[_Row]:
    # surrogateescape keeps undecodable bytes visible per record instead of failing the file.
    text = data.decode("utf-8", errors="surrogateescape").lstrip("\ufeff")
    csv.field_size_limit(MAX_CSV_FIELD)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        if reader.fieldnames is None:
            return
    except csv.Error as exc:
        yield _Row(1, None, f"unreadable CSV header: {exc}")
        return
    missing = [name for name in REQUIRED_FIELDS if name not in reader.fieldnames]
    start_line = reader.line_num + 1
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # the rest of the file cannot be parsed reliably
            yield _Row(start_line, None, f"unreadable CSV from here on: {exc}")
            return
        line = start_line
        start_line = reader.line_num + 1
        if None in record:
            yield _Row(line, None, "more fields than the header has")
            continue
        values = [value for value in record.values() if value is not None]
        if any(_has_surrogates(value) for value in values):
            yield _Row(line, None, "invalid UTF-8")
            continue
        if missing:
            yield _Row(line, None, f"the header has no column {missing[0]!r}")
            continue
        yield _Row(line, {name: (value if value != "" else None) for name, value in record.items()})


def _has_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def ingest_files(session: Session, paths: Iterable[Path], merge: MergeFunction | None = None) -> IngestReport:
    """Validate and upsert every file's rows in the caller's transaction; `merge(stored, incoming)`
    decides the fields of a posting already stored (default: the incoming row replaces it)."""
    report = IngestReport()
    for path in paths:
        _ingest_file(session, Path(path), report, merge)
    return report


def _ingest_file(
    session: Session, path: Path, report: IngestReport, merge: MergeFunction | None = None
) -> None:
    good: dict[str, dict[str, Any]] = {}
    first_line: dict[str, int] = {}
    for row in read_rows(path):
        if row.error is not None:
            report.rejected.append(Rejection(str(path), row.line, row.error))
            continue
        try:
            clean = validate_row(row.fields)
        except RowError as exc:
            report.rejected.append(Rejection(str(path), row.line, str(exc)))
            continue
        key = clean["key"]
        if key in good:
            report.rejected.append(
                Rejection(
                    str(path), row.line, f"duplicate key {key!r} (first at line {first_line[key]}, kept)"
                )
            )
            continue
        good[key] = clean
        first_line[key] = row.line
    rows = list(good.values())
    if merge is not None:  # the domain's merge strategy (domain/core/merge.py) instead of replacing
        rows = merge_with_stored(session, Posting, rows, merge)
    _upsert(session, rows, report)


def _upsert(session: Session, postings: list[dict[str, Any]], report: IngestReport) -> None:
    now = utcnow()
    existing: dict[str, str] = {}
    keys = [posting["key"] for posting in postings]
    for start in range(0, len(keys), _LOOKUP_CHUNK):
        chunk = keys[start : start + _LOOKUP_CHUNK]
        existing.update(
            session.execute(select(Posting.key, Posting.content_hash).where(Posting.key.in_(chunk))).all()
        )
    new_rows = []
    for posting in postings:
        digest = content_hash(posting)
        old = existing.get(posting["key"])
        if old is None:
            new_rows.append({**posting, "content_hash": digest, "ingested_at": now, "updated_at": now})
            report.inserted.append(posting["key"])
        elif old == digest:
            report.unchanged.append(posting["key"])
        else:
            session.execute(
                update(Posting)
                .where(Posting.key == posting["key"])
                .values(**posting, content_hash=digest, updated_at=now)
            )
            report.updated.append(posting["key"])
    if new_rows:
        session.execute(insert(Posting), new_rows)
