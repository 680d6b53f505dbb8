"""The enriched postings as a table (plugins/postings/store/enriched_postings.py) and `pipeline export`.

On both databases: the DataFrame shows for each posting what `pipeline trace` shows (output values,
version, model, time); a posting with no output yet is a row of nulls, not a missing row; the filters
(since, only current, one use case) and chunked reading; the export round-trips through Parquet, CSV
and JSONL with its schema beside it; bad input is a one-line error that writes nothing.
"""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from sqlalchemy import text

from appdb.database import session_scope
from appdb.models import UseCaseOutput
from pipeline_defs.cli.main import main
from plugins.postings.store.enriched_export import write_tables
from plugins.postings.store.enriched_postings import (
    ReadFilter,
    enriched_postings_frame,
    iter_enriched_frames,
    posting_concepts_frame,
)
from tests.support.enriched import PYTHON, SUMMARY, T0, seed_enriched


@pytest.fixture
def enriched_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_db_url: str) -> dict[str, Any]:
    return seed_enriched(tmp_path, monkeypatch, app_db_url)


def trace_outputs(key: str, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, Any]]:
    """What `pipeline trace KEY` prints per use case: the current output, its model, version and time."""
    assert main(["trace", key, "--full"]) == 0
    text = capsys.readouterr().out
    found: dict[str, dict[str, Any]] = {}
    for section in re.split(r"^== ", text, flags=re.M)[1:]:
        name, body = section.split(" ==\n", 1)
        if "Current output:" not in body:
            continue
        verbatim = body.split("Current output:\n", 1)[1]
        lines = []
        for line in verbatim.splitlines():
            if not line.startswith("  | "):
                break
            lines.append(line[4:])
        made = re.search(r"^made by \S+ (.+), version (\S+), run .*, at (.+) UTC, from", body, flags=re.M)
        assert made, body
        found[name] = {
            "value": json.loads("\n".join(lines)),
            "model": made.group(1),
            "version": made.group(2),
            "updated_at": datetime.strptime(made.group(3), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC),
        }
    return found


def as_list(cell: Any) -> list[dict[str, Any]] | None:
    return None if cell is None else [dict(item) for item in cell]


