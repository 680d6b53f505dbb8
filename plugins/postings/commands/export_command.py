"""`pipeline export [--format parquet|csv|jsonl] [--since T] [--out PATH]`: the enriched postings as a file.

One row per posting (docs/outputs.md), streamed chunk by chunk so a million postings fit in bounded
memory; the schema is written beside the file (`PATH.schema.json`). `--concepts` writes the long
table instead: one row per (posting, resolved mention).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from appdb.local_files import make_private_dirs
from console.progress import add_progress_argument
from console.terminal import EXIT_ERROR, EXIT_OK
from domain.core.commands import CommandContext
from plugins.postings.store.enriched_export import (
    FORMATS,
    NotARegularFileError,
    export_enriched,
    refuse_unless_regular,
    schema_path_for,
)
from plugins.postings.store.enriched_postings import DEFAULT_CHUNK_SIZE, OUTPUT_PREFIXES, ReadFilter

EXIT_WRITE_FAILED = 1  # the database was read but the file could not be written


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "export", help="write the enriched postings (summary, skills, concepts) to Parquet, CSV or JSONL"
    )
    parser.add_argument("--format", choices=FORMATS, default="parquet", dest="file_format")
    parser.add_argument("--out", type=Path, help="the file to write (default: <data dir>/exports/...)")
    parser.add_argument(
        "--since", metavar="TIME", help="only postings changed (or enriched) since this ISO time (UTC)"
    )
    parser.add_argument(
        "--use-case",
        action="append",
        dest="use_cases",
        choices=list(OUTPUT_PREFIXES),
        help="read only this use case's outputs (repeatable); the other columns stay empty",
    )
    parser.add_argument(
        "--current",
        action="store_true",
        help="leave out outputs that are stale (as `pipeline status` counts)",
    )
    parser.add_argument("--concepts", action="store_true", help="one row per (posting, concept) instead")
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK_SIZE, help=argparse.SUPPRESS)
    add_progress_argument(parser)
    parser.set_defaults(handler=cmd_export)


def parse_since(text: str) -> datetime:
    """An ISO date or time; one with an offset is converted to UTC, one without is taken as UTC."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--since {text!r} is not an ISO date or time (e.g. 2026-11-01 or 2026-11-01T08:00)"
        ) from None


def default_export_path(data_dir: Path, concepts: bool, file_format: str) -> Path:
    name = "posting_concepts" if concepts else "enriched_postings"
    return data_dir / "exports" / f"{name}.{file_format}"


def cmd_export(context: CommandContext, args: argparse.Namespace) -> int:
    try:
        since = parse_since(args.since) if args.since else None
        if args.chunk_size < 1:
            raise ValueError("--chunk-size must be at least 1")
        specs = None
        if args.current:
            specs = context.work_specs()
        read = ReadFilter(
            since=since, use_cases=tuple(args.use_cases) if args.use_cases else None, current_specs=specs
        )
        read.read_use_cases()  # an undeclared use case is an error before anything is written
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    path = args.out or default_export_path(context.core.data_dir, args.concepts, args.file_format)
    try:
        refuse_unless_regular(path, schema_path_for(path))  # before the database is read
        if args.out is None:  # in the data directory: a new one is the owner's alone
            make_private_dirs(path.parent)
        report = export_enriched(
            context.database_url, path, read, args.file_format, args.concepts, args.chunk_size
        )
    except NotARegularFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"error: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    what = "(posting, concept) rows" if args.concepts else "postings"
    print(f"wrote {report.rows} {what} to {report.path} ({args.file_format}); schema: {report.schema_path}")
    return EXIT_OK
