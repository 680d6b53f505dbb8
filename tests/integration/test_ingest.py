"""Ingest: good rows go in, bad rows are reported with file:line and why, nothing half-written."""

from __future__ import annotations

import bisect
import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select

from appdb import claims, discovery
from appdb.database import session_scope
from pipeline_defs.cli.main import main
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.store.ingest import ingest_files
from plugins.postings.store.tables import Posting
from tests.support.postings import POSTINGS, write_jsonl


def _count(url: str) -> int:
    with session_scope(url) as session:
        return session.scalar(select(func.count(Posting.id)))


def test_bad_rows_are_reported_and_good_rows_load(app_db_url: str, tmp_path: Path) -> None:
    good = POSTINGS[0]
    lines = [
        json.dumps(good),
        json.dumps({"key": "no-desc", "title": "Cook"}),
        json.dumps({"key": "bad-type", "title": "Cook", "description": ["a", "list"]}),
        json.dumps({"key": "p-2", "title": "Nurse", "description": "Night shifts on the ward."}),
        "{not json",
        json.dumps({**good, "description": "A second row with the same key."}),
        json.dumps(
            {"key": "bad-date", "title": "Cook", "description": "Cook pasta.", "posted_at": "yesterday"}
        ),
        "",
        json.dumps({"key": "a,b", "title": "Cook", "description": "Cook pasta."}),
    ]
    path = tmp_path / "postings.jsonl"
    path.write_bytes(
        ("\n".join(lines[:3]) + "\n").encode()
        + b'{"key": "latin1", "title": "Caf\xe9", "description": "x"}\n'
        + ("\n".join(lines[3:]) + "\n").encode()
    )
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    reasons = {rejection.line: rejection.reason for rejection in report.rejected}
    assert sorted(report.inserted) == ["p-1", "p-2"]
    assert reasons[2] == "missing 'description'"
    assert reasons[3] == "'description' must be text, got list"
    assert reasons[4].startswith("invalid UTF-8")
    assert reasons[6].startswith("invalid JSON")
    assert reasons[7] == "duplicate key 'p-1' (first at line 1, kept)"
    assert reasons[8].startswith("'posted_at' is not an ISO date")
    assert reasons[10].startswith("'key' may not contain ','")
    assert len(report.rejected) == 7
    assert str(report.rejected[0]) == f"{path}:2: missing 'description'"
    assert _count(app_db_url) == 2


@pytest.mark.parametrize(
    ("character", "kind"),
    [
        ("\x1b", "a control character"),  # ESC: the start of a terminal escape sequence
        ("\x01", "a control character"),
        ("\x7f", "a control character"),
        ("\x85", "a control character"),  # NEL: Python's str.strip() and splitlines() treat it as a break
        ("\u202e", "a format character"),  # right-to-left override: the key reads backwards
        ("\u2028", "a line separator"),
        ("\u200b", "a format character"),  # zero-width space: looks like the key without it
        ("\u00a0", "a space other than ' '"),
    ],
)
def test_a_key_with_an_invisible_or_control_character_is_refused_and_the_good_rows_load(
    app_db_url: str, tmp_path: Path, character: str, kind: str
) -> None:
    rows = [
        {"key": "good-1", "title": "Cook", "description": "Cook pasta."},
        {"key": f"p{character}1", "title": "Cook", "description": "Cook pasta."},
        {"key": f"p-2{character}", "title": "Cook", "description": "Cook pasta."},  # at the end: not stripped
        {"key": "good 2", "title": "Nurse", "description": "Night shifts."},  # a plain space is fine
    ]
    path = write_jsonl(tmp_path / "keys.jsonl", rows)
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["good 2", "good-1"]
    code = f"U+{ord(character):04X}"
    assert [
        (rejection.line, code in rejection.reason, kind in rejection.reason) for rejection in report.rejected
    ] == [
        (2, True, True),
        (3, True, True),
    ]
    assert str(report.rejected[0]).startswith(f"{path}:2: 'key' may not contain")
    assert _count(app_db_url) == 2


