"""`pipeline ingest FILE...`: load postings; bad rows are reported as file:line: reason, good rows load."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appdb.database import session_scope
from console.progress import add_progress_argument
from console.terminal import EXIT_ERROR, EXIT_REJECTED, safe_text
from domain.core.commands import CommandContext
from domain.core.merge import resolve_merge
from plugins.postings.store.ingest import IngestReport, Rejection, ingest_files


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


def cmd_ingest(context: CommandContext, args: argparse.Namespace) -> int:
    for path in args.files:
        if not path.is_file():
            print(f"error: {path}: no such file", file=sys.stderr)
            return EXIT_ERROR
    try:
        merge = None if args.merge == "replace" else resolve_merge(args.merge)
        with session_scope(context.database_url) as session:
            report = ingest_files(session, args.files, merge, on_rejection=print_rejection)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"ingested {report.accepted} postings: {report.summary()}")
    record_in_dagster(context, report, "pipeline ingest")
    return EXIT_REJECTED if report.rejected_count else 0


def print_rejection(rejection: Rejection) -> None:
    """Each rejection on stderr as it is found (none is held: a file of bad lines fits in memory)."""
    print(f"rejected {rejection}", file=sys.stderr)


def record_in_dagster(context: CommandContext, report: IngestReport, source: str) -> None:
    """Tell Dagster the postings were loaded (a materialization of `postings` in its storage: the UI's
    backfills then see their input as materialized). Only when rows were added or changed; Dagster is
    imported only then. A failure here is a warning: the postings are loaded and the sensors find them."""
    if not (report.inserted or report.updated):
        return
    try:
        from plugins.postings.postings_asset import report_ingest  # Dagster, only now
        from plugins.postings.store.postings_kind import POSTINGS

        with session_scope(context.database_url) as session:
            total = POSTINGS.table.count(session)
        with context.dagster_instance() as instance:
            report_ingest(instance, report, total, source)
    except Exception as exc:  # the load itself is done and committed
        print(
            f"warning: the load was not recorded in Dagster's storage: {safe_text(str(exc))}", file=sys.stderr
        )
