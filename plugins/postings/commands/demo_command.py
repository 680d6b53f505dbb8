"""`pipeline demo`: ingest the demo postings, run everything pending as `pipeline run` does, and list
each posting's summary, skills and concepts, then export the enriched postings."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from appdb import reports
from appdb.database import session_scope
from console.progress import add_progress_argument
from console.terminal import DETAILS, EXIT_FAILED, EXIT_OK, clip, one_line
from domain.core.commands import CommandContext
from plugins.postings.commands.export_command import default_export_path
from plugins.postings.commands.ingest_command import record_in_dagster
from plugins.postings.store.enriched_export import export_enriched
from plugins.postings.store.ingest import ingest_files
from plugins.postings.store.postings_kind import POSTINGS

DEMO_POSTINGS = Path(__file__).resolve().parents[1] / "demo_data" / "postings.jsonl"


def register(commands: argparse._SubParsersAction) -> None:
    demo = commands.add_parser(
        "demo", help="ingest the demo postings and summarize them with the embedded model"
    )
    demo.add_argument("--verbose", action="store_true")
    add_progress_argument(demo)
    demo.set_defaults(handler=cmd_demo)


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def cmd_demo(context: CommandContext, args: argparse.Namespace) -> int:
    started = time.perf_counter()
    with session_scope(context.database_url) as session:
        report = ingest_files(session, [DEMO_POSTINGS])
    print(f"demo postings: {report.summary()}")
    record_in_dagster(context, report, "pipeline demo")
    print(
        f"summarizing and extracting skills with the {context.core.llm_backend} backend "
        "(several seconds per posting on a CPU) ...",
        flush=True,
    )
    outcome = context.run_all(verbose=args.verbose, progress=args.progress)
    run_reports = outcome.reports
    wall = time.perf_counter() - started
    keys = report.inserted + report.updated + report.unchanged
    with session_scope(context.database_url) as session:
        print()
        print(render_postings(session, keys))
        latency = reports.mean_llm_latency(session, keys)
    runs = sum(len(item.runs) for item in run_reports)
    failed_runs = sum(len(item.failed_runs) for item in run_reports)
    print()
    print(f"wall time {wall:.1f}s for {len(keys)} postings; {_runs(runs)}, {failed_runs} failed runs")
    for use_case, mean_ms, count in latency:
        print(f"  {use_case}: mean LLM time {mean_ms / 1000:.1f}s per posting over {count} postings")
    exported = export_enriched(
        context.database_url, default_export_path(context.core.data_dir, False, "parquet")
    )
    print(f"enriched postings: {exported.rows} rows in {exported.path} (schema: docs/outputs.md)")
    print(f"  in pandas:      pd.read_parquet({str(exported.path)!r})")
    command, ui = (".venv/bin/pipeline", "make ui") if context.in_clone else ("pipeline", "pipeline ui")
    print(f"trace a posting:  {command} trace demo-001")
    print(f"quality, review:  {command} review")
    print(f"open the UI:      {ui}   (then http://127.0.0.1:3000)")
    return _demo_exit(outcome, command)


def _demo_exit(outcome: Any, command: str) -> int:
    """The demo did its job when its runs succeeded and every failed attempt was an answer a blocking
    check rejected: the small model states things a posting does not, the check blocks them, and the
    next run retries them (README). Any other failure (a script raising, an answer that cannot be
    read, a failed run) is the demo not working: exit 1."""
    if not outcome.failed_count:
        return EXIT_OK if outcome.runs_ok else EXIT_FAILED
    noun = POSTINGS.noun if outcome.failed_count == 1 else POSTINGS.plural
    if outcome.runs_ok and outcome.only_blocked_by_checks():
        print(
            f"note: the answers for {outcome.failed_count} {noun} were blocked by a check (the small model "
            f"often states what a posting does not); `{command} run` after the retry time above retries them"
        )
        return EXIT_OK
    print(f"error: the work of {outcome.failed_count} {noun} failed in the demo; {DETAILS}", file=sys.stderr)
    return EXIT_FAILED


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