def test_reingest_unchanged_changes_nothing_and_changed_description_makes_outputs_stale(
    app_db_url: str, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", POSTINGS)
    with session_scope(app_db_url) as session:
        assert len(ingest_files(session, [path]).inserted) == 3
    [summary] = [
        item for item in build_use_cases(Settings.from_env()) if item.use_case.name == "posting_summary"
    ]
    with session_scope(app_db_url) as session:
        for key in ("p-1", "p-2", "p-3"):
            assert claims.claim_items(session, "posting_summary", [key], "run-1") == [key]
            posting = session.scalar(select(Posting).where(Posting.key == key))
            assert claims.complete_item(
                session,
                "posting_summary",
                key,
                "run-1",
                {
                    "value": {"summary": "s"},
                    "model": summary.spec.model,
                    "backend": "b",
                    "use_case_version": summary.spec.version,
                    "input_hash": "h",
                    "subject_hash": posting.content_hash,
                },
            )
        assert discovery.find_pending_work(session, summary.spec) == []
        before = session.scalar(select(Posting.updated_at).where(Posting.key == "p-1"))

    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    assert (report.inserted, report.updated, len(report.unchanged)) == ([], [], 3)
    with session_scope(app_db_url) as session:
        assert session.scalar(select(Posting.updated_at).where(Posting.key == "p-1")) == before

    changed = [{**POSTINGS[0], "description": "Now a Rust and Kafka role."}, *POSTINGS[1:]]
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [write_jsonl(tmp_path / "b.jsonl", changed)])
    assert report.updated == ["p-1"]
    with session_scope(app_db_url) as session:
        assert discovery.find_pending_work(session, summary.spec) == ["p-1"]


def test_csv_reports_the_line_where_a_record_starts(app_db_url: str, tmp_path: Path) -> None:
    path = tmp_path / "postings.csv"
    path.write_bytes(
        b"key,title,company,description\n"
        b'c-1,Baker,Crumb,"Bake bread.\nTwo lines of description."\n'
        b"c-2,Baker,Crumb,\n"
        b"c-3,Caf\xe9 manager,Crumb,Run the caf\xe9.\n"
        b"c-4,Baker,Crumb,Bake cakes.,extra\n"
        b"c-5,Baker,Crumb,Bake rolls.\n"
    )
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["c-1", "c-5"]
    assert [(r.line, r.reason) for r in report.rejected] == [
        (4, "missing 'description'"),
        (5, "invalid UTF-8"),
        (6, "more fields than the header has"),
    ]


def test_a_database_failure_leaves_nothing_half_written(
    app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import plugins.postings.store.ingest as ingest_module

    first = write_jsonl(tmp_path / "first.jsonl", POSTINGS[:1])
    second = write_jsonl(tmp_path / "second.jsonl", POSTINGS[1:])
    real_upsert = ingest_module._upsert
    calls = []

    def failing_upsert(session, postings, report):  # noqa: ANN001
        calls.append(len(postings))
        if len(calls) == 2:
            raise RuntimeError("disk full")
        real_upsert(session, postings, report)

    monkeypatch.setattr(ingest_module, "_upsert", failing_upsert)
    with pytest.raises(RuntimeError), session_scope(app_db_url) as session:
        ingest_files(session, [first, second])
    assert _count(app_db_url) == 0


def test_cli_exit_code_tells_whether_rows_were_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    good = write_jsonl(tmp_path / "good.jsonl", POSTINGS)
    assert main(["ingest", str(good)]) == 0
    assert "3 new" in capsys.readouterr().out
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"key": "x", "title": "t"}])
    assert main(["ingest", str(bad)]) == 1
    assert f"rejected {bad}:1: missing 'description'" in capsys.readouterr().err
    assert main(["ingest", str(tmp_path / "missing.jsonl")]) == 2


