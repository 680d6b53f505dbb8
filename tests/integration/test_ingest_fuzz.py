"""Whole generated CSV and JSONL files through ingest: 0 crashes, and every record loaded or reported.

Hypothesis writes whole files: random quoting (minimal, all, non-numeric), line ends (LF, CRLF, a
BOM), unicode, NUL, line breaks inside fields, duplicate keys and header columns, over-long fields
(up to 3 MB), and then, for most files, damage: a stray quote, a cut-off end, bytes that are not
UTF-8, blank lines, a broken JSON line. For every file:

- ingest never raises;
- every record the reader met is accounted for exactly once: loaded (a key in the report) or rejected
  (a `Rejection` with its line or line range and a reason), and the stored keys are the loaded ones;
- every non-blank physical line after the CSV header lies in some record's line range (nothing is
  skipped unseen);
- an undamaged file loads every row that validates, with exactly its content: nothing swallowed.

Each run draws `EXAMPLES` new files per format (400 in all; no derandomize, so every run explores
new files): 25 runs of the suite pass the issue's 10,000 generated files; a failing file is kept in
Hypothesis's example database (.hypothesis/) and replayed first next time. About 20 s per run.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

import plugins.postings.store.ingest as ingest_module
from appdb.database import dispose, get_engine, migrate
from plugins.postings.store.ingest import POSTING_FIELDS, IngestReport, RowError, ingest_files, validate_row
from plugins.postings.store.ingest_reader import MULTILINE_COLUMNS, RawRecord
from plugins.postings.store.tables import Posting

EXAMPLES = 200
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
COLUMNS = ("key", "title", "company", "location", "url", "posted_at", "description")

# Text that breaks parsers: quotes, separators, line ends, a BOM, NUL, non-BMP and combining characters.
NASTY = ['"', "'", ",", ";", "\n", "\r\n", "\r", "\ufeff", "\x00", "\\", "{", "}", "é", "😀", "e\u0301", " "]
LINE_BREAKS = ("\n", "\r")
short_text = st.lists(
    st.one_of(st.sampled_from(NASTY), st.characters(codec="utf-8"), st.sampled_from("abcxyz-0123")),
    max_size=12,
).map("".join)
# Mostly small, now and then over a limit (title 300, url 2,048) or a multi-megabyte field.
huge_sizes = st.sampled_from([301, 2_049, 70_000, 1_000_001, 3_000_000])
# About one field in 40 is huge (hypothesis picks one_of branches evenly, so draw the odds instead).
field_text = st.tuples(st.integers(0, 39), short_text, huge_sizes).map(
    lambda drawn: "y" * drawn[2] if drawn[0] == 0 else drawn[1]
)
keys = st.one_of(
    st.sampled_from(["k-1", "k-2", "k-3", "-dash", " k-1 "]),
    st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True),
    short_text,
)
rows = st.lists(
    st.fixed_dictionaries(
        {"key": keys, "title": field_text, "description": field_text},
        optional={
            "company": field_text,
            "location": field_text,
            "url": field_text,
            "posted_at": st.sampled_from(["2026-01-02", "2026-01-02T03:04:05Z", "not a date", ""]),
        },
    ),
    min_size=0,
    max_size=8,
)
damage = st.one_of(
    st.none(),
    st.tuples(st.just("quote"), st.floats(0, 1)),
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("bytes"), st.floats(0, 1)),
    st.tuples(st.just("blank"), st.floats(0, 1)),
)


@pytest.fixture(scope="module")
def fuzz_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sessionmaker[Session], Path]]:
    """One migrated SQLite database; each example's ingest is rolled back after."""
    directory = tmp_path_factory.mktemp("ingest_fuzz")
    url = f"sqlite:///{directory / 'app.db'}"
    migrate(url)
    yield sessionmaker(get_engine(url)), directory
    dispose(url)


def _damage(data: bytes, how: tuple[str, float] | None) -> bytes:
    if how is None or not data:
        return data
    kind, where = how
    at = int(where * len(data))
    if kind == "quote":
        return data[:at] + b'"' + data[at:]
    if kind == "cut":
        return data[:at]
    if kind == "bytes":
        return data[:at] + b"\xff\xc3(" + data[at:]
    return data[:at] + b"\n\n" + data[at:]


def _ingest_spied(
    fuzz_db: tuple[sessionmaker[Session], Path], name: str, data: bytes, monkeypatch: pytest.MonkeyPatch
) -> tuple[IngestReport, list[RawRecord], dict[str, dict[str, Any]], Path]:
    """Ingest `data` as file `name` in a rolled-back transaction; also every record the reader yielded."""
    factory, directory = fuzz_db
    path = directory / name
    path.write_bytes(data)
    seen: list[RawRecord] = []
    real = ingest_module.read_records

    def spy(file: Path) -> Iterator[RawRecord]:
        for record in real(file):
            seen.append(record)
            yield record

    monkeypatch.setattr(ingest_module, "read_records", spy)
    with factory() as session:
        session.begin()
        try:
            report = ingest_files(session, [path])  # any exception fails the example: a crash
            stored = {
                posting.key: {name: getattr(posting, name) for name in POSTING_FIELDS}
                for posting in session.scalars(select(Posting))
            }
        finally:
            session.rollback()
    return report, seen, stored, path


