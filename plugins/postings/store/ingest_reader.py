"""Stream the records of a JSONL or CSV file with the physical lines each one came from.

Ingest reads files of any size in bounded memory: one physical line (at most `MAX_LINE_CHARS`) and
one record (at most `MAX_CSV_FIELD` per field) at a time, never the whole file. A CSV record that runs
over several lines in a column that cannot hold a line break, or whose quote is never closed, is an
unbalanced quote: it is reported with its line range, and the lines after its first are read again
as records, so one stray quote costs one row instead of silently swallowing the rows after it.
"""

from __future__ import annotations

import csv
import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Column -> the most characters a value may have (after surrounding whitespace is stripped).
# docs/ingest.md explains the figures; the description's bound keeps a 1 MB posting loadable.
FIELD_LIMITS: dict[str, int] = {
    "key": 255,
    "title": 300,
    "company": 300,
    "location": 300,
    "url": 2_048,
    "posted_at": 64,
    "description": 1_000_000,
}
# The only posting column a CSV record may break over lines in (docs/ingest.md).
MULTILINE_COLUMNS = frozenset({"description"})
# One physical line: a JSONL record whose description is escaped (\uXXXX) takes up to 6 characters
# per character; longer lines are rejected without being held in memory.
MAX_LINE_CHARS = 8 * max(FIELD_LIMITS.values())
# A CSV field as long as a line may be: a longer one (over several lines) is a quote that never closes.
# Anything shorter is read, so that the field's own limit can name it.
MAX_CSV_FIELD = MAX_LINE_CHARS
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class RawRecord:
    """One record of a file: its fields (None when unreadable) or why it cannot be read."""

    line: int
    last_line: int
    fields: dict[str, Any] | None
    error: str | None = None


class DuplicateFieldError(ValueError):
    """A JSON object names the same field twice."""


class _OverlongLine(Exception):
    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def read_records(path: Path) -> Iterator[RawRecord]:
    """The records of a JSONL (.jsonl/.ndjson/.json) or CSV (.csv) file, streamed, with their lines.
    A file saved as UTF-16 or UTF-32 is one rejection that says so (`_wide_encoding`)."""
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        records = _read_jsonl(path)
    elif suffix == ".csv":
        records = _read_csv(path)
    else:
        raise ValueError(f"{path}: unsupported file type {suffix!r}: use .jsonl or .csv")
    wide = _wide_encoding(path)
    return (
        records if wide is None else _not_read(f"the file is {wide}: none of it was read; save it as UTF-8")
    )


