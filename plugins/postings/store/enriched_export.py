"""Writing the enriched postings to a file, chunk by chunk: Parquet, CSV or JSONL, with the schema beside.

The rows stream from `enriched_postings.iter_enriched_tables`, so memory stays bounded by one chunk.
The file is written under a temporary name and renamed when complete: a failed export leaves the
previous file as it was, never a half-written one under the real name.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from plugins.postings.store.enriched_postings import schema_document

FORMATS = ("parquet", "csv", "jsonl")


@dataclass(frozen=True)
class ExportReport:
    path: Path
    schema_path: Path
    rows: int


def schema_path_for(path: Path) -> Path:
    """Where the schema of an export is written: beside it, `PATH.schema.json`."""
    return path.with_name(path.name + ".schema.json")


def write_tables(
    tables: Iterable[pa.Table], path: Path, schema: pa.Schema, fmt: str = "parquet"
) -> ExportReport:
    """Write every table (each of `schema`) to `path` in `fmt`, and the schema beside it."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    partial = path.with_name(f".{path.name}.partial")
    rows = 0
    try:
        if fmt == "parquet":
            with pq.ParquetWriter(partial, schema, compression="zstd") as writer:
                for table in tables:
                    writer.write_table(table)
                    rows += table.num_rows
        else:
            with partial.open("w", encoding="utf-8", newline="") as stream:
                write = _csv_writer(stream, schema) if fmt == "csv" else _jsonl_writer(stream)
                for table in tables:
                    for record in table.to_pylist():
                        write(record)
                    rows += table.num_rows
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    schema_path = schema_path_for(path)
    document = {**schema_document(schema), "format": fmt, "rows": rows}
    schema_path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return ExportReport(path, schema_path, rows)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _jsonl_writer(stream: Any) -> Any:
    def write(record: dict[str, Any]) -> None:
        stream.write(json.dumps(record, default=_json_default, ensure_ascii=False) + "\n")

    return write


def _csv_writer(stream: Any, schema: pa.Schema) -> Any:
    """CSV has no nested values: lists (skills, concepts) are written as JSON text, times as ISO 8601."""
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
        writer.writerow(record)

    return write
