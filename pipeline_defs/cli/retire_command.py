"""`pipeline retire --finished-before DATE [--dry-run]`: delete finished postings' Dagster partitions."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from appdb.database import session_scope
from assets.retention import retirable, retire_partitions
from pipeline_defs.cli.terminal import EXIT_ERROR
from pipeline_defs.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases


def register(commands: argparse._SubParsersAction) -> None:
    retire = commands.add_parser(
        "retire",
        help="delete the Dagster partitions of postings finished before a date (outputs and traces stay)",
    )
    retire.add_argument(
        "--finished-before", required=True, metavar="DATE", help="YYYY-MM-DD or an ISO time (UTC)"
    )
    retire.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    retire.set_defaults(handler=cmd_retire)


def cmd_retire(settings: Settings, args: argparse.Namespace) -> int:
    try:
        before = datetime.fromisoformat(args.finished_before)
    except ValueError:
        print(f"error: --finished-before takes YYYY-MM-DD, not {args.finished_before!r}", file=sys.stderr)
        return EXIT_ERROR
    if before.tzinfo is not None:  # the database keeps naive UTC times
        before = before.astimezone(UTC).replace(tzinfo=None)
    specs = [item.spec for item in build_use_cases(settings)]
    with session_scope(settings.database_url) as session:
        keys = retirable(session, specs, before)
    if args.dry_run:
        print(f"{len(keys)} postings finished before {before:%Y-%m-%d %H:%M} UTC; dry run: nothing deleted")
        return 0
    from dagster import DagsterInstance

    ensure_dagster_home(settings)
    with DagsterInstance.get() as instance:
        retired = retire_partitions(instance, keys)
    print(
        f"{len(keys)} postings finished before {before:%Y-%m-%d %H:%M} UTC; retired {retired} partitions "
        "(their outputs and traces stay in the application database)"
    )
    return 0
