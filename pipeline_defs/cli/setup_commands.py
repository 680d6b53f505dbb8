"""`pipeline migrate`: the application database and the Dagster home (`pipeline ui`: ui_command.py)."""

from __future__ import annotations

import argparse
import stat
import sys
from pathlib import Path

from appdb.database import migrate
from appdb.local_files import readable_by_others
from appdb.redaction import redact
from pipeline_defs.settings import Settings


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "migrate", help="create or upgrade the application database; create the Dagster home"
    )
    parser.set_defaults(handler=cmd_migrate)


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.runtime.dagster_home import ensure_dagster_storage

    migrate(settings.database_url)
    print(f"application database is at the newest schema: {redact(settings.database_url)}")
    # a service runs dagster-webserver and dagster-daemon directly: they need the home's dagster.yaml
    print(f"Dagster home (dagster.yaml kept if present): {ensure_dagster_storage(settings)}")
    warn_if_readable_by_others(settings.data_dir)
    return 0


def warn_if_readable_by_others(data_dir: Path) -> None:
    """A data directory made before it was made 0700 (or by the user) is left as it is: say so."""
    if readable_by_others(data_dir):
        mode = stat.S_IMODE(data_dir.stat().st_mode)
        print(
            f"warning: the data directory {data_dir} is open to other users (mode {mode:04o}): "
            f"`chmod 700 {data_dir}` keeps its databases and outputs yours (pipeline does not change "
            "the mode of a directory that exists)",
            file=sys.stderr,
        )
