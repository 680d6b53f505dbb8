"""`pipeline`: the command line beside the Dagster UI.

pipeline migrate                 create or upgrade the application database; create DAGSTER_HOME
pipeline config [--json] [--check]   the effective configuration: every setting, its value, where it
                                 came from; each use case's model; --check: does its server serve it
pipeline ingest FILE...          load postings (JSONL or CSV); exit 1 if any row was rejected
pipeline run [--use-case NAME] [--progress auto|always|never]   process all pending work now, in
                                 this process, with a progress line on a terminal; per use case the
                                 postings done and failed (one line per error); exit 1 if any failed
pipeline demo                    ingest the demo postings, summarize them, print a table
pipeline status [--by-source] [--json]   per use case: pending, claimed, failed (waiting for a retry,
                                 parked; one line per error); paused use cases
                                 (--by-source: interactions per hour by source)
pipeline events [--kind K] [--hours N] [--json]   discovery counts, pauses/resumes, errors by class,
                                 cost per run
pipeline trace KEY [--full] [--markdown FILE]   one posting's use cases (state, model, version);
                                 --full: the exact prompts, responses and outputs
pipeline failures [--use-case NAME] [--json]   parked items (failed max_attempts times) with their last error
pipeline export [--format parquet|csv|jsonl] [--since T] [--out PATH]   the enriched postings as a file
pipeline retry (--all | --use-case NAME | --posting KEY...)   re-queue parked items
pipeline discover --shadow [--use-case NAME] [--expect FILE] [--json]
                                 what each use case would process now; claims and writes nothing
pipeline pauses [--json]         use cases paused by the circuit breaker: why, and until when
pipeline resume [--use-case NAME]      end pauses now
pipeline ui [--port N]           start `dagster dev` on 127.0.0.1 with the project's DAGSTER_HOME (the
                                 webserver refuses foreign-Host and cross-origin GraphQL requests)
pipeline webserver [--host H] [--port N]   that guarded webserver alone (a service)
pipeline daemon                  dagster-daemon alone (a service), its sensors woken when postings arrive
pipeline worker [--queue NAME]...   a Celery worker for the batch runs' steps (PIPELINE_EXECUTOR=celery)
pipeline review [...]            the gym: quality figures, review items, accept/reject/correct
pipeline autodo scan|list|pick|show|done|wontfix|note|prio|split|dep|tree|scope   TODO work items
pipeline reprocess --stale [--use-case NAME] [--dry-run]   redo only outdated outputs
pipeline retire --finished-before DATE [--dry-run]   delete finished postings' Dagster partitions
pipeline --version               the installed version

Exit codes: 0 done, 1 the command ran and something failed (a closed output pipe too), 2 usage (bad
arguments, unknown names, settings that cannot be used, the database or data directory unusable).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from importlib import import_module
from types import TracebackType
from typing import Any, NamedTuple, TextIO

from console.terminal import EXIT_ERROR, EXIT_FAILED, SafeStream, hide_dagster_warnings, safe_text

DISTRIBUTION = "posting-enrichment"


class Command(NamedTuple):
    module: str  # in pipeline_defs.cli (or a plugin's full module name): imported only when it runs
    help: str  # what `pipeline --help` lists (the module registers the same text; a test keeps them equal)
    plugin: str = ""  # the plugin whose command it is: its handler takes a `CommandContext`


# The generic commands, in the order `pipeline --help` lists them, then each plugin's (`all_commands`).
# `pipeline --help` imports none of the modules; `pipeline status` imports state_commands alone
# (tests/unit/test_cli_startup.py).
COMMANDS: dict[str, Command] = {
    "migrate": Command(
        "setup_commands", "create or upgrade the application database; create the Dagster home"
    ),
    "config": Command(
        "config_command", "the effective configuration, where each value came from, and each use case's model"
    ),
    "ui": Command(
        "ui_command", "start dagster dev (webserver and daemon) on 127.0.0.1:3000, the webserver guarded"
    ),
    "webserver": Command(
        "ui_command", "the guarded dagster-webserver alone (a service; the daemon runs apart)"
    ),
    "daemon": Command("ui_command", "dagster-daemon alone (a service), its sensors woken when work arrives"),
    "worker": Command(
        "worker_command",
        "a Celery worker for the batch runs' steps (PIPELINE_EXECUTOR=celery), on the queues named",
    ),
    "run": Command("run_commands", "process all pending work now"),
    "status": Command("state_commands", "per use case: subjects with a current output, pending, failed"),
    "failures": Command("state_commands", "list parked items (failed too often) and their last error"),
    "retry": Command("state_commands", "re-queue parked items with a fresh set of attempts"),
    "pauses": Command("state_commands", "use cases paused by the circuit breaker, why, and until when"),
    "resume": Command("state_commands", "end pauses now (all, or the named use cases)"),
    "trace": Command(
        "trace_command",
        "a subject's use cases, a line each (state, model, version); --full: the exact prompts, "
        "responses and outputs",
    ),
    "discover": Command(
        "discover_command",
        "show what each use case would process now (with --shadow: claims and writes nothing)",
    ),
    "review": Command("review_commands", "the gym: quality figures and the review queue"),
    "reprocess": Command("reprocess_command", "redo outputs made by an older version, model or input"),
    "retire": Command(
        "retire_command",
        "delete the Dagster partitions of subjects finished before a date (outputs and traces stay)",
    ),
    "events": Command(
        "events_command", "the event log: discovery counts, pauses and resumes, errors by class, cost per run"
    ),
}


def all_commands() -> dict[str, Command]:
    """The generic commands, then each registered plugin's (from its light `commands` declaration)."""
    from pipeline_defs.registry import registered_commands

    commands = dict(COMMANDS)
    for name, (plugin, declared) in registered_commands().items():
        if name in commands:
            raise ValueError(f"plugin {plugin}: `pipeline {name}` is a command of the CLI already")
        commands[name] = Command(declared.module, declared.help, plugin)
    return commands


