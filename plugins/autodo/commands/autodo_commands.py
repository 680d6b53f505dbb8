"""`pipeline autodo ...`: TODO files and code comments as work items (the second domain on the core).

pipeline autodo scan [PATH...] [--write-anchors] [--follow-symlinks]
                                                  read TODOs (default: the current directory)
pipeline autodo list [--status S] [--file F]      the items
pipeline autodo pick [N]                          the next N: highest priority, unblocked, oldest first
pipeline autodo show ID | done ID | wontfix ID | note ID TEXT | prio ID P0..P3
pipeline autodo split ID TEXT...                  children of ID (ID waits for them)
pipeline autodo dep ID OTHER [REASON]             ID waits for OTHER (no cycles)
pipeline autodo tree [ID]                         the hierarchy with dependencies
pipeline autodo scope ID | --all-new              the LLM scopes the item (files, effort, first step)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from appdb import reports
from appdb.database import session_scope
from console.progress import add_progress_argument
from console.terminal import EXIT_ERROR, EXIT_REJECTED, JSON_HELP, clip, print_json, table
from domain.core.commands import CommandContext
from plugins.autodo import autodo_store as store
from plugins.autodo import service
from plugins.autodo.planning import STATUSES, pick, tree_lines


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("autodo", help="TODO files and code comments as work items")
    sub = parser.add_subparsers(dest="autodo_command", required=True)
    scan = sub.add_parser("scan", help="read TODOs from files and directories (default: .)")
    scan.add_argument("paths", nargs="*", type=Path)
    scan.add_argument("--write-anchors", action="store_true", help="write <!-- TODO:WI-nnn --> anchors back")
    scan.add_argument(
        "--follow-symlinks",
        action="store_true",
        help="read files a symlink points to outside the scanned directory (default: reported, skipped)",
    )
    add_progress_argument(scan)
    scan.set_defaults(handler=cmd_scan)
    listing = sub.add_parser("list", help="the items")
    listing.add_argument("--status", choices=STATUSES)
    listing.add_argument("--file", help="only items of this file")
    listing.add_argument("--json", action="store_true", help=JSON_HELP)
    listing.set_defaults(handler=cmd_list)
    pick_parser = sub.add_parser("pick", help="the next items: highest priority, unblocked, oldest first")
    pick_parser.add_argument("count", nargs="?", type=int, default=1)
    pick_parser.add_argument("--json", action="store_true", help=JSON_HELP)
    pick_parser.set_defaults(handler=cmd_pick)
    for name, handler, text in (
        ("show", cmd_show, "one item: text, place, notes, dependencies, scope and what its LLM calls cost"),
        ("done", cmd_done, "close an item as done"),
        ("wontfix", cmd_wontfix, "close an item as won't fix"),
    ):
        one = sub.add_parser(name, help=text)
        one.add_argument("id")
        one.set_defaults(handler=handler)
    note = sub.add_parser("note", help="add a note to an item")
    note.add_argument("id")
    note.add_argument("text", nargs="+")
    note.set_defaults(handler=cmd_note)
    prio = sub.add_parser("prio", help="set an item's priority (P0 highest .. P3)")
    prio.add_argument("id")
    prio.add_argument("priority")
    prio.set_defaults(handler=cmd_prio)
    split = sub.add_parser("split", help="split an item into children (the parent waits for them)")
    split.add_argument("id")
    split.add_argument("texts", nargs="+", metavar="TEXT")
    split.set_defaults(handler=cmd_split)
    dep = sub.add_parser("dep", help="ID waits for OTHER (a cycle is refused)")
    dep.add_argument("id")
    dep.add_argument("other")
    dep.add_argument("reason", nargs="?", default="")
    dep.set_defaults(handler=cmd_dep)
    scope = sub.add_parser("scope", help="the LLM scopes items: files to change, effort, first step")
    which = scope.add_mutually_exclusive_group()
    which.add_argument("ids", nargs="*", default=[], metavar="ID")
    which.add_argument("--all-new", action="store_true", help="every item without a current scope")
    scope.add_argument("--verbose", action="store_true", help="show the runs' logs")
    scope.set_defaults(handler=cmd_scope)
    tree = sub.add_parser("tree", help="the hierarchy and dependencies")
    tree.add_argument("id", nargs="?")
    tree.set_defaults(handler=cmd_tree)


def _guarded(handler):  # noqa: ANN001, ANN202 - wraps a command: AutodoError -> exit 2 with the reason
    def run(context: CommandContext, args: argparse.Namespace) -> int:
        try:
            return handler(context, args)
        except service.AutodoError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ERROR

    return run


def cmd_scan(context: CommandContext, args: argparse.Namespace) -> int:
    paths = args.paths or [Path(".")]
    with session_scope(context.database_url) as session:
        outcome = service.scan(
            session,
            paths,
            Path.cwd(),
            write_anchors=args.write_anchors,
            max_bytes=context.section.scan_max_file_bytes,
            follow_symlinks=args.follow_symlinks or context.section.scan_follow_symlinks,
        )
    for problem in outcome.problems:
        print(f"warning: {problem}", file=sys.stderr)
    record = outcome.record
    print(
        f"scanned {len(outcome.matches)} items: {len(record.new)} new, {len(record.changed)} changed, "
        f"{len(record.unchanged)} unchanged, {len(record.done)} ticked done, "
        f"{len(record.reopened)} seen again, {len(record.unseen)} not seen, {len(record.stale)} now stale"
    )
    matched = {
        how: sum(1 for m in outcome.matches if m.how == how) for how in ("anchor", "fingerprint", "fuzzy")
    }
    print("matched by " + ", ".join(f"{how} {count}" for how, count in matched.items()))
    if outcome.anchors_written:
        print(f"wrote {len(outcome.anchors_written)} anchors")
    return EXIT_REJECTED if any(p.line == 0 for p in outcome.problems) else 0


def _rows(items) -> list[list[str]]:  # noqa: ANN001
    return [
        [
            item.key,
            item.priority,
            item.status,
            clip(item.text, 60),
            f"{item.file}:{item.line}" if item.file else (f"(part of {item.parent})" if item.parent else ""),
        ]
        for item in items
    ]


def _item_json(item) -> dict[str, object]:  # noqa: ANN001 - a stored autodo item
    return {
        "id": item.key,
        "priority": item.priority,
        "status": item.status,
        "text": item.text,
        "file": item.file,
        "line": item.line,
        "parent": item.parent,
    }


def cmd_list(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        items = [
            item
            for item in store.stored_items(session).values()
            if (args.status is None or item.status == args.status)
            and (args.file is None or item.file == args.file)
        ]
    if args.json:
        print_json([_item_json(item) for item in items])
        return 0
    if not items:
        print("no items")
        return 0
    print(table(["id", "prio", "status", "text", "where"], _rows(items)))
    return 0


def cmd_pick(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        chosen = pick(service.plan_items(session), args.count)
        stored = store.stored_items(session, [item.key for item in chosen])
    if args.json:
        print_json([_item_json(stored[item.key]) for item in chosen])
        return 0
    if not chosen:
        print("nothing to pick: no open, unblocked items")
        return 0
    print(table(["id", "prio", "status", "text", "where"], _rows([stored[item.key] for item in chosen])))
    return 0


@_guarded
def cmd_show(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        item = service.require(session, args.id)
        outputs = store.outputs_of(session, args.id)
        usage = reports.llm_usage(session, args.id)
    print(f"{item.key} [{item.status}] {item.priority}: {item.text}")
    if item.file:
        print(f"  at {item.file}:{item.line}" + (f" under {item.heading}" if item.heading else ""))
    if item.parent:
        print(f"  part of {item.parent}")
    for key, reason in item.depends_on:
        print(f"  waits for {key}" + (f": {reason}" if reason else ""))
    for note in item.notes:
        print(f"  note {note}")
    for use_case, value in outputs.items():
        shown = {name: field for name, field in value.items() if name != "snippets"}  # the code: see trace
        print(f"  {use_case}: {json.dumps(shown, ensure_ascii=False)}")
    for use_case, calls, tokens, cost in usage:  # the scope's cost (retries included)
        plural = "s" if calls != 1 else ""
        print(f"  {use_case} cost: {calls} LLM call{plural}, {tokens:,} tokens, {cost:.4f}")
    return 0


@_guarded
def cmd_done(context: CommandContext, args: argparse.Namespace) -> int:
    return _close(context, args.id, "done")


@_guarded
def cmd_wontfix(context: CommandContext, args: argparse.Namespace) -> int:
    return _close(context, args.id, "wontfix")


def _close(context: CommandContext, key: str, status: str) -> int:
    with session_scope(context.database_url) as session:
        service.require(session, key)
        store.set_status(session, key, status)
    print(f"{key}: {status}")
    return 0


@_guarded
def cmd_note(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        service.require(session, args.id)
        store.add_note(session, args.id, " ".join(args.text))
    print(f"{args.id}: note added")
    return 0


@_guarded
def cmd_prio(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        service.set_priority(session, args.id, args.priority)
    print(f"{args.id}: priority {args.priority.upper()}")
    return 0


@_guarded
def cmd_split(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        children = service.split(session, args.id, args.texts)
    print(f"{args.id} split into {', '.join(children)}")
    return 0


@_guarded
def cmd_dep(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        service.depend(session, args.id, args.other, args.reason)
    print(f"{args.id} waits for {args.other}" + (f": {args.reason}" if args.reason else ""))
    return 0


@_guarded
def cmd_tree(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        if args.id:
            service.require(session, args.id)
        lines = tree_lines(service.plan_items(session), args.id)
    print("\n".join(lines) if lines else "no items")
    return 0


@_guarded
def cmd_scope(context: CommandContext, args: argparse.Namespace) -> int:
    if not args.ids and not args.all_new:
        print("error: name the items to scope, or --all-new", file=sys.stderr)
        return EXIT_ERROR
    with session_scope(context.database_url) as session:
        for key in args.ids:
            service.require(session, key)
    print(f"scoping with the {context.core.llm_backend} backend ...", flush=True)
    runs, failed = context.run_subjects(None if args.all_new else args.ids, verbose=args.verbose)
    with session_scope(context.database_url) as session:
        keys = args.ids or [k for k, i in store.stored_items(session).items() if i.status == "open"]
        for key in keys:
            scope = store.outputs_of(session, key).get("autodo_scope")
            if scope is None:
                print(f"{key}: no scope (see `pipeline failures --use-case autodo_scope`)")
                continue
            files = ", ".join(scope["files_to_change"]) or "(none named)"
            print(f"{key}: effort {scope['effort']}; files: {files}\n  first step: {scope['first_step']}")
    print(f"{len(runs)} runs, {len(failed)} failed; trace one: pipeline trace ID")
    return 1 if failed else 0
