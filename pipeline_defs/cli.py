"""`pipeline`: the command line beside the Dagster UI.

pipeline migrate                 create or upgrade the application database
pipeline ingest FILE...          load postings (JSONL or CSV); exit 1 if any row was rejected
pipeline run [--use-case NAME]   process all pending work now, in this process
pipeline demo                    ingest the demo postings, summarize them, print a table
pipeline status                  per use case: current, pending, failed
pipeline trace KEY [--markdown FILE]   exact prompts, responses and outputs of one posting
pipeline ui                      start `dagster dev` on 127.0.0.1 with the project's DAGSTER_HOME
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from sqlalchemy import func, select

from appdb import work
from appdb.database import migrate
from appdb.ingest import ingest_files
from appdb.models import Interaction, Posting, UseCaseOutput, WorkItem
from pipeline_defs.settings import PROJECT_ROOT, Settings

DEMO_POSTINGS = PROJECT_ROOT / "pipeline_defs" / "demo_data" / "postings.jsonl"
EXIT_REJECTED = 1
EXIT_ERROR = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline", description="Job-posting enrichment with local LLMs.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="create or upgrade the application database")
    ingest = commands.add_parser("ingest", help="load postings from JSONL or CSV files")
    ingest.add_argument("files", nargs="+", type=Path)
    run = commands.add_parser("run", help="process all pending work now")
    run.add_argument("--use-case", action="append", dest="use_cases", help="only this use case (repeatable)")
    run.add_argument("--verbose", action="store_true", help="show Dagster's own log lines")
    demo = commands.add_parser(
        "demo", help="ingest the demo postings and summarize them with the embedded model"
    )
    demo.add_argument("--verbose", action="store_true")
    commands.add_parser("status", help="per use case: postings with a current output, pending, failed")
    trace = commands.add_parser("trace", help="show exact prompts, responses and outputs for a posting")
    trace.add_argument("key")
    trace.add_argument("--markdown", type=Path, help="also write the report as markdown to this file")
    commands.add_parser("ui", help="start dagster dev on 127.0.0.1:3000")
    args = parser.parse_args(argv)

    try:
        settings = Settings.from_env()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    handler = {
        "migrate": cmd_migrate,
        "ingest": cmd_ingest,
        "run": cmd_run,
        "demo": cmd_demo,
        "status": cmd_status,
        "trace": cmd_trace,
        "ui": cmd_ui,
    }[args.command]
    return handler(settings, args)


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    migrate(settings.database_url)
    print(f"application database is at the newest schema: {settings.database_url}")
    return 0


def cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope

    for path in args.files:
        if not path.is_file():
            print(f"error: {path}: no such file", file=sys.stderr)
            return EXIT_ERROR
    try:
        with session_scope(settings.database_url) as session:
            report = ingest_files(session, args.files)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for rejection in report.rejected:
        print(f"rejected {rejection}", file=sys.stderr)
    print(f"ingested {report.accepted} postings: {report.summary()}")
    return EXIT_REJECTED if report.rejected else 0


def _dagster(settings: Settings):  # noqa: ANN202 - returns (instance, defs, built, app_db)
    from dagster import DagsterInstance

    from pipeline_defs.dagster_home import ensure_dagster_home
    from pipeline_defs.definitions import build_definitions, build_use_cases
    from resources.app_database import AppDatabase

    ensure_dagster_home(settings)
    built = build_use_cases(settings)
    defs = build_definitions(settings, built=built)
    return DagsterInstance.get(), defs, built, AppDatabase(url=settings.database_url)


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.runner import run_pending

    instance, defs, built, app_db = _dagster(settings)
    known = {item.use_case.name for item in built}
    unknown = [name for name in args.use_cases or [] if name not in known]
    if unknown:
        print(f"error: no use case {unknown[0]!r} (declared: {', '.join(sorted(known))})", file=sys.stderr)
        return EXIT_ERROR
    print(f"LLM backend: {settings.llm_backend}; app database: {settings.database_url}")
    reports = run_pending(
        defs,
        built,
        instance,
        app_db,
        only=args.use_cases,
        verbose=args.verbose,
        on_run=lambda name, index, total: print(f"{name}: run {index} of {total} ...", flush=True),
    )
    for report in reports:
        print(
            f"{report.use_case}: {report.pending_before} pending, {len(report.runs)} runs "
            f"({len(report.failed_runs)} failed) in {report.seconds:.1f}s"
        )
    return 1 if any(report.failed_runs for report in reports) else 0


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    import pandas as pd

    from appdb.database import session_scope
    from pipeline_defs.runner import run_pending

    started = time.perf_counter()
    with session_scope(settings.database_url) as session:
        report = ingest_files(session, [DEMO_POSTINGS])
    print(f"demo postings: {report.summary()}")
    instance, defs, built, app_db = _dagster(settings)
    print(
        f"summarizing with the {settings.llm_backend} backend (a few seconds per posting on a CPU) ...",
        flush=True,
    )
    reports = run_pending(
        defs,
        built,
        instance,
        app_db,
        verbose=args.verbose,
        on_run=lambda name, index, total: print(f"{name}: run {index} of {total} ...", flush=True),
    )
    wall = time.perf_counter() - started
    keys = report.inserted + report.updated + report.unchanged
    with session_scope(settings.database_url) as session:
        rows = session.execute(
            select(Posting.key, Posting.title, UseCaseOutput.value, Interaction.latency_ms)
            .join(
                UseCaseOutput,
                (UseCaseOutput.posting_key == Posting.key) & (UseCaseOutput.use_case == "posting_summary"),
                isouter=True,
            )
            .join(Interaction, Interaction.id == UseCaseOutput.interaction_id, isouter=True)
            .where(Posting.key.in_(keys))
            .order_by(Posting.id)
        ).all()
    summaries = [_clip((value or {}).get("summary", "(none)"), 100) for _, _, value, _ in rows]
    table = pd.DataFrame(
        {
            "posting": [key for key, *_ in rows],
            "title": [_clip(title, 28).ljust(28) for _, title, _, _ in rows],
            "summary": [summary.ljust(100) for summary in summaries],
            "llm_s": [round(latency / 1000, 1) if latency else None for *_, latency in rows],
        }
    )
    print(table.to_string(index=False, justify="left"))
    latencies = [latency for *_, latency in rows if latency]
    runs = sum(len(item.runs) for item in reports)
    failed_runs = sum(len(item.failed_runs) for item in reports)
    print()
    print(
        f"wall time {wall:.1f}s for {len(rows)} postings; {runs} runs ({failed_runs} failed); "
        + (
            f"LLM time per summarized posting {sum(latencies) / len(latencies) / 1000:.1f}s (mean)"
            if latencies
            else "no new LLM calls (all summaries were already current)"
        )
    )
    print("trace a posting:  .venv/bin/pipeline trace demo-001")
    print("open the UI:      make ui   (then http://127.0.0.1:3000)")
    return 1 if failed_runs else 0


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope
    from pipeline_defs.definitions import build_use_cases

    built = build_use_cases(settings)
    with session_scope(settings.database_url) as session:
        total = session.scalar(select(func.count(Posting.id)))
        print(f"{total} postings in {settings.database_url}")
        for item in built:
            pending = len(work.find_pending_work(session, item.spec))
            states = dict(
                session.execute(
                    select(WorkItem.status, func.count())
                    .where(WorkItem.use_case == item.use_case.name)
                    .group_by(WorkItem.status)
                ).all()
            )
            print(
                f"{item.use_case.name} (version {item.use_case.version}, model {item.use_case.model}): "
                f"{pending} pending, {states.get('claimed', 0)} claimed, {states.get('failed', 0)} failed"
            )
    return 0


def cmd_trace(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope
    from pipeline_defs.definitions import build_use_cases
    from pipeline_defs.trace import PostingNotFound, render_markdown, render_text, trace_blocks

    specs = [item.spec for item in build_use_cases(settings)]
    try:
        with session_scope(settings.database_url) as session:
            blocks = list(trace_blocks(session, args.key, specs))
    except PostingNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(render_text(blocks), end="")
    if args.markdown:
        args.markdown.write_text(render_markdown(blocks))
        print(f"\nwrote {args.markdown}")
    return 0


def cmd_ui(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.dagster_home import ensure_dagster_home

    home = ensure_dagster_home(settings)
    print(f"DAGSTER_HOME={home}")
    dagster = Path(sys.executable).with_name("dagster")
    os.execv(
        str(dagster),
        [str(dagster), "dev", "-h", "127.0.0.1", "-p", "3000", "-w", str(PROJECT_ROOT / "workspace.yaml")],
    )


if __name__ == "__main__":
    sys.exit(main())
