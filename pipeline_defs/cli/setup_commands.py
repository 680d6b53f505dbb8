"""`pipeline migrate` (the application database and the Dagster home) and `pipeline ui` (dagster dev)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from appdb.database import migrate
from appdb.redaction import redact
from pipeline_defs.dagster_home import ensure_dagster_home
from pipeline_defs.settings import PROJECT_ROOT, Settings


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "migrate", help="create or upgrade the application database; create the Dagster home"
    )
    parser.set_defaults(handler=cmd_migrate)
    ui = commands.add_parser("ui", help="start dagster dev (webserver and daemon) on 127.0.0.1:3000")
    ui.add_argument("--port", type=int, default=3000, help="the webserver's port on 127.0.0.1 (default 3000)")
    ui.set_defaults(handler=cmd_ui)


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    migrate(settings.database_url)
    print(f"application database is at the newest schema: {redact(settings.database_url)}")
    # a service runs dagster-webserver and dagster-daemon directly: they need the home's dagster.yaml
    print(f"Dagster home (dagster.yaml kept if present): {ensure_dagster_home(settings)}")
    return 0


def cmd_ui(settings: Settings, args: argparse.Namespace) -> int:
    home = ensure_dagster_home(settings)
    print(f"DAGSTER_HOME={home}")
    dagster = Path(sys.executable).with_name("dagster")
    # Started in the background (`nohup make ui &`, a service script) SIGINT arrives ignored, and
    # dagster dev then ignores SIGTERM too and cannot be stopped: give both their defaults back.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.SIG_DFL)
    workspace = str(PROJECT_ROOT / "workspace.yaml")
    os.execv(str(dagster), [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(args.port), "-w", workspace])
