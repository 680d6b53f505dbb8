"""`pipeline run` (all pending work now, in this process) and `pipeline demo` (what `make demo` calls)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime

from appdb import reports
from appdb.database import migrate, session_scope
from appdb.models import utcnow
from appdb.redaction import redact
from appdb.run_progress import FailedAttempt, failed_attempts, failure_counts, finished_since
from console.progress import RunProgress, add_progress_argument, progress_wanted, terminal_stream
from console.terminal import EXIT_ERROR, EXIT_FAILED, EXIT_OK, clip, one_line
from domain.language.output_parsing import BlockedOutput
from pipeline_defs.catalog import declared_use_cases
from pipeline_defs.cli.failed_work import DETAILS, describe_failures, error_lines
from pipeline_defs.cli.ingest_command import record_in_dagster
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


@dataclass
class RunOutcome:
    """What one `pipeline run` (or the demo's) did: its runs' reports, whether the runs and the taxonomy
    load succeeded, and the subjects whose attempt failed in it, per use case."""

    reports: list = field(default_factory=list)
    runs_ok: bool = True
    failed: dict[str, list[FailedAttempt]] = field(default_factory=dict)
    noun: str = "posting"

    @property
    def failed_count(self) -> int:
        """Subjects with a failed attempt in any use case (one that failed in two counts once)."""
        return len({attempt.key for attempts in self.failed.values() for attempt in attempts})

    @property
    def ok(self) -> bool:
        """Every run succeeded and no subject's work failed."""
        return self.runs_ok and not self.failed_count

    def only_blocked_by_checks(self) -> bool:
        """Every failed attempt was an answer a blocking check rejected (retried with backoff)."""
        return all(
            attempt.error.startswith(BlockedOutput.PREFIX)
            for attempts in self.failed.values()
            for attempt in attempts
        )


def _run_all(
    settings: Settings, only: list[str] | None, verbose: bool, progress: str = "never"
) -> RunOutcome:
    """Load the taxonomy, then run every pending batch group by group; then per use case what was done
    and what failed (one line per error).

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

    started = utcnow()
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
                hosts=settings.resolved_hosts(),
            )
        )
    for report in run_reports:
        for name, why in report.paused.items():
            print(f"{name}: paused, skipped: {why}")
        for line in report.hosts_lost:
            print(f"warning: {report.group}: {one_line(line)}", file=sys.stderr)
        print(
            f"{report.group} ({', '.join(report.use_cases)}): {report.pending_before} postings pending, "
            f"{_runs(len(report.runs))}, {len(report.failed_runs)} failed runs in {report.seconds:.1f}s"
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
    # a run whose host went down failed, but its work was planned again on the other hosts
    failed_runs = [
        run for report in run_reports for run in report.failed_runs if run not in report.rerouted_runs
    ]
    outcome = RunOutcome(run_reports, taxonomy_ok and not failed_runs)
    use_cases = {name: group.subject.noun for group in selected for name in group.use_case_names}
    outcome.failed = _print_outcomes(settings.database_url, use_cases, started)
    outcome.noun = next(iter(use_cases.values()), outcome.noun)
    return outcome


def _print_outcomes(
    database_url: str, nouns: dict[str, str], since: datetime
) -> dict[str, list[FailedAttempt]]:
    """Per use case that worked since `since`: the subjects done, those whose attempt failed and what
    happens to them next, and one line per error. Returns the failed attempts by use case."""
    names = list(nouns)
    with session_scope(database_url) as session:
        finished = finished_since(session, names, since)
        counts = failure_counts(session, names, since)
        failed = {
            name: failed_attempts(session, name, since, limit=None) for name in names if counts[name].failed
        }
    for name, noun in nouns.items():
        done, count = finished[name].done, counts[name]
        if not done and not count.failed:
            continue
        line = f"{name}: {done} {noun if done == 1 else noun + 's'} done"
        if count.failed:
            print(f"{line}, {describe_failures(count)}:")
            for error in error_lines(failed[name], noun, count.failed):
                print(error)
        else:
            print(line)
    return failed


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


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
        outcome = _run_all(settings, args.use_cases, args.verbose, args.progress)
    except DatabaseUnreachable as exc:
        print(f"error: {one_line(str(exc))}; the pending work waits for the next run", file=sys.stderr)
        return EXIT_FAILED
    if outcome.failed_count:
        noun = outcome.noun if outcome.failed_count == 1 else f"{outcome.noun}s"
        print(
            f"error: the work of {outcome.failed_count} {noun} failed in this run; {DETAILS}", file=sys.stderr
        )
    return EXIT_OK if outcome.ok else EXIT_FAILED


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
    outcome = _run_all(settings, None, args.verbose, args.progress)
    run_reports = outcome.reports
    wall = time.perf_counter() - started
    keys = report.inserted + report.updated + report.unchanged
    with session_scope(settings.database_url) as session:
        print()
        print(render_postings(session, keys))
        latency = reports.mean_llm_latency(session, keys)
    runs = sum(len(item.runs) for item in run_reports)
    failed_runs = sum(len(item.failed_runs) for item in run_reports)
    print()
    print(f"wall time {wall:.1f}s for {len(keys)} postings; {_runs(runs)}, {failed_runs} failed runs")
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
    return _demo_exit(outcome, command)


def _demo_exit(outcome: RunOutcome, command: str) -> int:
    """The demo did its job when its runs succeeded and every failed attempt was an answer a blocking
    check rejected: the small model states things a posting does not, the check blocks them, and the
    next run retries them (README). Any other failure (a script raising, an answer that cannot be
    read, a failed run) is the demo not working: exit 1."""
    if not outcome.failed_count:
        return EXIT_OK if outcome.runs_ok else EXIT_FAILED
    noun = outcome.noun if outcome.failed_count == 1 else f"{outcome.noun}s"
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