def test_posted_at_is_stored_in_utc_whatever_the_machine_time_zone(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        path = tmp_path / "tz.jsonl"
        path.write_bytes(
            b"\xef\xbb\xbf"  # a byte-order mark must not cost the first row
            + json.dumps({**POSTINGS[0], "posted_at": "2026-07-01T09:00:00Z"}).encode()
            + b"\n"
        )
        with session_scope(sqlite_url) as session:
            report = ingest_files(session, [path])
            stored = session.scalar(select(Posting.posted_at))
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert report.inserted == ["p-1"] and not report.rejected
    assert stored.isoformat() == "2026-07-01T09:00:00"


def test_a_very_long_csv_field_is_ingested(sqlite_url: str, tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    long_description = "Operate the line. " * 12_000  # about 216,000 characters
    path.write_text(f'key,title,description\nlong-1,Operator,"{long_description}"\nshort-1,Operator,Short.\n')
    with session_scope(sqlite_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["long-1", "short-1"] and not report.rejected


def test_a_stray_quote_in_a_csv_costs_its_row_not_the_rows_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 20: `r-3,"T3,D3` swallowed the next two rows into its title, and ingest said 0 rejected."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PIPELINE_DATABASE_URL", raising=False)
    path = tmp_path / "stray.csv"
    path.write_text(
        'key,title,description\nr-1,T1,D1\nr-2,T2,D2\nr-3,"T3,D3\nr-4,T4,D4\nr-5,"T5",D5\nr-6,T6,D6\n'
    )
    assert main(["ingest", str(path)]) == 1
    captured = capsys.readouterr()
    assert "5 new, 0 updated (their outputs are now stale), 0 unchanged, 1 rejected" in captured.out
    assert f"rejected {path}:4-6: unbalanced quote? 'title' cannot hold a line break" in captured.err
    with session_scope(Settings.from_env().database_url) as session:
        titles = dict(session.execute(select(Posting.key, Posting.title)).all())
    assert titles == {"r-1": "T1", "r-2": "T2", "r-4": "T4", "r-5": "T5", "r-6": "T6"}


def test_a_quote_that_never_closes_is_reported_and_the_lines_after_it_still_load(
    sqlite_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "open.csv"
    # the description may hold line breaks, but this quote runs to the end of the file
    path.write_text('key,title,description\nq-1,T1,"Starts here\nq-2,T2,D2\nq-3,T3,D3')
    with session_scope(sqlite_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["q-2", "q-3"]
    assert [str(r) for r in report.rejected] == [
        f"{path}:2-4: unbalanced quote? a quoted field runs to the end of the file; "
        "lines 3-4 are read again as records"
    ]


# field -> a value one character over its limit (docs/ingest.md)
OVER_THE_LIMIT = {
    "key": "k" * 256,
    "title": "T" * 301,
    "company": "C" * 301,
    "location": "L" * 301,
    "url": "https://x.test/" + "u" * 2034,
    "posted_at": "2026-01-01T00:00:00" + "0" * 46,
    "description": "D" * 1_000_001,
}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_every_field_has_a_length_limit_with_a_clear_message(
    sqlite_url: str, tmp_path: Path, suffix: str
) -> None:
    """A 5 MB title made 10 MB prompts on every attempt; now each over-long field costs its row, with
    file:line, the field and its limit, and the other rows load."""
    base = {"key": "ok", "title": "Cook", "company": "Crumb", "location": "Lyon", "url": None}
    rows = [{**base, "key": "ok-0", "description": "Cook pasta."}]
    rows.append({**base, "key": "huge-title", "title": "T" * 5_000_000, "description": "Cook."})
    for name, value in OVER_THE_LIMIT.items():
        rows.append({**base, "key": f"long-{name}", "description": "Cook.", name: value})
    rows.append({**base, "key": "ok-1", "description": "D" * 1_000_000})  # exactly at the limit
    path = tmp_path / f"limits{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, rows)
    else:
        columns = ["key", "title", "company", "location", "url", "posted_at", "description"]
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            writer.writerows(rows)
    with session_scope(sqlite_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["ok-0", "ok-1"]
    messages = [str(rejection) for rejection in report.rejected]
    assert (
        messages[0]
        == f"{path}:{2 if suffix == '.jsonl' else 3}: 'title' is 5,000,000 characters long; the limit is 300"
    )
    for offset, (name, value) in enumerate(OVER_THE_LIMIT.items()):
        line = offset + (3 if suffix == ".jsonl" else 4)
        limit = len(value) - 1
        assert (
            messages[offset + 1]
            == f"{path}:{line}: '{name}' is {len(value):,} characters long; the limit is {limit:,}"
        )
    assert len(messages) == 1 + len(OVER_THE_LIMIT)


def _rows_file(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".jsonl":
        return write_jsonl(path, rows)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["key", "title", "description"])
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_duplicate_keys_within_one_ingest_are_rejected_naming_where_the_key_was_first(
    app_db_url: str, tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/ingest.md: within one ingest the first row of a key is kept and every later one rejected,
    in the same file or another (before: a later file silently replaced it); batches change nothing."""
    import plugins.postings.store.ingest as ingest_module

    # the first occurrence is in an earlier batch
    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 2, raising=False)
    header = 0 if suffix == ".jsonl" else 1
    first = _rows_file(
        tmp_path / f"first{suffix}",
        [{"key": f"d-{n}", "title": "Cook", "description": f"First {n}."} for n in range(4)]
        + [{"key": "d-0", "title": "Cook", "description": "Same file again."}],
    )
    second = _rows_file(
        tmp_path / f"second{suffix}",
        [
            {"key": "d-9", "title": "Cook", "description": "New."},
            {"key": "d-2", "title": "Cook", "description": "Another file."},
        ],
    )
    with session_scope(app_db_url) as session:
        report = ingest_files(session, [first, second])
    assert sorted(report.inserted) == ["d-0", "d-1", "d-2", "d-3", "d-9"] and report.updated == []
    assert [str(rejection) for rejection in report.rejected] == [
        f"{first}:{5 + header}: duplicate key 'd-0' (first at line {1 + header}, kept)",
        f"{second}:{2 + header}: duplicate key 'd-2' (first at {first}:{3 + header}, kept)",
    ]
    with session_scope(app_db_url) as session:
        descriptions = dict(session.execute(select(Posting.key, Posting.description)).all())
    assert descriptions["d-0"] == "First 0." and descriptions["d-2"] == "First 2."


def test_a_field_named_twice_rejects_the_record_in_jsonl_and_every_row_in_csv(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Before: JSON kept the last value and CSV the last column, silently."""
    jsonl = tmp_path / "twice.jsonl"
    jsonl.write_text(
        '{"key": "j-1", "title": "Cook", "title": "Chef", "description": "Cook."}\n'
        '{"key": "j-2", "title": "Cook", "description": "Cook."}\n'
    )
    csv_path = tmp_path / "twice.csv"
    csv_path.write_text("key,title,description,title\nc-1,Cook,Cook.,Chef\nc-2,Cook,Cook.,Chef\n")
    with session_scope(sqlite_url) as session:
        report = ingest_files(session, [jsonl, csv_path])
    assert report.inserted == ["j-2"]
    assert [str(rejection) for rejection in report.rejected] == [
        f"{jsonl}:1: the field 'title' appears twice in the object",
        f"{csv_path}:2: the header names the column 'title' twice (columns 2 and 4)",
        f"{csv_path}:3: the header names the column 'title' twice (columns 2 and 4)",
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_key_starting_with_a_dash_is_rejected(sqlite_url: str, tmp_path: Path, suffix: str) -> None:
    """`pipeline trace -x` reads the key as an option; such keys are rejected at ingest (docs/ingest.md)."""
    path = _rows_file(
        tmp_path / f"dash{suffix}",
        [
            {"key": "-x", "title": "Cook", "description": "Cook."},
            {"key": "x-", "title": "Cook", "description": "Cook."},
        ],
    )
    with session_scope(sqlite_url) as session:
        report = ingest_files(session, [path])
    line = 1 if suffix == ".jsonl" else 2
    assert report.inserted == ["x-"]
    assert [str(rejection) for rejection in report.rejected] == [
        f"{path}:{line}: 'key' may not start with '-' (a command line would read it as an option)"
    ]


def test_changed_postings_are_updated_in_batches_not_one_statement_per_row(
    app_db_url: str, tmp_path: Path
) -> None:
    """100,000 changed postings took 96 s on PostgreSQL, one UPDATE each; now a few statements per batch."""
    from sqlalchemy import event

    from appdb.database import get_engine

    rows = [{"key": f"u-{n}", "title": "Cook", "description": f"Cook {n}."} for n in range(3_000)]
    with session_scope(app_db_url) as session:
        ingest_files(session, [write_jsonl(tmp_path / "v1.jsonl", rows)])
    changed = write_jsonl(tmp_path / "v2.jsonl", [{**row, "title": "Chef"} for row in rows])
    statements: list[str] = []

    def count(conn, cursor, statement, parameters, context, executemany) -> None:  # noqa: ANN001
        statements.append(statement.lstrip().split(None, 1)[0].upper())

    engine = get_engine(app_db_url)
    event.listen(engine, "before_cursor_execute", count)
    try:
        with session_scope(app_db_url) as session:
            report = ingest_files(session, [changed])
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert len(report.updated) == 3_000
    assert statements.count("UPDATE") <= 3 and len(statements) < 100, statements[:20]
    with session_scope(app_db_url) as session:
        assert set(session.scalars(select(Posting.title))) == {"Chef"}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_ingest_streams_a_file_in_bounded_memory(
    sqlite_url: str, tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingest held the whole file in memory, 14-17 times its size (810 MB for 300,000 postings); now
    Python's allocations peak at what one batch of rows takes, whatever the file's size (300 rows here,
    a tenth of the file; benchmarks/ingest_memory.py measures 1,000,000 postings at the default batch)."""
    import tracemalloc

    import plugins.postings.store.ingest as ingest_module

    monkeypatch.setattr(ingest_module, "BATCH_ROWS", 300, raising=False)
    rows = [
        {"key": f"m-{n}", "title": "Cook", "description": f"Posting {n}: " + "x" * 6000} for n in range(3_000)
    ]
    path = _rows_file(tmp_path / f"big{suffix}", rows)
    size = path.stat().st_size
    with session_scope(sqlite_url) as session:
        ingest_files(session, [write_jsonl(tmp_path / "warm.jsonl", [{**rows[0], "key": "warm"}])])
    tracemalloc.start()
    try:
        with session_scope(sqlite_url) as session:
            report = ingest_files(session, [path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(report.inserted) == 3_000 and not report.rejected
    assert peak < size / 3, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.1f} MB file"


def test_rejections_are_handed_over_as_they_are_found_in_line_order(
    app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of bad lines is reported as it is read, never held whole (3,000,000 bad lines took
    795 MB when every rejection was kept): no more than a batch's worth of rejections (`BATCH_ROWS`,
    and the duplicates of the batch being written) wait to be handed to `on_rejection`, in line
    order (duplicates of earlier batches among them), and the report keeps a bounded sample and the
    count of all."""
    from plugins.postings.store import ingest

    lines = [json.dumps({"key": "g-0", "title": "Cook", "description": "Cooks pasta."})]
    for number in range(2, 3 * ingest.BATCH_ROWS + 2):
        if number % 500 == 0:  # a duplicate of the first line's key, whichever batch that one is in
            lines.append(json.dumps({"key": "g-0", "title": "Cook", "description": "Again."}))
        elif number % 7 == 0:
            lines.append(json.dumps({"key": f"g-{number}", "title": "Cook", "description": "Cooks."}))
        else:
            lines.append(json.dumps({"key": f"bad-{number}", "title": "Cook"}))
    path = tmp_path / "mostly_bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected_bad = [n for n in range(2, len(lines) + 1) if n % 7 != 0 or n % 500 == 0]

    line_read = 0
    read_records = ingest.read_records

    def counted(file: Path):  # noqa: ANN202 - the reader's own iterator
        nonlocal line_read
        for record in read_records(file):
            line_read = record.line
            yield record

    monkeypatch.setattr(ingest, "read_records", counted)
    handed: list[tuple[int, int]] = []  # (the rejection's line, the line read when it was handed over)
    with session_scope(app_db_url) as session:
        report = ingest_files(
            session, [path], on_rejection=lambda rejection: handed.append((rejection.line, line_read))
        )
    assert [line for line, _ in handed] == expected_bad
    found_by = bisect.bisect_right  # rejections found once a line was read: the bad lines up to it
    waiting = [found_by(expected_bad, read) - index for index, (_, read) in enumerate(handed)]
    assert max(waiting) <= 2 * ingest.BATCH_ROWS  # the file has 5,100 bad lines
    assert report.rejected_count == len(expected_bad)
    assert [r.line for r in report.rejected] == expected_bad[: ingest.REJECTIONS_KEPT]
    assert "duplicate key 'g-0' (first at line 1, kept)" in {r.reason for r in report.rejected}
    assert report.summary().endswith(f"{len(expected_bad)} rejected")


def test_a_bare_carriage_return_does_not_end_a_jsonl_record(sqlite_url: str, tmp_path: Path) -> None:
    """Only "\\n" (or "\\r\\n") ends a JSONL record: a "\\r" between values is JSON whitespace, and one
    inside a string is that record's error, at its own line; the lines after keep their numbers."""
    path = tmp_path / "carriage_returns.jsonl"
    path.write_bytes(
        b'{"key": "cr-1",\r "title": "Cook", "description": "Cooks pasta."}\n'
        b'{"key": "cr-2", "title": "Nurse", "description": "Line one\rline two"}\r\n'
        b'{"key": "cr-3", "title": "Baker", "description": "Bakes bread."}\r\n'
        b'{"key": "cr-4", "title": "Porter", "description": "Carries."}'
    )
    with session_scope(sqlite_url) as session:
        report = ingest_files(session, [path])
    assert sorted(report.inserted) == ["cr-1", "cr-3", "cr-4"]
    assert [(r.line, r.reason.split(":")[0]) for r in report.rejected] == [(2, "invalid JSON")]


@pytest.mark.parametrize(
    ("name", "encoding", "shown_as"),
    [  # a spreadsheet's "Unicode text" is UTF-16 with a byte-order mark
        ("postings.csv", "utf-16", "UTF-16 (it starts with a UTF-16 byte-order mark)"),
        ("postings.csv", "utf-16-le", "UTF-16 (NUL bytes between its characters)"),
        ("postings.jsonl", "utf-16-be", "UTF-16 (NUL bytes between its characters)"),
        ("postings.jsonl", "utf-32", "UTF-32 (it starts with a UTF-32 byte-order mark)"),
    ],
)
def test_a_utf16_file_is_refused_saying_so(
    name: str,
    encoding: str,
    shown_as: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Read as UTF-8, each line of a UTF-16 CSV was rejected with "the header has no column 'key'"."""
    path = tmp_path / name
    if name.endswith(".csv"):
        text = "key,title,description\r\nu-1,Cook,Cooks pasta.\r\nu-2,Nurse,Night shifts.\r\n"
    else:
        text = "".join(json.dumps(posting) + "\n" for posting in POSTINGS[:2])
    path.write_text(text, encoding=encoding)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    assert main(["ingest", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"rejected {path}:1: the file is {shown_as}: none of it was read; save it as UTF-8"
    ]
