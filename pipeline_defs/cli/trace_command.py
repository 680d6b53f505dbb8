"""`pipeline trace KEY [--full] [--markdown FILE]`: one subject's use cases in a line each, or (--full) the
exact prompts, responses and outputs."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from appdb.database import session_scope
from console.terminal import EXIT_ERROR
from pipeline_defs.catalog import declared_work
from pipeline_defs.cli.trace_report import (
    SubjectNotFound,
    render_markdown,
    render_text,
    trace_blocks,
    trace_summary,
)
from pipeline_defs.registry import registered_plugins
from pipeline_defs.settings import Settings


def register(commands: argparse._SubParsersAction) -> None:
    trace = commands.add_parser(
        "trace",
        help="a subject's use cases, a line each (state, model, version); --full: the exact prompts, "
        "responses and outputs",
    )
    trace.add_argument("key")
    trace.add_argument(
        "--full", action="store_true", help="every prompt, response and output in full (default: a summary)"
    )
    trace.add_argument("--markdown", type=Path, help="also write the full report as markdown to this file")
    trace.set_defaults(handler=cmd_trace)


def _markdown_target_problem(path: Path) -> str | None:
    """Why the report cannot be written to `path`, found before any work (None: it can be tried)."""
    if path.is_dir():
        return "it is a directory"
    if not path.parent.is_dir():
        return f"no directory {path.parent}"
    return None


def cmd_trace(settings: Settings, args: argparse.Namespace) -> int:
    problem = _markdown_target_problem(args.markdown) if args.markdown else None
    if problem:
        print(f"error: cannot write the markdown report to {args.markdown}: {problem}", file=sys.stderr)
        return EXIT_ERROR
    # every plugin's use cases: the trace shows those of the key's kind (a posting's, an autodo item's)
    plugins = registered_plugins()
    every_plugin = replace(settings, domains=tuple(plugins))
    specs = [item.spec for item in declared_work(every_plugin)]
    kinds = [plugin.kind for plugin in plugins.values()]
    try:
        with session_scope(settings.database_url) as session:
            full = args.full or args.markdown
            blocks = list(trace_blocks(session, args.key, kinds, specs)) if full else []
            shown = blocks if args.full else list(trace_summary(session, args.key, kinds, specs))
    except SubjectNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(render_text(shown), end="")
    if args.markdown:
        try:
            args.markdown.write_text(render_markdown(blocks))
        except OSError as exc:
            reason = exc.strerror or str(exc)
            print(f"error: cannot write the markdown report to {args.markdown}: {reason}", file=sys.stderr)
            return EXIT_ERROR
        print(f"\nwrote {args.markdown}")
    return 0
