"""`pipeline events`: the event log (discovery counts, pauses and resumes, errors by class, run costs)."""

from __future__ import annotations

import argparse
import math
from datetime import timedelta

from appdb import events
from appdb.database import session_scope
from appdb.models import utcnow
from appdb.redaction import redact
from console.arguments import row_limit
from console.terminal import ERROR_CHARS, JSON_HELP, clip, print_json, table, when
from pipeline_defs.settings import Settings

CENTURY_HOURS = 100 * 366 * 24.0


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "events", help="the event log: discovery counts, pauses and resumes, errors by class, cost per run"
    )
    parser.add_argument(
        "--kind", action="append", choices=events.EVENT_KINDS, help="only this kind (repeatable)"
    )
    parser.add_argument(
        "--hours", type=hours_back, default=24.0, help="how far back, a positive number of hours (default 24)"
    )
    parser.add_argument("--limit", type=row_limit, default=50, help="at most this many rows (default 50)")
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(handler=cmd_events)


def hours_back(value: str) -> float:
    """`--hours`: a positive finite number; more than a century back means all of the log (a huge
    value such as 1e308 would overflow the date)."""
    try:
        hours = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {value!r}") from None
    if not math.isfinite(hours) or hours <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of hours, not {value!r}")
    return min(hours, CENTURY_HOURS)


def cmd_events(settings: Settings, args: argparse.Namespace) -> int:
    since = utcnow() - timedelta(hours=args.hours)
    with session_scope(settings.database_url) as session:
        rows = events.list_events(session, kinds=args.kind or (), since=since, limit=args.limit)
        errors = events.errors_by_class(session, since)
    if getattr(args, "json", False):
        print_json(
            {
                "hours": args.hours,
                "events": [
                    {
                        "at": row.at.isoformat(),
                        "kind": row.kind,
                        "use_case": row.use_case,
                        "run_id": row.run_id,
                        "model": row.model,
                        "count": row.count,
                        "error_class": row.error_class,
                        "tokens": row.tokens,
                        "cost": row.cost,
                        "reason": redact(row.reason) if row.reason else row.reason,
                    }
                    for row in rows
                ],
                "errors_by_class": [
                    {"use_case": use_case, "error_class": error_class, "count": count}
                    for (use_case, error_class), count in sorted(errors.items())
                ],
            }
        )
        return 0
    if not rows:
        print(f"no events in the last {args.hours:g} hours")
        return 0
    print(
        table(
            ["at", "kind", "use case", "count", "class", "tokens", "cost", "reason"],
            [
                [
                    when(row.at),
                    row.kind,
                    row.use_case or "",
                    "" if row.count is None else str(row.count),
                    row.error_class or "",
                    str(row.tokens) if row.tokens else "",
                    "" if row.cost is None else f"{row.cost:.6f}",
                    clip(" ".join((row.reason or "").split()), ERROR_CHARS),
                ]
                for row in rows
            ],
        )
    )
    total = sum(row.cost or 0.0 for row in rows if row.kind == "run_cost")
    print(f"\ncost of the runs listed: {total:.6f}")
    if errors:
        print("errors by class: " + ", ".join(f"{uc} {cls} {n}" for (uc, cls), n in sorted(errors.items())))
    return 0
