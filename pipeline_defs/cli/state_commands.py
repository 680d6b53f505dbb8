"""Work state: `pipeline status`, `failures`, `retry`, `pauses`, `resume`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from appdb import claims, discovery, events, heartbeats, pauses, reports, run_progress
from appdb.database import session_scope
from appdb.models import utcnow
from appdb.redaction import redact
from console.terminal import (
    DETAILS,
    ERROR_CHARS,
    JSON_HELP,
    clip,
    describe_pause,
    pause_json,
    print_json,
    table,
    when,
)
from pipeline_defs.cli.failed_work import describe_failures, error_head, error_lines
from pipeline_defs.settings import Settings, export_for_dagster

if TYPE_CHECKING:
    from pipeline_defs.catalog import DeclaredWork


def register(commands: argparse._SubParsersAction) -> None:
    status = commands.add_parser(
        "status", help="per use case: subjects with a current output, pending, failed"
    )
    status.add_argument(
        "--by-source",
        action="store_true",
        help="interactions per hour by source (sensor, backfill, ui, cli): compare two systems side by side",
    )
    status.add_argument("--hours", type=int, default=24, help="with --by-source: how far back (default 24)")
    status.add_argument("--json", action="store_true", help=JSON_HELP)
    status.set_defaults(handler=cmd_status)
    failures = commands.add_parser(
        "failures", help="list parked items (failed too often) and their last error"
    )
    failures.add_argument("--use-case", help="only this use case")
    failures.add_argument("--json", action="store_true", help=JSON_HELP)
    failures.set_defaults(handler=cmd_failures)
    retry = commands.add_parser("retry", help="re-queue parked items with a fresh set of attempts")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every parked item")
    which.add_argument("--use-case", help="the parked items of this use case")
    which.add_argument(
        "--key",
        *_kind_options(),
        action="append",
        dest="keys",
        metavar="KEY",
        help="this subject (repeatable)",
    )
    retry.set_defaults(handler=cmd_retry)
    pauses_parser = commands.add_parser(
        "pauses", help="use cases paused by the circuit breaker, why, and until when"
    )
    pauses_parser.add_argument("--json", action="store_true", help=JSON_HELP)
    pauses_parser.set_defaults(handler=cmd_pauses)
    resume = commands.add_parser("resume", help="end pauses now (all, or the named use cases)")
    resume.add_argument(
        "--use-case", action="append", dest="use_cases", help="only this use case (repeatable)"
    )
    resume.set_defaults(handler=cmd_resume)


def _kind_options() -> list[str]:
    """`--KIND` for each registered plugin's kind (`--posting`, `--autodo-item`), as `--key`."""
    from pipeline_defs.registry import registered_plugins

    return [f"--{plugin.kind.noun.replace(' ', '-')}" for plugin in registered_plugins().values()]


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from domain.language.declaration import model_label
    from pipeline_defs.catalog import declared_kinds, declared_work

    if getattr(args, "by_source", False):
        return _status_by_source(settings, args.hours, getattr(args, "json", False))
    built = declared_work(settings)
    rows: list[dict[str, Any]] = []
    with session_scope(settings.database_url) as session:
        subjects = {kind.plural: kind.table.count(session) for kind in declared_kinds(settings)}
        failures = run_progress.failure_counts(session, [item.use_case.name for item in built])
        failed = {
            name: run_progress.failed_attempts(session, name)
            for name, counts in failures.items()
            if counts.failed
        }
        for item in built:
            name = item.use_case.name
            states = reports.work_state_counts(session, name)
            counts = failures[name]
            rows.append(
                {
                    "use_case": name,
                    "version": item.use_case.version,
                    "model": model_label(item.use_case),
                    "pending": len(discovery.find_pending_work(session, item.spec)),
                    "claimed": states.get("claimed", 0),
                    "failed": counts.failed,  # the last attempt failed: waiting for a retry, or parked
                    "waiting_for_retry": counts.waiting,
                    "next_retry_at": counts.next_retry.isoformat() if counts.next_retry else None,
                    "parked": counts.parked,
                    "errors": _error_groups(failed.get(name, [])),
                }
            )
        paused = list(pauses.active_pauses(session).values())
    # a failed attempt due again is pending, and explained by its error: not work that stopped moving
    unexplained = {row["use_case"]: max(0, row["pending"] - failures[row["use_case"]].due) for row in rows}
    stuck = _stuck_lines(settings, built, unexplained)
    if getattr(args, "json", False):
        print_json(
            {
                "database": redact(settings.database_url),
                "subjects": subjects,
                "use_cases": rows,
                "paused": [pause_json(pause) for pause in paused],
                "stuck": stuck,
            }
        )
        return 0
    print(
        ", ".join(f"{count} {plural}" for plural, count in subjects.items())
        + f" in {redact(settings.database_url)}"
    )
    nouns = {item.use_case.name: item.use_case.subject.noun for item in built}
    for row in rows:
        name = row["use_case"]
        print(
            f"{name} (version {row['version']}, {row['model']}): "
            f"{row['pending']} pending, {row['claimed']} claimed, {describe_failures(failures[name])}"
        )
        for line in error_lines(failed.get(name, []), nouns[name], failures[name].failed):
            print(line)
    if any(row["failed"] for row in rows):
        print(DETAILS[:1].upper() + DETAILS[1:])
    for pause in paused:
        print(f"{pause.use_case}: {describe_pause(pause)}")
    for line in stuck:
        print(f"stuck: {line}")
    return 0


