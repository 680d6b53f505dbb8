"""`pipeline retire --finished-before DATE [--dry-run]`: delete finished subjects' Dagster partitions,
kind by kind (a subject is finished when every use case of its kind has a current output)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from appdb.database import session_scope
from console.terminal import EXIT_ERROR
from pipeline_defs.settings import Settings


def register(commands: argparse._SubParsersAction) -> None:
    retire = commands.add_parser(
        "retire",
        help="delete the Dagster partitions of subjects finished before a date (outputs and traces stay)",
    )
    retire.add_argument(
        "--finished-before", required=True, metavar="DATE", help="YYYY-MM-DD or an ISO time (UTC)"
    )
    retire.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    retire.set_defaults(handler=cmd_retire)


def cmd_retire(settings: Settings, args: argparse.Namespace) -> int:
    from assets.retention import retirable, retire_partitions
    from pipeline_defs.runtime.dagster_home import ensure_dagster_home
    from pipeline_defs.wiring import build_use_cases

    try:
        before = datetime.fromisoformat(args.finished_before)
    except ValueError:
        print(f"error: --finished-before takes YYYY-MM-DD, not {args.finished_before!r}", file=sys.stderr)
        return EXIT_ERROR
    if before.tzinfo is not None:  # the database keeps naive UTC times
        before = before.astimezone(UTC).replace(tzinfo=None)
    by_kind: dict[str, tuple[str, list]] = {}
    for item in build_use_cases(settings):
        kind = item.use_case.subject
        by_kind.setdefault(kind.name, (kind.plural, []))[1].append(item.spec)
    with session_scope(settings.database_url) as session:
        found = {name: retirable(session, specs, before) for name, (_, specs) in by_kind.items()}
    when = f"{before:%Y-%m-%d %H:%M} UTC"
    if args.dry_run:
        for name, keys in found.items():
            print(f"{len(keys)} {by_kind[name][0]} finished before {when}; dry run: nothing deleted")
        return 0
    from dagster import DagsterInstance

    ensure_dagster_home(settings)
    with DagsterInstance.get() as instance:
        for name, keys in found.items():
            retired = retire_partitions(instance, name, keys)
            print(
                f"{len(keys)} {by_kind[name][0]} finished before {when}; retired {retired} partitions "
                "(their outputs and traces stay in the application database)"
            )
    return 0