_UTF32_BOMS = (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SNIFF_BYTES = 4096
_WIDE_PAIRS = 4  # the least bytes pairs of text that tell UTF-16 from UTF-8


def _wide_encoding(path: Path) -> str | None:
    """ "UTF-16 ..." or "UTF-32 ..." (and how it shows) when the file's start is text in one: JSON and
    CSV are mostly ASCII, which UTF-16 writes as a character byte and a NUL, so one byte of each pair
    is often NUL and the other almost never (a file of NULs, or a UTF-8 line that holds one, is not
    UTF-16). A spreadsheet's "Unicode text" is UTF-16: read as UTF-8 each of its lines was rejected
    for a reason that did not say why ("the header has no column 'key'")."""
    try:
        with path.open("rb") as handle:
            start = handle.read(_SNIFF_BYTES)
    except OSError:
        return None  # reading the records says what is wrong with the file
    if start.startswith(_UTF32_BOMS):
        return "UTF-32 (it starts with a UTF-32 byte-order mark)"
    bom = start.startswith(_UTF16_BOMS)
    text = start[2:] if bom else start
    pairs = len(text) // 2
    if pairs < _WIDE_PAIRS:
        return None
    even, odd = text[0 : 2 * pairs : 2].count(0) / pairs, text[1 : 2 * pairs : 2].count(0) / pairs
    if max(even, odd) >= 0.2 and min(even, odd) <= 0.05:
        return (
            "UTF-16 ("
            + ("it starts with a UTF-16 byte-order mark" if bom else "NUL bytes between its characters")
            + ")"
        )
    return None


def _not_read(reason: str) -> Iterator[RawRecord]:
    """A file that is not UTF-8 text: one rejection for all of it (its lines, split as UTF-8, are
    not its lines)."""
    yield RawRecord(1, 1, None, reason)


class _Lines:
    """Physical lines of a text file, numbered from 1, with a push-back queue for re-reading.

    `taken` holds the lines handed out since `start_record()`: the lines of the record being parsed.
    """

    def __init__(self, handle: Any, line_ends: tuple[str, ...] = ("\n", "\r")) -> None:
        self._handle = handle
        self._line_ends = line_ends
        self._number = 0
        self._pushed: deque[tuple[int, str]] = deque()
        self.taken: list[tuple[int, str]] = []
        self.exhausted = False

    def __iter__(self) -> _Lines:
        return self

    def start_record(self) -> None:
        self.taken = []
        self.exhausted = False

    def push_back(self, lines: list[tuple[int, str]]) -> None:
        self._pushed.extendleft(reversed(lines))

    def __next__(self) -> str:
        if self._pushed:
            number, text = self._pushed.popleft()
        else:
            text = self._handle.readline(MAX_LINE_CHARS)
            if not text:
                self.exhausted = True
                raise StopIteration
            self._number += 1
            number = self._number
            if len(text) >= MAX_LINE_CHARS and not text.endswith(self._line_ends):
                self._skip_rest_of_line()
                raise _OverlongLine(number)
            if number == 1:
                text = text.removeprefix("\ufeff")
        self.taken.append((number, text))
        return text

    def _skip_rest_of_line(self) -> None:
        while True:
            piece = self._handle.readline(_READ_CHUNK)
            if not piece or piece.endswith(self._line_ends):
                return


def _open_text(path: Path, newline: str = "") -> Any:
    # surrogateescape keeps undecodable bytes visible per record instead of failing the file;
    # newline="" keeps line ends as they are (the CSV reader needs them inside quoted fields);
    # newline="\n" ends a line at "\n" alone (JSONL: a bare "\r" is inside the record, "\r\n" ends it).
    return path.open(encoding="utf-8", errors="surrogateescape", newline=newline)


def _no_duplicate_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise DuplicateFieldError(f"the field {name!r} appears twice in the object")
        result[name] = value
    return result


def _read_jsonl(path: Path) -> Iterator[RawRecord]:
    """JSONL records, one a line: only "\n" (or "\r\n") ends one, as JSON Lines says; a bare "\r"
    is JSON whitespace between values, and an error inside a string (JSON has no raw control
    characters), never the end of a record."""
    with _open_text(path, newline="\n") as handle:
        lines = _Lines(handle, line_ends=("\n",))
        while True:
            lines.start_record()
            try:
                text = next(lines)
            except StopIteration:
                return
            except _OverlongLine as exc:
                yield RawRecord(
                    exc.number, exc.number, None, f"the line is longer than {MAX_LINE_CHARS:,} characters"
                )
                continue
            record = _parse_json_line(lines.taken[0][0], text)
            if record is not None:
                yield record


def _parse_json_line(number: int, text: str) -> RawRecord | None:
    """The record on one JSONL line; None for a blank line (neither a record nor a rejection)."""
    bad = _first_undecodable(text)
    if bad is not None:
        return RawRecord(number, number, None, f"invalid UTF-8 at byte {bad}")
    if not text.strip():
        return None
    try:
        return RawRecord(number, number, json.loads(text, object_pairs_hook=_no_duplicate_names))
    except json.JSONDecodeError as exc:
        return RawRecord(number, number, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
    except DuplicateFieldError as exc:
        return RawRecord(number, number, None, str(exc))
    except RecursionError:
        return RawRecord(number, number, None, "invalid JSON: nested too deeply")
    except ValueError as exc:  # a number with more digits than Python converts
        return RawRecord(number, number, None, f"invalid JSON: {str(exc).split(';')[0]}")


def _first_undecodable(text: str) -> int | None:
    """Byte offset of the first byte that was not UTF-8 (decoded with surrogateescape), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return len(text[: exc.start].encode("utf-8", errors="surrogateescape"))
    return None


def _read_csv(path: Path) -> Iterator[RawRecord]:
    csv.field_size_limit(MAX_CSV_FIELD)
    with _open_text(path) as handle:
        lines = _Lines(handle)
        reader = csv.reader(lines)
        header = yield from _csv_header(reader, lines)
        if header is None:
            return
        header_problem = _header_problem(header)
        if len(lines.taken) > 1 or lines.exhausted:  # a quote in the header swallowed the lines after it
            header_problem = f"the header runs over lines 1-{lines.taken[-1][0]} (unbalanced quote?)"
            yield _unbalanced(lines, f"unreadable CSV header: {header_problem}")
        while True:
            lines.start_record()
            try:
                values = next(reader)
            except StopIteration:
                return
            except _OverlongLine as exc:
                first = lines.taken[0][0] if lines.taken else exc.number
                yield RawRecord(
                    first, exc.number, None, f"a line is longer than {MAX_LINE_CHARS:,} characters"
                )
                lines.push_back(lines.taken[1:])
                continue
            except csv.Error as exc:  # a field past the limit: a quote that never closes, most likely
                yield _unbalanced(lines, f"unbalanced quote? ({exc})")
                continue
            first, last = lines.taken[0][0], lines.taken[-1][0]
            if not values:  # a blank line
                continue
            if last > first or lines.exhausted:
                broken = _broken_over_lines(header, values, lines.exhausted)
                if broken:
                    yield _unbalanced(lines, broken)
                    continue
            yield _csv_record(first, last, header, header_problem, values)


def _csv_header(reader: Any, lines: _Lines) -> Iterator[RawRecord]:
    """Generator-returning helper: yields a rejection if the header is unreadable, returns the header."""
    while True:
        lines.start_record()
        try:
            header = next(reader)
        except StopIteration:
            return None
        except (csv.Error, _OverlongLine) as exc:
            yield RawRecord(
                1, lines.taken[-1][0] if lines.taken else 1, None, f"unreadable CSV header: {exc}"
            )
            return None
        if header:
            return header


def _header_problem(header: list[str]) -> str | None:
    """Why no row of a file with this header can be read, or None (docs/ingest.md: duplicate fields)."""
    seen: dict[str, int] = {}
    for index, name in enumerate(header, start=1):
        if name in seen:
            return f"the header names the column {name!r} twice (columns {seen[name]} and {index})"
        seen[name] = index
    for name in ("key", "title", "description"):
        if name not in seen:
            return f"the header has no column {name!r}"
    return None


def _broken_over_lines(header: list[str], values: list[str], at_end: bool) -> str | None:
    """Why a record that spans several lines is a broken one, or None if its line breaks are data."""
    if at_end:
        return "unbalanced quote? a quoted field runs to the end of the file"
    for name, value in zip(header, values, strict=False):
        if name in FIELD_LIMITS and name not in MULTILINE_COLUMNS and ("\n" in value or "\r" in value):
            return f"unbalanced quote? '{name}' cannot hold a line break"
    return None


def _unbalanced(lines: _Lines, reason: str) -> RawRecord:
    """Reject the record's lines as one broken record and queue all but its first to be read again."""
    taken = lines.taken
    first, last = taken[0][0], taken[-1][0]
    if last > first:
        reason += f"; lines {first + 1}-{last} are read again as records"
    lines.push_back(taken[1:])
    return RawRecord(first, last, None, reason)


def _csv_record(
    first: int, last: int, header: list[str], header_problem: str | None, values: list[str]
) -> RawRecord:
    if len(values) > len(header):
        return RawRecord(first, last, None, "more fields than the header has")
    if any(_first_undecodable(value) is not None for value in values):
        return RawRecord(first, last, None, "invalid UTF-8")
    if header_problem:
        return RawRecord(first, last, None, header_problem)
    fields: dict[str, Any] = dict.fromkeys(header)
    for name, value in zip(header, values, strict=False):
        fields[name] = value if value != "" else None
    return RawRecord(first, last, fields)
