"""Property tests: whatever a file or a model throws at the pipeline, it answers with a reason, never a crash.

- Ingest row validation: any record is either accepted as a clean, storable posting
  (and validating it again changes nothing, so re-ingest is a no-op) or rejected with a
  reason; it never raises anything else.
- Ingest of a JSONL file of arbitrary lines: never raises; every line is accounted for
  (loaded, rejected with its line number, or blank).
- Output parsing: for any model text, a schema-valid output or an ItemError (answers that
  Python's JSON parser refuses with other errors, such as a 5,000-digit number, are item errors too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from appdb.database import dispose, get_engine, migrate
from appdb.models import KEY_LENGTH
from domain.language.llm_types import ItemError
from domain.language.output_parsing import parse_output
from plugins.postings.store.ingest import (
    FORBIDDEN_KEY_SUBSTRINGS,
    OPTIONAL_TEXT_FIELDS,
    POSTING_FIELDS,
    RowError,
    content_hash,
    ingest_files,
    validate_row,
)
from plugins.postings.store.tables import Posting
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY

BOUNDED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Any code point, plus a heavy share of the characters that break things: NUL, lone surrogates (JSON
# can carry "\ud800", a CSV decoded with surrogateescape too), a BOM, separators, what partition keys forbid.
NASTY = [*"\x00\ud800\udfff\ufeff\u2028\x85\xa0,\n\t {\\", "..."]
any_text = st.lists(
    st.one_of(
        st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=()),
        st.sampled_from(NASTY),
        st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")),
    ),
    max_size=30,
).map("".join)
padded_text = st.tuples(
    st.sampled_from(["", " ", "\t", "\n "]), any_text, st.sampled_from(["", " ", "\r\n"])
).map("".join)
offsets = st.one_of(
    st.sampled_from([-(24 * 60 - 1), -60, 60, 24 * 60 - 1]),
    st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
).map(lambda minutes: timezone(timedelta(minutes=minutes)))
edge_datetimes = st.one_of(
    # the first and the last day there is: a time zone can push them out of range in UTC
    st.datetimes(max_value=datetime(1, 1, 1, 23, 59, 59)),
    st.datetimes(min_value=datetime(9999, 12, 31)),
    st.datetimes(),
)
iso_dates = st.one_of(
    st.dates().map(lambda value: value.isoformat()),
    edge_datetimes.map(lambda value: value.isoformat()),
    st.builds(lambda value, tz: value.replace(tzinfo=tz).isoformat(), edge_datetimes, offsets),
    edge_datetimes.map(lambda value: value.isoformat() + "Z"),
)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), any_text
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(any_text, children, max_size=3)
    ),
    max_leaves=6,
)
field_values = st.one_of(padded_text, iso_dates, json_values)
records = st.dictionaries(
    st.one_of(st.sampled_from(POSTING_FIELDS), any_text),
    field_values,
    max_size=len(POSTING_FIELDS) + 2,
)
postingish = st.fixed_dictionaries(
    {
        "key": st.one_of(padded_text, st.integers(), st.from_regex(r"[a-z0-9-]{1,12}", fullmatch=True)),
        "title": padded_text,
        "description": padded_text,
    },
    optional={name: st.one_of(st.none(), padded_text) for name in OPTIONAL_TEXT_FIELDS}
    | {"posted_at": st.one_of(st.none(), iso_dates, any_text)},
)


def _storable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


@BOUNDED
@given(st.one_of(postingish, records, json_values))
def test_any_record_is_either_a_clean_posting_or_rejected_with_a_reason(raw: Any) -> None:
    try:
        clean = validate_row(raw)
    except RowError as exc:
        assert str(exc)
        return
    assert set(clean) == set(POSTING_FIELDS)
    key = clean["key"]
    assert isinstance(key, str) and key == key.strip() and 0 < len(key) <= KEY_LENGTH
    assert not any(bad in key for bad in FORBIDDEN_KEY_SUBSTRINGS)
    for name in ("title", "description"):
        assert isinstance(clean[name], str) and clean[name] and clean[name] == clean[name].strip()
    for name in OPTIONAL_TEXT_FIELDS:
        assert clean[name] is None or (clean[name] and clean[name] == clean[name].strip())
    posted_at = clean["posted_at"]
    assert posted_at is None or (isinstance(posted_at, datetime) and posted_at.tzinfo is None)
    assert all(_storable(value) for value in clean.values() if isinstance(value, str))
    assert re.fullmatch(r"[0-9a-f]{64}", content_hash(clean))
    again = validate_row({**clean, "posted_at": posted_at.isoformat() if posted_at else None})
    assert again == clean and content_hash(again) == content_hash(clean)


# Valid-looking JSON that Python's parser refuses with other errors than JSONDecodeError.
ADVERSARIAL_JSON = st.one_of(
    st.integers(min_value=4301, max_value=6000).map(lambda digits: "9" * digits),  # int conversion limit
    st.integers(min_value=4301, max_value=6000).map(lambda digits: '{"summary": ' + "1" * digits + "}"),
    st.integers(min_value=2000, max_value=20000).map(lambda depth: "[" * depth + "]" * depth),  # recursion
    st.integers(min_value=2000, max_value=20000).map(lambda depth: '{"a": ' * depth + "1" + "}" * depth),
)


@BOUNDED
@given(st.one_of(iso_dates, any_text, json_values))
def test_any_posted_at_becomes_a_naive_utc_time_or_is_rejected(posted_at: Any) -> None:
    try:
        clean = validate_row({"key": "k", "title": "Cook", "description": "Cook.", "posted_at": posted_at})
    except RowError as exc:
        assert "posted_at" in str(exc)
        return
    value = clean["posted_at"]
    assert value is None or (isinstance(value, datetime) and value.tzinfo is None)


line_strategies = st.one_of(
    st.binary(max_size=80).map(lambda line: line.replace(b"\n", b" ").replace(b"\r", b" ")),
    st.tuples(st.one_of(postingish, records, json_values), st.booleans()).map(
        lambda pair: json.dumps(pair[0], ensure_ascii=pair[1]).encode("utf-8", errors="surrogatepass")
    ),
    st.sampled_from([b"", b"   ", b"{", b"[]", b"null", b'"text"', b"\xef\xbb\xbf{}", b"\xff\xfe"]),
    ADVERSARIAL_JSON.map(str.encode),
)


@pytest.fixture(scope="module")
def ingest_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sessionmaker[Session], Path]]:
    """One migrated SQLite database for all examples; each example runs in a transaction rolled back after."""
    directory = tmp_path_factory.mktemp("ingest_properties")
    url = f"sqlite:///{directory / 'app.db'}"
    migrate(url)
    yield sessionmaker(get_engine(url)), directory
    dispose(url)


@BOUNDED
@given(lines=st.lists(line_strategies, max_size=8), crlf=st.booleans())
def test_any_jsonl_file_is_ingested_line_by_line_without_crashing(
    ingest_db: tuple[sessionmaker[Session], Path], lines: list[bytes], crlf: bool
) -> None:
    factory, directory = ingest_db
    path = directory / "postings.jsonl"
    path.write_bytes((b"\r\n" if crlf else b"\n").join(lines))
    with factory() as session:
        session.begin()
        try:
            report = ingest_files(session, [path])
            stored = dict(session.execute(select(Posting.key, Posting.content_hash)).all())
        finally:
            session.rollback()
    rejected_lines = [rejection.line for rejection in report.rejected]
    assert len(rejected_lines) == len(set(rejected_lines))
    assert all(rejection.reason and rejection.file == str(path) for rejection in report.rejected)
    assert (report.updated, report.unchanged) == ([], [])  # each example starts from an empty database
    blank = [
        number
        for number, line in enumerate(lines, start=1)
        if not line.decode("utf-8-sig" if number == 1 else "utf-8", errors="replace").strip()
    ]
    assert set(rejected_lines).isdisjoint(blank) and set(rejected_lines) <= set(range(1, len(lines) + 1))
    if report.rejected and report.rejected[0].reason.startswith("the file is UTF-"):  # NULs as UTF-16 has
        assert report.rejected_count == 1 and not report.inserted  # refused whole: its lines are not lines
        return
    assert len(report.inserted) + len(rejected_lines) + len(blank) == len(lines)  # every line accounted for
    assert sorted(stored) == sorted(report.inserted)


ANSWER_SHAPES = st.one_of(
    any_text,
    json_values.map(json.dumps),
    st.fixed_dictionaries({"summary": any_text}).map(json.dumps),
    st.fixed_dictionaries({"summary": any_text}, optional={"extra": json_values}).map(json.dumps),
    st.tuples(
        st.sampled_from(["", " ", "\n", "Summary: "]), st.fixed_dictionaries({"summary": any_text})
    ).map(lambda pair: pair[0] + json.dumps(pair[1], ensure_ascii=False)),
)


def _assert_item_error_or_valid(text: str) -> None:
    try:
        value = parse_output(POSTING_SUMMARY, text)
    except ItemError as exc:
        assert str(exc)
        return
    jsonschema.validate(value, POSTING_SUMMARY.output_schema)
    assert value["summary"].strip() and value["summary"] == " ".join(value["summary"].split())


@BOUNDED
@given(ANSWER_SHAPES)
def test_any_model_answer_parses_to_a_valid_output_or_an_item_error(text: str) -> None:
    _assert_item_error_or_valid(text)


@pytest.mark.parametrize(
    "text", ["9" * 5000, '{"summary": ' + "1" * 5000 + "}", "[" * 100_000], ids=str.__len__
)
def test_answers_the_json_parser_cannot_convert_are_item_errors_too(text: str) -> None:
    _assert_item_error_or_valid(text)