def test_the_dataframe_shows_what_trace_shows_and_postings_without_output_have_nulls(
    enriched_db: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    with session_scope(enriched_db["url"]) as session:
        frame = enriched_postings_frame(session)

    assert list(frame["key"]) == ["p-1", "p-2", "p-3"]  # every posting, no output or not
    rows = frame.set_index("key")
    for key in ("p-1", "p-2", "p-3"):
        traced = trace_outputs(key, capsys)
        row = rows.loc[key]
        for use_case, prefix, read in (
            ("posting_summary", "summary", lambda value: value["summary"]),
            (
                "posting_skills",
                "skills",
                lambda value: [
                    {name: item[name] for name in ("mention", "kind", "field", "start", "end")}
                    for item in value["skills"]
                ],
            ),
            (
                "skill_entities",
                "concepts",
                lambda value: [
                    {
                        name: item[name]
                        for name in ("mention", "kind", "concept_uri", "concept_label", "stage", "confidence")
                    }
                    for item in value["entities"]
                ],
            ),
        ):
            cell = row[prefix] if prefix == "summary" else as_list(row[prefix])
            if use_case not in traced:  # trace says "no output yet": nulls, not a missing row
                for column in (prefix, f"{prefix}_version", f"{prefix}_model", f"{prefix}_updated_at"):
                    assert pd.isna(row[column]) if column != prefix or prefix == "summary" else cell is None
                continue
            shown = traced[use_case]
            assert cell == read(shown["value"])
            assert row[f"{prefix}_version"] == shown["version"]
            assert row[f"{prefix}_model"] == shown["model"]
            assert row[f"{prefix}_updated_at"].to_pydatetime() == shown["updated_at"]
    assert rows.loc["p-1", "title"] == "Data Engineer" and rows.loc["p-1", "company"] == "Brightwave Energy"
    # the row's time is its newest output's (or the posting's, when it has none)
    assert rows.loc["p-1", "updated_at"] == pd.Timestamp(T0 + timedelta(minutes=2), tz="UTC")
    assert rows.loc["p-3", "updated_at"] == pd.Timestamp(T0 - timedelta(days=1), tz="UTC")


def test_filters_since_current_and_one_use_case(enriched_db: dict[str, Any]) -> None:
    url, specs = enriched_db["url"], enriched_db["specs"]
    with session_scope(url) as session:
        # made by another version: no longer current
        session.execute(
            UseCaseOutput.__table__.update()
            .where(UseCaseOutput.use_case == "posting_summary", UseCaseOutput.subject_key == "p-2")
            .values(use_case_version="an-old-version")
        )
    with session_scope(url) as session:
        since = enriched_postings_frame(session, ReadFilter(since=T0 + timedelta(days=1)))
        everything = enriched_postings_frame(session).set_index("key")
        current = enriched_postings_frame(session, ReadFilter(current_specs=specs)).set_index("key")
        summaries = enriched_postings_frame(session, ReadFilter(use_cases=("posting_summary",))).set_index(
            "key"
        )
        with pytest.raises(ValueError, match="no use case 'posting_sumary'"):
            enriched_postings_frame(session, ReadFilter(use_cases=("posting_sumary",)))

    assert list(since["key"]) == ["p-2"]  # only p-2's summary changed after T0 + 1 day
    assert everything.loc["p-2", "summary"] == "Northgate Hospital seeks a nurse."
    assert pd.isna(current.loc["p-2", "summary"]) and pd.isna(current.loc["p-2", "summary_version"])
    assert current.loc["p-1", "summary"] == SUMMARY["summary"]  # current outputs stay
    assert summaries.loc["p-1", "summary"] == SUMMARY["summary"]
    assert summaries.loc["p-1", "skills"] is None and summaries.loc["p-1", "concepts"] is None


def test_chunked_reading_gives_the_same_rows_and_the_long_table_has_one_row_per_concept(
    enriched_db: dict[str, Any],
) -> None:
    with session_scope(enriched_db["url"]) as session:
        whole = enriched_postings_frame(session)
        chunks = list(iter_enriched_frames(session, chunk_size=2))
        concepts = posting_concepts_frame(session, chunk_size=1)

    assert [len(chunk) for chunk in chunks] == [2, 1]
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), whole)
    uris = concepts["concept_uri"].fillna("(unmatched)")
    assert list(zip(concepts["key"], concepts["mention"], uris, strict=True)) == [
        ("p-1", "Python", PYTHON),
        ("p-1", "SQL", "(unmatched)"),
    ]
    assert pd.isna(concepts.loc[1, "concept_label"])
    assert concepts.loc[0, "stage"] == "learned" and concepts.loc[0, "confidence"] == 0.97
    assert concepts.loc[0, "title"] == "Data Engineer"


