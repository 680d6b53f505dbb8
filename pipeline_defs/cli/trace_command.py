"""`pipeline trace KEY [--markdown FILE]`: exact prompts, responses and outputs of one subject."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from appdb.database import session_scope
from pipeline_defs.catalog import PLUGINS
from pipeline_defs.cli.terminal import EXIT_ERROR
from pipeline_defs.cli.trace_report import SubjectNotFound, render_markdown, render_text, trace_blocks
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases


def register(commands: argparse._SubParsersAction) -> None:
    trace = commands.add_parser(
        "trace", help="show exact prompts, responses and outputs for a posting or item"
    )
    trace.add_argument("key")
    trace.add_argument("--markdown", type=Path, help="also write the report as markdown to this file")
    trace.set_defaults(handler=cmd_trace)


def cmd_trace(settings: Settings, args: argparse.Namespace) -> int:
    # every plugin's use cases: the trace shows those of the key's kind (a posting's, an autodo item's)
    every_plugin = replace(settings, domains=tuple(PLUGINS))
    specs = [item.spec for item in build_use_cases(every_plugin)]
    kinds = [plugin.kind for plugin in PLUGINS.values()]
    try:
        with session_scope(settings.database_url) as session:
            blocks = list(trace_blocks(session, args.key, kinds, specs))
    except SubjectNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(render_text(blocks), end="")
    if args.markdown:
        args.markdown.write_text(render_markdown(blocks))
        print(f"\nwrote {args.markdown}")
    return 0
