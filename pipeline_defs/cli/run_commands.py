"""`pipeline run` (all pending work now, in this process) and `pipeline demo` (what `make demo` calls)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from datetime import datetime

from appdb.database import migrate, session_scope
from appdb.models import utcnow
from appdb.redaction import redact
from appdb.run_progress import FailedAttempt, failed_attempts, failure_counts, finished_since
from console.progress import RunProgress, add_progress_argument, progress_wanted, terminal_stream
from console.terminal import DETAILS, EXIT_ERROR, EXIT_FAILED, EXIT_OK, one_line
from domain.language.output_parsing import BlockedOutput
from pipeline_defs.catalog import declared_use_cases, reference_jobs
from pipeline_defs.cli.failed_work import describe_failures, error_lines
from pipeline_defs.settings import Settings


def register(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="process all pending work now")
    run.add_argument("--use-case", action="append", dest="use_cases", help="only this use case (repeatable)")
    run.add_argument("--verbose", action="store_true", help="show Dagster's own log lines")
    add_progress_argument(run)
    run.set_defaults(handler=cmd_run)


@dataclass
class RunOutcome:
    """What one `pipeline run` (or the demo's) did: its runs' reports, whether the runs and the reference
    data's loads succeeded, and the subjects whose attempt failed in it, per use case."""

    reports: list = field(default_factory=list)
    runs_ok: bool = True
    failed: dict[str, list[FailedAttempt]] = field(default_factory=dict)
    noun: str = "subject"

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


def run_all(settings: Settings, only: list[str] | None, verbose: bool, progress: str = "never") -> RunOutcome:
    """Load the declared plugins' reference data (`DomainPlugin.reference_jobs`: postings' taxonomy),
    then run every pending batch group by group; then per use case what was done and what failed (one
    line per error).

    With a progress line (a terminal, or `--progress always`) each group shows its counts, rate and
    time left as it goes; without, a line per run started."""
    from pipeline_defs.cli.database_blips import DatabaseBlips
    from pipeline_defs.cli.in_process_runs import (
        dagster_for,
        failed_reference_jobs,
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
        failed_jobs = watch.call(
            lambda: failed_reference_jobs(defs, instance, reference_jobs(settings), blips=blips)
        )
        for job in failed_jobs:
            print(f"error: {job} failed; the use cases that read its data wait for it", file=sys.stderr)
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
    plurals = {group.name: group.subject.plural for group in selected}
    for report in run_reports:
        for name, why in report.paused.items():
            print(f"{name}: paused, skipped: {why}")
        for line in report.hosts_lost:
            print(f"warning: {report.group}: {one_line(line)}", file=sys.stderr)
        print(
            f"{report.group} ({', '.join(report.use_cases)}): {report.pending_before} "
            f"{plurals.get(report.group, 'subjects')} pending, "
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
    outcome = RunOutcome(run_reports, not failed_jobs and not failed_runs)
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
        outcome = run_all(settings, args.use_cases, args.verbose, args.progress)
    except DatabaseUnreachable as exc:
        print(f"error: {one_line(str(exc))}; the pending work waits for the next run", file=sys.stderr)
        return EXIT_FAILED
    if outcome.failed_count:
        noun = outcome.noun if outcome.failed_count == 1 else f"{outcome.noun}s"
        print(
            f"error: the work of {outcome.failed_count} {noun} failed in this run; {DETAILS}", file=sys.stderr
        )
    return EXIT_OK if outcome.ok else EXIT_FAILED