def _error_groups(attempts: list[run_progress.FailedAttempt]) -> list[dict[str, Any]]:
    """`--json`: the failed attempts grouped as the text groups them, the commonest first."""
    groups: dict[str, list[run_progress.FailedAttempt]] = {}
    for attempt in attempts:
        groups.setdefault(error_head(attempt.error), []).append(attempt)
    return [
        {
            "error": head,
            "count": len(same),
            "first": redact(same[0].error),
            "keys": sorted(a.key for a in same),
        }
        for head, same in sorted(groups.items(), key=lambda group: len(group[1]), reverse=True)
    ]


def _stuck_lines(
    settings: Settings, built: list[DeclaredWork], pending_by_use_case: dict[str, int]
) -> list[str]:
    """The stuck-work detector: work pending that did not move for longer than a lease, and what blocks it.

    Dagster (its instance, the pool) is imported only for a use case whose pending work did not move for
    longer than a lease, so `pipeline status` stays light while work flows."""
    now = utcnow()
    with session_scope(settings.database_url) as session:
        still = [
            item
            for item in built
            if pending_by_use_case[item.use_case.name]
            and (since := heartbeats.last_progress(session, [item.use_case.name])) is not None
            and (now - since).total_seconds() > item.use_case.retry.lease_seconds
        ]
    if not still:
        return []
    from dagster import DagsterInstance  # only when something may be stuck

    from resources.app_database import AppDatabase
    from sensors.run_liveness import stuck_work

    app_db = AppDatabase(url=settings.database_url)
    instance: list[DagsterInstance | None] = []

    def instance_for() -> DagsterInstance | None:  # opened only when something is stuck
        if not instance:
            home = settings.dagster_home
            if (home / "dagster.yaml").is_file():
                export_for_dagster("DAGSTER_HOME", str(home))
                instance.append(DagsterInstance.get())
            else:
                instance.append(None)
        return instance[0]

    lines = []
    for item in still:
        stuck = stuck_work(
            instance_for,
            app_db,
            [item.use_case.name],
            pending_by_use_case[item.use_case.name],
            item.use_case.retry.lease_seconds,
            uses_pool=item.use_case.uses_llm,
        )
        if stuck:
            lines.append(stuck)
    return lines


def _status_by_source(settings: Settings, hours: int, as_json: bool = False) -> int:
    with session_scope(settings.database_url) as session:
        by_hour = events.interactions_by_hour_and_source(session, hours)
    if as_json:
        print_json({"hours": hours, "interactions_by_hour": by_hour})
        return 0
    if not by_hour:
        print(f"no interactions in the last {hours} hours")
        return 0
    sources = sorted({source for counts in by_hour.values() for source in counts})
    rows = [
        [hour, *(str(counts.get(source, 0)) for source in sources), str(sum(counts.values()))]
        for hour, counts in by_hour.items()
    ]
    print(table(["hour (UTC)", *sources, "total"], rows))
    return 0


def cmd_failures(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.catalog import declared_kinds

    with session_scope(settings.database_url) as session:
        parked = claims.list_failures(session, args.use_case)
        keys = [item.subject_key for item in parked]
        labels = {
            key: label
            for kind in declared_kinds(settings)
            for key, label in kind.table.labels(session, keys).items()
        }
    if getattr(args, "json", False):
        print_json(
            [
                {
                    "use_case": item.use_case,
                    "key": item.subject_key,
                    "title": labels.get(item.subject_key, ""),
                    "attempts": item.attempts,
                    "parked_at": item.failed_at.isoformat(),
                    "last_error": redact(item.last_error or ""),
                }
                for item in parked
            ]
        )
        return 0
    if not parked:
        print("no parked items" + (f" for {args.use_case}" if args.use_case else ""))
        return 0
    rows = [
        [
            item.use_case,
            item.subject_key,
            clip(labels.get(item.subject_key, ""), 30),
            str(item.attempts),
            when(item.failed_at),
            clip(" ".join((item.last_error or "").split()), ERROR_CHARS),
        ]
        for item in parked
    ]
    print(table(["use case", "key", "title", "attempts", "parked at", "last error"], rows))
    print(f"\n{len(parked)} parked items; re-queue them with `pipeline retry --all` (or --use-case, --key)")
    return 0


def cmd_retry(settings: Settings, args: argparse.Namespace) -> int:
    with session_scope(settings.database_url) as session:
        requeued = claims.requeue_failed(session, use_case=args.use_case, subject_keys=args.keys)
    if not requeued:
        print("no parked items matched; nothing re-queued")
        return 0
    print(
        f"re-queued {requeued} parked items with a fresh set of attempts; the discovery sensors pick them "
        "up at their next tick (or run `pipeline run` now)"
    )
    return 0


def cmd_pauses(settings: Settings, args: argparse.Namespace) -> int:
    with session_scope(settings.database_url) as session:
        active = pauses.active_pauses(session)
    if getattr(args, "json", False):
        print_json([pause_json(pause) for pause in active.values()])
        return 0
    if not active:
        print("no use case is paused")
    for pause in active.values():
        print(f"{pause.use_case}: {describe_pause(pause)}")
    return 0


def cmd_resume(settings: Settings, args: argparse.Namespace) -> int:
    with session_scope(settings.database_url) as session:
        paused = [
            name for name in pauses.active_pauses(session) if args.use_cases is None or name in args.use_cases
        ]
        pauses.resume_use_cases(session, paused)
    if not paused:
        print("no use case was paused" + (f" among {', '.join(args.use_cases)}" if args.use_cases else ""))
        return 0
    print(f"resumed {', '.join(paused)}; the discovery sensors request runs again at their next tick")
    return 0
