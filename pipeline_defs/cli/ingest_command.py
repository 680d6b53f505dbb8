"""`pipeline ingest FILE...`: load postings; bad rows are reported as file:line: reason, good rows load."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appdb.database import session_scope
from domain.core.merge import resolve_merge
from pipeline_defs.cli.progress import add_progress_argument
from pipeline_defs.cli.terminal import EXIT_ERROR, EXIT_REJECTED
from pipeline_defs.settings import Settings
from plugins.postings.store.ingest import ingest_files


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("ingest", help="load postings from JSONL or CSV files")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--merge",
        default="replace",
        metavar="STRATEGY",
        help="a posting already stored: replace (default), keep_first, merge_fields, append_lists, "
        "or module:function (domain/core/merge.py)",
    )
    add_progress_argument(parser)
    parser.set_defaults(handler=cmd_ingest)


def cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    for path in args.files:
        if not path.is_file():
            print(f"error: {path}: no such file", file=sys.stderr)
            return EXIT_ERROR
    try:
        merge = None if args.merge == "replace" else resolve_merge(args.merge)
        with session_scope(settings.database_url) as session:
            report = ingest_files(session, args.files, merge)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for rejection in report.rejected:
        print(f"rejected {rejection}", file=sys.stderr)
    print(f"ingested {report.accepted} postings: {report.summary()}")
    return EXIT_REJECTED if report.rejected else 0