def _assert_accounted(
    report: IngestReport, seen: list[RawRecord], stored: dict[str, Any], path: Path, data: bytes
) -> None:
    assert len(report.inserted) + len(report.rejected) == len(seen)  # each record: loaded or reported
    assert (report.updated, report.unchanged) == ([], [])
    assert sorted(report.inserted) == sorted(stored)
    text = data.decode("utf-8-sig", errors="replace")  # a BOM is no line content: "\ufeff".strip() keeps it
    physical = re.split(r"\r\n|\r|\n", text)
    if physical and physical[-1] == "":
        physical.pop()
    for rejection in report.rejected:
        assert rejection.reason and rejection.file == str(path)
        assert 1 <= rejection.line <= (rejection.last_line or rejection.line) <= max(len(physical), 1)
    covered: set[int] = set()
    for record in seen:
        covered.update(range(record.line, record.last_line + 1))
    non_blank = [number for number, line in enumerate(physical, start=1) if line.strip()]
    if path.suffix == ".csv":
        non_blank = non_blank[1:]  # the header (a header over several lines is itself a record)
    never_read = [number for number in non_blank if number not in covered]
    assert not never_read, f"lines never read: {never_read[:5]}"


def _assert_loaded_exactly(rows: list[dict[str, Any]], stored: dict[str, dict[str, Any]]) -> None:
    """An undamaged file: each row that validates (the first of each key) is stored as it was."""
    expected: dict[str, dict[str, Any]] = {}
    for row in rows:
        try:
            clean = validate_row({name: (value if value != "" else None) for name, value in row.items()})
        except RowError:
            continue
        expected.setdefault(clean["key"], clean)
    assert stored == expected


@FUZZ
@given(
    rows=rows,
    quoting=st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]),
    crlf=st.booleans(),
    bom=st.booleans(),
    extra_column=st.booleans(),
    how=damage,
)
def test_any_generated_csv_file_loads_or_reports_every_record(
    fuzz_db: tuple[sessionmaker[Session], Path],
    rows: list[dict[str, Any]],
    quoting: int,
    crlf: bool,
    bom: bool,
    extra_column: bool,
    how: tuple[str, float] | None,
) -> None:
    columns = [*COLUMNS, "notes"] if extra_column else list(COLUMNS)
    if how is None:  # an undamaged file: only the description (and extra columns) may break over lines
        rows = [
            {
                # csv.writer leaves a bare "\r" unquoted when lines end in "\n": the file would be broken
                name: value.replace("\r", "\n")
                if name in MULTILINE_COLUMNS
                else value.replace("\r", " ").replace("\n", " ")
                for name, value in row.items()
            }
            for row in rows
        ]
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, quoting=quoting, lineterminator="\r\n" if crlf else "\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            [row.get(name, "") if name != "notes" else "a\nnote, with a comma" for name in columns]
        )
    data = _damage(("\ufeff" if bom else "").encode() + buffer.getvalue().encode("utf-8"), how)
    with pytest.MonkeyPatch.context() as patch:
        report, seen, stored, path = _ingest_spied(fuzz_db, "fuzz.csv", data, patch)
    _assert_accounted(report, seen, stored, path, data)
    if how is None:
        _assert_loaded_exactly(rows, stored)


@FUZZ
@given(rows=rows, ascii_only=st.booleans(), crlf=st.booleans(), how=damage, duplicate_field=st.booleans())
def test_any_generated_jsonl_file_loads_or_reports_every_record(
    fuzz_db: tuple[sessionmaker[Session], Path],
    rows: list[dict[str, Any]],
    ascii_only: bool,
    crlf: bool,
    how: tuple[str, float] | None,
    duplicate_field: bool,
) -> None:
    lines = [json.dumps(row, ensure_ascii=ascii_only) for row in rows]
    if duplicate_field and lines:  # the first record names 'title' twice: rejected, never half-merged
        lines[0] = lines[0][:-1] + ', "title": "again"}'
    data = _damage(("\r\n" if crlf else "\n").join(lines).encode("utf-8"), how)
    with pytest.MonkeyPatch.context() as patch:
        report, seen, stored, path = _ingest_spied(fuzz_db, "fuzz.jsonl", data, patch)
    _assert_accounted(report, seen, stored, path, data)
    if how is None:
        if duplicate_field and rows:
            assert any(r.line == 1 for r in report.rejected)  # 'title' twice (or the line too long)
            rows = rows[1:]
        _assert_loaded_exactly(rows, stored)
