"""`pipeline toy add TEXT... [--tag T]` stores proverbs (subjects, and a tag in the toy's own table);
`pipeline toy show` lists each with its echo; `pipeline toy echo` runs its use case on all pending."""

from __future__ import annotations

import argparse
import hashlib

from sqlalchemy import text

from appdb import reports
from appdb.database import session_scope
from appdb.subjects import upsert_subjects
from domain.core.commands import CommandContext

KIND = "toy"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("toy", help="proverbs: add, show")
    sub = parser.add_subparsers(dest="toy_command", required=True)
    add = sub.add_parser("add", help="store proverbs")
    add.add_argument("texts", nargs="+")
    add.add_argument("--tag", default="")
    add.set_defaults(handler=cmd_add)
    show = sub.add_parser("show", help="each proverb, its tag and its echo")
    show.set_defaults(handler=cmd_show)
    echo = sub.add_parser("echo", help="echo every pending proverb now")
    echo.set_defaults(handler=cmd_echo)


def _key(proverb: str) -> str:
    return "toy-" + hashlib.sha256(proverb.encode()).hexdigest()[:8]


def cmd_add(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        upsert_subjects(session, KIND, {_key(proverb): {"text": proverb} for proverb in args.texts})
        for proverb in args.texts:
            session.execute(text("DELETE FROM toy_tags WHERE subject_key = :key"), {"key": _key(proverb)})
            session.execute(
                text("INSERT INTO toy_tags (subject_key, tag) VALUES (:key, :tag)"),
                {"key": _key(proverb), "tag": args.tag},
            )
    print(f"{len(args.texts)} proverbs stored")
    return 0


def cmd_show(context: CommandContext, args: argparse.Namespace) -> int:
    with session_scope(context.database_url) as session:
        rows = session.execute(
            text(
                "SELECT s.key, t.tag FROM subjects s LEFT JOIN toy_tags t ON t.subject_key = s.key "
                "WHERE s.kind = :kind ORDER BY s.key"
            ),
            {"kind": KIND},
        ).all()
        outputs = reports.output_values(session, [key for key, _ in rows])
    for key, tag in rows:
        echoed = outputs.get((key, "proverb_echo"))
        print(f"{key} [{tag or '-'}] {echoed['echo'] if echoed else '(not echoed yet)'}")
    return 0


def cmd_echo(context: CommandContext, args: argparse.Namespace) -> int:
    runs, failed = context.run_subjects(None)
    print(f"{len(runs)} runs, {len(failed)} failed")
    return 1 if failed else 0