def test_export_round_trips_through_parquet_csv_and_jsonl_with_the_schema_beside(
    enriched_db: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with session_scope(enriched_db["url"]) as session:
        frame = enriched_postings_frame(session)
    out = tmp_path / "out" / "enriched.parquet"

    assert main(["export", "--out", str(out), "--chunk-size", "2"]) == 0
    assert f"wrote 3 postings to {out}" in capsys.readouterr().out
    pd.testing.assert_frame_equal(pd.read_parquet(out), frame)
    schema = json.loads(Path(f"{out}.schema.json").read_text())
    assert schema["schema_version"] == "1" and schema["rows"] == 3
    assert {column["name"] for column in schema["columns"]} == set(frame.columns)

    assert main(["export", "--format", "jsonl", "--out", str(tmp_path / "e.jsonl")]) == 0
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [record["key"] for record in records] == ["p-1", "p-2", "p-3"]
    assert records[0]["concepts"][0]["concept_uri"] == PYTHON and records[2]["summary"] is None

    assert main(["export", "--format", "csv", "--out", str(tmp_path / "e.csv")]) == 0
    table = pd.read_csv(tmp_path / "e.csv")
    assert list(table["key"]) == ["p-1", "p-2", "p-3"]
    assert json.loads(table.loc[0, "skills"])[1]["mention"] == "SQL"

    assert main(["export", "--concepts", "--out", str(tmp_path / "c.parquet")]) == 0
    assert list(pd.read_parquet(tmp_path / "c.parquet")["mention"]) == ["Python", "SQL"]


def test_export_bad_input_is_a_one_line_error_and_writes_nothing(
    enriched_db: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.parquet"
    assert main(["export", "--since", "last tuesday", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--since 'last tuesday' is not an ISO date" in err
    assert not out.exists()

    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    assert main(["export", "--out", str(blocked / "x.parquet")]) == 1
    assert capsys.readouterr().err.startswith(f"error: cannot write {blocked / 'x.parquet'}")


def test_the_sql_views_show_the_same_table(enriched_db: dict[str, Any]) -> None:
    """SQL users get the same rows from the views migration 0010 creates (JSON text for the lists)."""
    with session_scope(enriched_db["url"]) as session:
        frame = enriched_postings_frame(session)
        rows = session.execute(
            text("SELECT key, summary, summary_version, skills, concepts FROM enriched_postings ORDER BY key")
        ).all()
        long = session.execute(
            text("SELECT key, mention, concept_uri, stage, confidence FROM posting_concepts ORDER BY mention")
        ).all()

    assert [row.key for row in rows] == list(frame["key"])
    assert [row.summary for row in rows] == [None if pd.isna(value) else value for value in frame["summary"]]
    assert [row.summary_version for row in rows] == [
        None if pd.isna(value) else value for value in frame["summary_version"]
    ]
    assert json.loads(rows[0].concepts)[0]["concept_uri"] == PYTHON
    assert json.loads(rows[0].skills)[1]["start"] == 17 and rows[2].skills is None
    assert [tuple(row) for row in long] == [
        ("p-1", "Python", PYTHON, "learned", 0.97),
        ("p-1", "SQL", None, "unmatched", 0.0),
    ]


def test_trace_and_reprocess_agree_that_an_output_is_stale_and_say_why_it_waits(
    enriched_db: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 64: `pipeline trace` called a skill_entities output stale while `reprocess --stale
    --dry-run` counted 0 (the output could not be redone yet: its taxonomy is not loaded)."""
    with session_scope(enriched_db["url"]) as session:
        session.execute(
            UseCaseOutput.__table__.update()
            .where(UseCaseOutput.use_case == "skill_entities", UseCaseOutput.subject_key == "p-1")
            .values(use_case_version="2020-01-01.1")
        )
    assert main(["trace", "p-1"]) == 0
    traced = capsys.readouterr().out
    [state] = [line for line in traced.splitlines() if "made by version 2020-01-01.1" in line]
    assert "stale" in state and "not redone yet: it waits for its inputs" in state
    assert main(["reprocess", "--stale", "--use-case", "skill_entities", "--dry-run"]) == 0
    counted = capsys.readouterr().out
    assert (
        "skill_entities (version" in counted and "1 stale outputs (1 made by version 2020-01-01.1)" in counted
    )
    assert "not redone now: 1 it waits for its inputs" in counted


def _not_regular_targets(directory: Path) -> dict[str, Path]:
    """A FIFO, a directory, a socket, a symlink to the FIFO and, as root, a character device (the
    kernel's /dev/full, made here: the real one is never touched)."""
    targets = {
        "a FIFO": directory / "fifo",
        "a directory": directory / "folder",
        "a socket": directory / "sock",
    }
    directory.mkdir()
    os.mkfifo(targets["a FIFO"])
    targets["a directory"].mkdir()
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(targets["a socket"]))
    link = directory / "link-to-fifo"
    link.symlink_to(targets["a FIFO"])
    targets["a FIFO (through a symlink)"] = link
    if os.geteuid() == 0:
        device = directory / "full"
        os.mknod(device, stat.S_IFCHR | 0o600, os.makedev(1, 7))
        targets["a character device"] = device
    return targets


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_export_refuses_to_replace_what_is_not_a_regular_file(
    file_format: str, enriched_db: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As root, `--out /dev/full --format csv` replaced the device with a CSV file (rc 0)."""
    targets = _not_regular_targets(tmp_path / "targets")
    for kind, target in targets.items():
        before = os.stat(target).st_mode
        assert main(["export", "--format", file_format, "--out", str(target)]) == 2, kind
        err = capsys.readouterr().err
        expected_kind = kind.split(" (")[0]
        assert err.splitlines() == [
            f"error: {target} is {expected_kind}, not a regular file: an export replaces only a regular "
            "file (name a new or a regular file)"
        ], kind
        assert os.stat(target).st_mode == before, f"{kind} was replaced"
        assert not Path(f"{target}.schema.json").exists()
    assert sorted(p.name for p in (tmp_path / "targets").iterdir()) == sorted(
        t.name for t in targets.values()
    )
    out = tmp_path / "regular.csv"  # a regular file is still replaced, whole
    out.write_text("old")
    assert main(["export", "--format", "csv", "--out", str(out)]) == 0
    assert out.read_text().startswith("key,")


HOSTILE_TITLES = {  # as ingested (a title is stripped of surrounding whitespace) -> as written to CSV
    '=HYPERLINK("http://x")': '\'=HYPERLINK("http://x")',
    "+1 555 0100 sales": "'+1 555 0100 sales",
    "-5 years experience": "'-5 years experience",
    "@SUM(A1:A9)": "'@SUM(A1:A9)",
    "Plain title = fine": "Plain title = fine",
}


def test_csv_export_escapes_cells_a_spreadsheet_would_run_as_formulas(
    app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """OWASP's CSV-injection rule: a text cell starting with = + - @ (tab, CR) gets a leading '; JSONL
    keeps the text as it is. Before, `=HYPERLINK("http://x")` was written as a live formula."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    postings = [
        {"key": f"h-{index}", "title": title, "company": "=cmd|' /C calc'!A0", "description": "Cooks."}
        for index, title in enumerate(HOSTILE_TITLES)
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(posting) + "\n" for posting in postings), encoding="utf-8")
    assert main(["ingest", str(path)]) == 0
    assert main(["export", "--format", "csv", "--out", str(tmp_path / "e.csv")]) == 0
    assert main(["export", "--format", "jsonl", "--out", str(tmp_path / "e.jsonl")]) == 0
    capsys.readouterr()
    with (tmp_path / "e.csv").open(newline="", encoding="utf-8") as handle:
        rows = {row["key"]: row for row in csv.DictReader(handle)}
    for index, written in enumerate(HOSTILE_TITLES.values()):
        assert rows[f"h-{index}"]["title"] == written
        assert rows[f"h-{index}"]["company"] == "'=cmd|' /C calc'!A0"
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [record["title"] for record in records] == list(HOSTILE_TITLES)


def test_csv_cells_starting_with_a_tab_or_a_carriage_return_are_escaped_too(tmp_path: Path) -> None:
    """A summary (the model's text, not stripped) may start with them; numbers are left as they are."""
    schema = pa.schema([("key", pa.string()), ("summary", pa.string()), ("score", pa.float64())])
    rows = [
        {"key": "t", "summary": "\t=1+1", "score": -0.5},
        {"key": "r", "summary": "\r-1", "score": 1.0},
        {"key": "n", "summary": None, "score": None},
    ]
    write_tables([pa.Table.from_pylist(rows, schema=schema)], tmp_path / "cells.csv", schema, "csv")
    with (tmp_path / "cells.csv").open(newline="", encoding="utf-8") as handle:
        written = [(row["summary"], row["score"]) for row in csv.DictReader(handle)]
    assert written == [("'\t=1+1", "-0.5"), ("'\r-1", "1.0"), ("", "")]
