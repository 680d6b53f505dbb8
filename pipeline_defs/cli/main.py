"""`pipeline`: the command line beside the Dagster UI.

pipeline migrate                 create or upgrade the application database; create DAGSTER_HOME
pipeline config [--json]         the effective configuration: every setting, its value, where it came from
pipeline ingest FILE...          load postings (JSONL or CSV); exit 1 if any row was rejected
pipeline run [--use-case NAME]   process all pending work now, in this process
pipeline demo                    ingest the demo postings, summarize them, print a table
pipeline status [--by-source]    per use case: current, pending, failed; paused use cases
                                 (--by-source: interactions per hour by source)
pipeline events [--kind K] [--hours N]   discovery counts, pauses/resumes, errors by class, cost per run
pipeline trace KEY [--markdown FILE]   exact prompts, responses and outputs of one posting
pipeline export [--format parquet|csv|jsonl] [--since T] [--out PATH]   the enriched postings as a file
pipeline failures [--use-case NAME]    parked items (failed max_attempts times) with their last error
pipeline retry (--all | --use-case NAME | --posting KEY...)   re-queue parked items
pipeline discover --shadow [--use-case NAME] [--expect FILE] [--json]
                                 what each use case would process now; claims and writes nothing
pipeline pauses                  use cases paused by the circuit breaker: why, and until when
pipeline resume [--use-case NAME]      end pauses now
pipeline ui [--port N]           start `dagster dev` on 127.0.0.1 with the project's DAGSTER_HOME (the
                                 webserver refuses foreign-Host and cross-origin GraphQL requests)
pipeline webserver [--host H] [--port N]   that guarded webserver alone (a service)
pipeline daemon                  dagster-daemon alone (a service), its sensors woken when postings arrive
pipeline review [...]            the gym: quality figures, review items, accept/reject/correct
pipeline autodo scan|list|pick|show|done|wontfix|note|prio|split|dep|tree|scope   TODO work items
pipeline reprocess --stale [--use-case NAME] [--dry-run]   redo only outdated outputs
pipeline retire --finished-before DATE [--dry-run]   delete finished postings' Dagster partitions
"""

from __future__ import annotations

import argparse
import sys
import traceback
from types import TracebackType

from pipeline_defs.cli import (
    autodo_commands,
    config_command,
    discover_command,
    events_command,
    export_command,
    ingest_command,
    reprocess_command,
    retire_command,
    review_commands,
    run_commands,
    setup_commands,
    state_commands,
    trace_command,
    ui_command,
)
from pipeline_defs.cli.terminal import EXIT_ERROR, SafeStream, safe_text
from pipeline_defs.settings import Settings

COMMAND_MODULES = (
    setup_commands,
    config_command,
    ui_command,
    ingest_command,
    run_commands,
    state_commands,
    trace_command,
    export_command,
    discover_command,
    review_commands,
    reprocess_command,
    retire_command,
    events_command,
    autodo_commands,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipeline", description="Job-posting enrichment with local LLMs.")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command with stdout and stderr behind `SafeStream`: whatever a command, a log line or an
    error prints, no credential or terminal control sequence reaches the terminal."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)
    sys.excepthook = _safe_excepthook  # a traceback that ends the command goes through it too
    try:
        return _run_command(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _safe_excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    sys.stderr.write(safe_text("".join(traceback.format_exception(kind, error, trace))))


def _run_command(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return args.handler(settings, args)


if __name__ == "__main__":
    sys.exit(main())
