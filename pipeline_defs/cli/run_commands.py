"""`pipeline run` (all pending work now, in this process) and `pipeline demo` (what `make demo` calls)."""

from __future__ import annotations

import argparse
import sys
import time

from appdb import reports
from appdb.database import migrate, session_scope
from appdb.redaction import redact
from pipeline_defs.catalog import declared_use_cases
from pipeline_defs.cli.ingest_command import record_in_dagster
from pipeline_defs.cli.progress import RunProgress, add_progress_argument, progress_wanted, terminal_stream
from pipeline_defs.cli.terminal import EXIT_ERROR, clip, one_line
from pipeline_defs.settings import PROJECT_ROOT, Settings, running_from_a_clone
from plugins.postings.store.ingest import ingest_files
from plugins.postings.store.postings_kind import POSTINGS

DEMO_POSTINGS = PROJECT_ROOT / "plugins" / "postings" / "demo_data" / "postings.jsonl"


def register(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="process all pending work now")
    run.add_argument("--use-case", action="append", dest="use_cases", help="only this use case (repeatable)")
    run.add_argument("--verbose", action="store_true", help="show Dagster's own log lines")
    add_progress_argument(run)
    run.set_defaults(handler=cmd_run)
    demo = commands.add_parser(
        "demo", help="ingest the demo postings and summarize them with the embedded model"
    )
    demo.add_argument("--verbose", action="store_true")
    add_progress_argument(demo)
    demo.set_defaults(handler=cmd_demo)


def _run_all(
    settings: Settings, only: list[str] | None, verbose: bool, progress: str = "never"
) -> tuple[list, bool]:
    """Load the taxonomy, then run every pending batch group by group; (reports, all succeeded).

    With a progress line (a terminal, or `--progress always`) each group shows its counts, rate and
    time left as it goes; without, a line per run started."""
    from pipeline_defs.cli.database_blips import DatabaseBlips
    from pipeline_defs.cli.in_process_runs import (
        dagster_for,
        load_reference_data,
        run_pending,
        single_use_case_groups,
    )
    from pipeline_defs.cli.run_watch import RunWatch

    shown = RunProgress(settings.database_url, enabled=progress_wanted(progress, terminal_stream()))
    instance, defs, groups, app_db = dagster_for(settings)
    selected = single_use_case_groups(groups, only) if only else groups
    blips = DatabaseBlips(app_db, settings.database_retry_seconds)  # the database away a while: waited for
    with RunWatch(instance, app_db, handle_signals=True) as watch:  # Ctrl-C, SIGTERM: stop at once
        taxonomy_ok = watch.call(lambda: load_reference_data(defs, instance, blips=blips))
        if not taxonomy_ok:
            print(
                "error: loading the skills taxonomy failed; skill_entities will wait for it", file=sys.stderr
            )
        run_reports = watch.call(
            lambda: run_pending(
                defs,
                selected,
                instance,
                app_db,
                verbose=verbose,
                on_run=None if shown.enabled else _print_run_started,
                watch=watch,
                track=shown.track,
                blips=blips,
            )
        )
    for report in run_reports:
        for name, why in report.paused.items():
            print(f"{name}: paused, skipped: {why}")
        print(
            f"{report.group} ({', '.join(report.use_cases)}): {report.pending_before} postings pending, "
            f"{len(report.runs)} runs ({len(report.failed_runs)} failed) in {report.seconds:.1f}s"
        )
        if report.stopped:
            print(f"error: {report.group}: {report.stopped}", file=sys.stderr)
        elif report.failures:
            for line in report.failures:
                print(f"error: {report.group}: {one_line(line)}", file=sys.stderr)
            if not verbose:
                print(
                    "  (the stack traces: `pipeline run --verbose`, or each run's page in the UI)",
                    file=sys.stderr,
                )
    return run_reports, taxonomy_ok and not any(report.failed_runs for report in run_reports)


def _print_run_started(group: str, index: int, total: int) -> None:
    print(f"{group}: run {index} of {total} ...", flush=True)