def module_name(command: Command) -> str:
    return command.module if command.plugin else f"pipeline_defs.cli.{command.module}"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the command `argv` names, in full; every other command by name and help alone.

    Only that command's module is imported (with `argv=None`: every module, the whole parser), and
    the modules import the heavy parts (Dagster, the code location) inside the handlers that need them,
    so `--help` and the light commands answer at once."""
    parser = argparse.ArgumentParser(
        prog="pipeline",
        description="The declared plugins' use cases on their subjects, with local LLMs.",
        epilog="exit codes: 0 done; 1 the command ran and something failed (rows rejected, a subject's "
        "work or a run failed, discovery differs from --expect, the output pipe closed); 2 usage (bad "
        "arguments, an unknown name, an unreadable file, invalid settings, the database or the data "
        "directory unusable)",
    )
    parser.add_argument("--version", action=VersionAction, help="show the installed version and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    every = all_commands()
    chosen = chosen_command(argv, every)
    registered: set[str] = set()
    for name, command in every.items():
        if name in registered:
            continue
        if argv is None or command.module == chosen:
            before = set(commands.choices)
            import_module(module_name(command)).register(commands)
            added = set(commands.choices) - before
            registered |= added
            if command.plugin:  # its handler takes the plugin's `CommandContext`
                for added_name in added:
                    commands.choices[added_name].set_defaults(plugin=command.plugin)
        else:
            commands.add_parser(name, help=command.help)
            registered.add(name)
    return parser


def chosen_command(argv: Sequence[str] | None, commands: dict[str, Command]) -> str | None:
    """The module of the command `argv` runs: the first word that is not an option (no option of
    `pipeline` itself takes a value). None for `pipeline --help`, `--version` or an unknown command."""
    for word in argv or ():
        if not word.startswith("-"):
            return commands[word].module if word in commands else None
    return None


class VersionAction(argparse.Action):
    """`--version`: the distribution's metadata is read only when asked (importlib.metadata is slow)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


def package_version() -> str:
    """The installed distribution's version (pyproject.toml), or "unknown" when run from a bare checkout."""
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Run one command with stdout and stderr behind `SafeStream`: whatever a command, a log line or an
    error prints, no credential or terminal control sequence reaches the terminal."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)
    sys.excepthook = _safe_excepthook  # a traceback that ends the command goes through it too
    sigint_ignored = _sigint_heard()
    try:
        code = _run_command(argv)
        sys.stdout.flush()  # here, not at exit: a reader gone by now is a closed pipe like any other
        return code
    except BrokenPipeError:  # `pipeline events --json | head -c 200`: the reader stopped reading
        _discard_closed_output(streams[0])
        print("error: the output was closed before all of it was written (broken pipe)", file=sys.stderr)
        return EXIT_FAILED
    finally:
        sys.stdout, sys.stderr = streams
        if sigint_ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _discard_closed_output(stdout: TextIO) -> None:
    """Point the closed pipe's descriptor at /dev/null: what is still buffered then goes nowhere instead
    of raising BrokenPipeError again at the interpreter's last flush ("Exception ignored ...")."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stdout.fileno())
        finally:
            os.close(devnull)


def _sigint_heard() -> bool:
    """Started in the background (`cmd &`, a script) a command gets SIGINT ignored, and each in-process
    Dagster run copies SIGINT's handler onto SIGTERM, so after its first run `kill` would no longer stop
    it (nor the processes it starts). Python's own SIGINT handler for the command's length, as in the
    foreground (a background job gets no Ctrl-C from a terminal); True when SIGINT was ignored."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        return False
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return True


def _safe_excepthook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
    sys.stderr.write(safe_text("".join(traceback.format_exception(kind, error, trace))))


def _run_command(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    from domain.language.declaration_parts import DeclarationError
    from pipeline_defs.settings import Settings  # after parsing: `--help` reads no settings

    try:
        settings = Settings.from_env()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    from console.progress import install_reporter
    from domain.core.progress import use_reporter

    # what long work below the command shows; put back when it ends (main() is also called in process)
    previous_reporter = install_reporter(getattr(args, "progress", "auto"))
    # Dagster's warnings about its own APIs are for Dagster users; `--verbose` (run, demo, ui, ...) shows them
    show_dagster_warnings = hide_dagster_warnings() if not getattr(args, "verbose", False) else None
    try:
        plugin = getattr(args, "plugin", "")
        if plugin:
            from pipeline_defs.cli.plugin_context import EntryContext

            return args.handler(EntryContext(settings, plugin), args)
        return args.handler(settings, args)
    except DeclarationError as exc:  # a setting naming no use case, style or backend: found at build
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        from pipeline_defs.cli.environment_errors import environment_error

        line = environment_error(exc, settings)  # the database or a directory unusable: one line
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        use_reporter(previous_reporter)
        if show_dagster_warnings is not None:
            show_dagster_warnings()


if __name__ == "__main__":
    sys.exit(main())
