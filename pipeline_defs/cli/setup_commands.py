"""`pipeline migrate`: the application database and the Dagster home (`pipeline ui`: ui_command.py)."""

from __future__ import annotations

import argparse

from appdb.database import migrate
from appdb.redaction import redact
from pipeline_defs.settings import Settings


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "migrate", help="create or upgrade the application database; create the Dagster home"
    )
    parser.set_defaults(handler=cmd_migrate)


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.dagster_home import ensure_dagster_storage

    migrate(settings.database_url)
    print(f"application database is at the newest schema: {redact(settings.database_url)}")
    # a service runs dagster-webserver and dagster-daemon directly: they need the home's dagster.yaml
    print(f"Dagster home (dagster.yaml kept if present): {ensure_dagster_storage(settings)}")
    return 0
