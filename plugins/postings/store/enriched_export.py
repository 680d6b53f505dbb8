"""Writing the enriched postings to a file, chunk by chunk: Parquet, CSV or JSONL, with the schema beside.

`export_enriched` is what `pipeline export` and the demo run. The rows stream from
`enriched_postings.enriched_table` (the producer the `enriched_postings` asset writes too), so memory
stays bounded by one chunk.
The file is written under a temporary name and renamed when complete: a failed export leaves the
previous file as it was, never a half-written one under the real name. Only a regular file (or a new
one) is written: the rename would put a file in place of a device, a FIFO, a socket or a directory.

A CSV cell that a spreadsheet would run as a formula (it starts with `=`, `+`, `-`, `@`, a tab or a
carriage return) is written with a `'` before it, OWASP's rule against CSV injection (docs/outputs.md).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import func, select

from appdb.database import session_scope
from appdb.local_files import not_a_regular_file
from domain.core import progress
from plugins.postings.store.enriched_postings import (
    DEFAULT_CHUNK_SIZE,
    ReadFilter,
    enriched_table,
    schema_document,
)
from plugins.postings.store.tables import Posting

FORMATS = ("parquet", "csv", "jsonl")


# OWASP, CSV injection: a cell starting with one of these is a formula (or becomes one) in a spreadsheet
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class NotARegularFileError(ValueError):
    """The export's path (or its schema's) names something other than a regular file."""


@dataclass(frozen=True)
class ExportReport:
    path: Path
    schema_path: Path
    rows: int


def schema_path_for(path: Path) -> Path:
    """Where the schema of an export is written: beside it, `PATH.schema.json`."""
    return path.with_name(path.name + ".schema.json")


def export_enriched(
    database_url: str,
    path: Path,
    read: ReadFilter | None = None,
    file_format: str = "parquet",
    concepts: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> ExportReport:
    """Stream the enriched postings (or their concepts) from the database into `path`, with progress
    (`domain.core.progress`): postings written of all postings, or rows written when a filter or the
    long table leaves the total unknown."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with session_scope(database_url) as session:
        filtered = concepts or (read is not None and read.since is not None)
        total = None
        if not filtered and progress.watched():
            total = session.execute(select(func.count()).select_from(Posting)).scalar_one()
        unit = "concept rows" if concepts else "postings"
        with progress.progress_task("export", total, unit) as task:
            table = enriched_table(session, read, concepts=concepts, chunk_size=chunk_size)
            return write_tables(_counted(table.chunks, task), path, table.schema, file_format)


def _counted(tables: Iterable[pa.Table], task: progress.ProgressTask) -> Iterator[pa.Table]:
    for table in tables:
        yield table
        task.advance(table.num_rows)


def write_tables(
    tables: Iterable[pa.Table], path: Path, schema: pa.Schema, fmt: str = "parquet"
) -> ExportReport:
    """Write every table (each of `schema`) to `path` in `fmt`, and the schema beside it."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    schema_path = schema_path_for(path)
    refuse_unless_regular(path, schema_path)
    partial = path.with_name(f".{path.name}.partial")
    rows = 0
    try:
        if fmt == "parquet":
            with (
                _open_new(partial, "wb") as sink,
                pq.ParquetWriter(sink, schema, compression="zstd") as writer,
            ):
                for table in tables:
                    writer.write_table(table)
                    rows += table.num_rows
        else:
            with _open_new(partial, "w") as stream:
                write = _csv_writer(stream, schema) if fmt == "csv" else _jsonl_writer(stream)
                for table in tables:
                    for record in table.to_pylist():
                        write(record)
                    rows += table.num_rows
        refuse_unless_regular(path)  # again: the export took a while, and the rename replaces anything
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    document = {**schema_document(schema), "format": fmt, "rows": rows}
    _write_atomically(schema_path, json.dumps(document, indent=2) + "\n")
    return ExportReport(path, schema_path, rows)


def refuse_unless_regular(*paths: Path) -> None:
    """A NotARegularFileError for the first of `paths` that exists and is not a regular file: as root,
    `--out /dev/full` replaced the device with a CSV file."""
    for path in paths:
        kind = not_a_regular_file(path)
        if kind is not None:
            raise NotARegularFileError(
                f"{path} is {kind}, not a regular file: an export replaces only a regular file "
                "(name a new or a regular file)"
            )


def _write_atomically(path: Path, text: str) -> None:
    """`text` into `path` under a temporary name, then renamed (a reader never sees half a file)."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        with _open_new(partial, "w") as stream:
            stream.write(text)
        refuse_unless_regular(path)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def _open_new(partial: Path, mode: str) -> Any:
    """The temporary file, created anew: one left by a killed export is removed first, and a link put
    in its place is never followed (opening it would write through it, into whatever it names)."""
    partial.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(partial, flags, 0o666)  # the umask decides, as for any file the user writes
    if "b" in mode:
        return os.fdopen(descriptor, mode)
    return os.fdopen(descriptor, mode, encoding="utf-8", newline="")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _jsonl_writer(stream: Any) -> Any:
    def write(record: dict[str, Any]) -> None:
        stream.write(json.dumps(record, default=_json_default, ensure_ascii=False) + "\n")

    return write


def _csv_writer(stream: Any, schema: pa.Schema) -> Any:
    """CSV has no nested values: lists (skills, concepts) are written as JSON text, times as ISO 8601;
    a text cell a spreadsheet would run as a formula gets a `'` before it (`FORMULA_STARTS`)."""
    writer = csv.DictWriter(stream, fieldnames=schema.names)
    writer.writeheader()
    nested = {field.name for field in schema if pa.types.is_list(field.type)}

    def write(record: dict[str, Any]) -> None:
        for name in nested:
            if record[name] is not None:
                record[name] = json.dumps(record[name], ensure_ascii=False)
        for name, value in record.items():
            if isinstance(value, datetime):
                record[name] = value.isoformat()
            elif isinstance(value, str) and value.startswith(FORMULA_STARTS):
                record[name] = "'" + value
        writer.writerow(record)

    return write
