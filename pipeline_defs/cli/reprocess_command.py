"""`pipeline reprocess --stale [--use-case NAME] [--dry-run]`: redo only the outdated outputs."""

from __future__ import annotations

import argparse
import sys

from appdb.database import session_scope
from console.progress import RunProgress, add_progress_argument, progress_wanted, terminal_stream
from console.terminal import EXIT_ERROR
from pipeline_defs.settings import Settings


def register(commands: argparse._SubParsersAction) -> None:
    reprocess = commands.add_parser("reprocess", help="redo outputs made by an older version, model or input")
    reprocess.add_argument(
        "--stale", action="store_true", required=True, help="only outdated outputs (required)"
    )
    reprocess.add_argument(
        "--use-case", action="append", dest="use_cases", help="only this use case (repeatable)"
    )
    reprocess.add_argument("--dry-run", action="store_true", help="count and plan, change nothing")
    reprocess.add_argument("--verbose", action="store_true", help="show Dagster's own log lines")
    add_progress_argument(reprocess)
    reprocess.set_defaults(handler=cmd_reprocess)


def cmd_reprocess(settings: Settings, args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from assets.factory import upstream_first
    from pipeline_defs.cli.stale_reprocessing import find_stale, reprocess_stale
    from pipeline_defs.definitions import build_definitions
    from pipeline_defs.runtime.dagster_home import ensure_dagster_home
    from pipeline_defs.wiring import build_use_cases
    from resources.app_database import AppDatabase

    built = build_use_cases(settings)
    declared = [item.use_case.name for item in built]
    unknown = [name for name in args.use_cases or [] if name not in declared]
    if unknown:
        print(f"error: no use case {unknown[0]!r} (declared: {', '.join(declared)})", file=sys.stderr)
        return EXIT_ERROR
    selected = [
        item for item in upstream_first(built) if not args.use_cases or item.use_case.name in args.use_cases
    ]
    with session_scope(settings.database_url) as session:
        found = {item.use_case.name: find_stale(session, item) for item in selected}
    for item in selected:
        stale = found[item.use_case.name]
        why = ", ".join(f"{count} {reason}" for reason, count in stale.reasons.most_common())
        waiting = ", ".join(f"{count} {reason}" for reason, count in stale.waiting.most_common())
        print(
            f"{item.use_case.name} (version {item.use_case.version}, {item.spec.model}): "
            f"{len(stale.keys) + sum(stale.waiting.values())} stale outputs"
            + (f" ({why})" if why else "")
            + (f"; not redone now: {waiting}" if waiting else "")
            + (
                f"; {len(stale.missing)} {item.use_case.subject.plural} without an output "
                "are left to `pipeline run`"
                if stale.missing
                else ""
            )
        )
    if args.dry_run:
        print("dry run: nothing changed (downstream outputs become stale once their upstream is redone)")
        return 0
    ensure_dagster_home(settings)
    defs = build_definitions(settings, built=built)
    selected_names = {item.use_case.name for item in selected}
    shown = RunProgress(settings.database_url, enabled=progress_wanted(args.progress, terminal_stream()))
    reports = reprocess_stale(
        defs,
        selected,
        DagsterInstance.get(),
        AppDatabase(url=settings.database_url),
        verbose=args.verbose,
        on_plan=lambda stale, runs: print(
            f"{stale.use_case}: redoing {len(stale.keys)} stale outputs in {runs} runs ...", flush=True
        ),
        track=shown.track if shown.enabled else None,
    )
    if not reports:
        print("no stale outputs: everything is current")
        return 0
    for report in reports:
        print(
            f"{report.use_case}: {report.stale_before} stale before, {report.stale_after} after; "
            f"{len(report.runs)} runs ({len(report.failed_runs)} failed)"
        )
    with session_scope(settings.database_url) as session:
        downstream = [
            (item.use_case.name, len(find_stale(session, item).keys))
            for item in built
            if item.use_case.name not in selected_names
        ]
    for name, count in downstream:
        if count:
            print(
                f"{name}: now {count} stale outputs (its upstream was redone): "
                f"`pipeline reprocess --stale --use-case {name}` or the sensor redoes them"
            )
    return 1 if any(report.failed_runs for report in reports) else 0