def _declared_use_case_names(settings: Settings) -> set[str]:
    return {use_case.name for use_case in declared_use_cases(settings)}


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    known = _declared_use_case_names(settings)
    unknown = [name for name in args.use_cases or [] if name not in known]
    if unknown:
        print(f"error: no use case {unknown[0]!r} (declared: {', '.join(sorted(known))})", file=sys.stderr)
        return EXIT_ERROR
    migrate(settings.database_url)  # a database that cannot be opened: one line now, not amid the runs
    print(f"LLM backend: {settings.llm_backend}; app database: {redact(settings.database_url)}")
    from pipeline_defs.cli.database_blips import DatabaseUnreachable

    try:
        _, ok = _run_all(settings, args.use_cases, args.verbose, args.progress)
    except DatabaseUnreachable as exc:
        print(f"error: {one_line(str(exc))}; the pending work waits for the next run", file=sys.stderr)
        return 1
    return 0 if ok else 1


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    started = time.perf_counter()
    with session_scope(settings.database_url) as session:
        report = ingest_files(session, [DEMO_POSTINGS])
    print(f"demo postings: {report.summary()}")
    record_in_dagster(settings, report, "pipeline demo")
    print(
        f"summarizing and extracting skills with the {settings.llm_backend} backend "
        "(several seconds per posting on a CPU) ...",
        flush=True,
    )
    run_reports, ok = _run_all(settings, None, args.verbose, args.progress)
    wall = time.perf_counter() - started
    keys = report.inserted + report.updated + report.unchanged
    with session_scope(settings.database_url) as session:
        print()
        print(render_postings(session, keys))
        latency = reports.mean_llm_latency(session, keys)
    runs = sum(len(item.runs) for item in run_reports)
    failed_runs = sum(len(item.failed_runs) for item in run_reports)
    print()
    print(f"wall time {wall:.1f}s for {len(keys)} postings; {runs} runs ({failed_runs} failed)")
    for use_case, mean_ms, count in latency:
        print(f"  {use_case}: mean LLM time {mean_ms / 1000:.1f}s per posting over {count} postings")
    from pipeline_defs.cli.export_command import default_export_path, export_enriched

    exported = export_enriched(settings.database_url, default_export_path(settings, False, "parquet"))
    print(f"enriched postings: {exported.rows} rows in {exported.path} (schema: docs/outputs.md)")
    print(f"  in pandas:      pd.read_parquet({str(exported.path)!r})")
    command, ui = (".venv/bin/pipeline", "make ui") if running_from_a_clone() else ("pipeline", "pipeline ui")
    print(f"trace a posting:  {command} trace demo-001")
    print(f"quality, review:  {command} review")
    print(f"open the UI:      {ui}   (then http://127.0.0.1:3000)")
    return 0 if ok else 1


def _why_none(item) -> str:  # noqa: ANN001 - a WorkItem or None
    """What a posting without a summary shows: why its last attempt failed and what happens next."""
    if item is None:
        return "(none yet)"
    if item.status == "failed":
        after = f"parked after {item.attempts} attempts, `pipeline retry` re-queues it"
    elif item.next_attempt_at:
        after = f"retried by a run after {item.next_attempt_at:%H:%M:%S} UTC"
    else:
        after = "retried by the next run"
    return f"(none yet, {after}: {item.last_error})"


def render_postings(session, keys: list[str]) -> str:  # noqa: ANN001 - a SQLAlchemy session
    """Each posting's summary, skills and resolved concepts, as the demo prints them."""
    outputs = reports.output_values(session, keys)
    waiting = reports.waiting_work(session, "posting_summary", keys)
    lines = []
    rows = POSTINGS.table.rows(session, keys)
    for posting in sorted(rows.values(), key=lambda row: row.id):
        summary = outputs.get((posting.key, "posting_summary"), {}).get("summary") or _why_none(
            waiting.get(posting.key)
        )
        company = posting.company or "company not stated"
        lines.append(f"{one_line(posting.key)}  {one_line(posting.title)} ({one_line(company)})")
        lines.append(f"  summary:  {clip(summary, 200)}")
        skills = outputs.get((posting.key, "posting_skills"))
        entities = outputs.get((posting.key, "skill_entities"))
        if skills is None:
            lines.append("  skills:   (none yet)")
        elif entities is None:
            mentions = ", ".join(skill["mention"] for skill in skills["skills"])
            lines.append(f"  skills:   {clip(mentions, 200)}")
        else:
            resolved = [
                f"{entity['mention']} -> "
                + (f"{entity['concept_label']} ({entity['stage']})" if entity["concept_uri"] else "unmatched")
                for entity in entities["entities"]
            ]
            lines.append(f"  skills:   {one_line('; '.join(resolved)) or '(none found)'}")
        if skills and skills.get("ungrounded"):
            lines.append(f"  dropped (not in the posting): {one_line(', '.join(skills['ungrounded']))}")
        assessment = outputs.get((posting.key, "posting_assessment"))  # PIPELINE_EXTRA_USE_CASES
        if assessment:
            lines.append(f"  profile:  {clip(assessment['profile'], 200)}")
    return "\n".join(lines)
