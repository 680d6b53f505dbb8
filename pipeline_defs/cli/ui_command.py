"""`pipeline ui` (dagster dev: webserver and daemon, the webserver behind `RequestGuard`), and
`pipeline webserver` and `pipeline daemon` (each alone, for a service).

`pipeline ui` runs `dagster dev` in this process, its webserver guarded and its daemon woken when work
arrives (`pipeline_defs/runtime/dev.py`). Everything the processes it starts write goes through
`safe_text` (credentials redacted, control sequences dropped) on its way to the terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from console.arguments import port_number
from console.terminal import safe_text
from pipeline_defs.settings import PROJECT_ROOT, Settings, running_from_a_clone

PUMP_CHUNK = 65536
PUMP_DRAIN_SECONDS = 5


def register(commands: argparse._SubParsersAction) -> None:
    ui = commands.add_parser(
        "ui", help="start dagster dev (webserver and daemon) on 127.0.0.1:3000, the webserver guarded"
    )
    ui.add_argument(
        "--port", type=port_number, default=3000, help="the webserver's port on 127.0.0.1 (default 3000)"
    )
    ui.add_argument("--verbose", action="store_true", help="show Dagster's own warnings too")
    ui.set_defaults(handler=cmd_ui)
    webserver = commands.add_parser(
        "webserver", help="the guarded dagster-webserver alone (a service; the daemon runs apart)"
    )
    webserver.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    webserver.add_argument("--port", type=port_number, default=3000, help="the port (default 3000)")
    webserver.set_defaults(handler=cmd_webserver)
    daemon = commands.add_parser(
        "daemon", help="dagster-daemon alone (a service), its sensors woken when work arrives"
    )
    daemon.set_defaults(handler=cmd_daemon)


def cmd_ui(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.runtime.dev import run_dagster_dev

    home = _storage_ready(settings)
    print(f"DAGSTER_HOME={home}", flush=True)
    print(
        f"UI on http://127.0.0.1:{args.port}: GraphQL refuses foreign Host, cross-origin and GET-mutation "
        "requests (no authentication: docs/operations.md)",
        flush=True,
    )
    # Started in the background (`nohup make ui &`, a service script) SIGINT arrives ignored, and
    # dagster dev then ignores SIGTERM too (it maps SIGTERM to SIGINT's handler) and cannot be
    # stopped: both raise KeyboardInterrupt, which dagster dev answers by shutting its processes down.
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    handlers = {sig: signal.signal(sig, signal.default_int_handler) for sig in stop_signals}
    workspace = workspace_file(settings)
    try:
        with output_through_safe_text():
            run_dagster_dev(workspace, args.port)
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 0


def cmd_webserver(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.runtime import webserver

    _storage_ready(settings)
    workspace = workspace_file(settings)
    sys.argv = ["dagster-webserver", "-h", args.host, "-p", str(args.port), "-w", workspace]
    webserver.main()
    return 0


def cmd_daemon(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.runtime import daemon

    _storage_ready(settings)
    sys.argv = ["dagster-daemon", "run", "-w", workspace_file(settings)]
    daemon.main()
    return 0


def _storage_ready(settings: Settings) -> Path:
    """The application database opened (and migrated) and the Dagster home made before a server
    starts: a wrong URL or an unusable data directory is then one line at start (`main`), not a
    server that comes up and fails in every sensor tick."""
    from appdb.database import migrate
    from pipeline_defs.runtime.dagster_home import ensure_dagster_storage

    migrate(settings.database_url)
    return ensure_dagster_storage(settings)


WORKSPACE_YAML = """\
load_from:
  - python_module:
      module_name: pipeline_defs.definitions
      location_name: posting_enrichment
"""


def workspace_file(settings: Settings) -> str:
    """The clone's workspace.yaml; for an installed package (no clone), the same written into the Dagster
    home, as Dagster needs a file to name the code location."""
    if running_from_a_clone():
        return str(PROJECT_ROOT / "workspace.yaml")
    path = settings.dagster_home / "workspace.yaml"
    if not path.is_file() or path.read_text() != WORKSPACE_YAML:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(WORKSPACE_YAML)
    return str(path)


@contextlib.contextmanager
def output_through_safe_text() -> Iterator[None]:
    """Point file descriptors 1 and 2 (which every process started from here inherits) at pipes, and
    copy what comes out to the real stdout and stderr through `safe_text`, line by line."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    pumps = []
    for fd, target in saved.items():
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        pump = threading.Thread(target=_copy_safely, args=(read_end, target), daemon=True)
        pump.start()
        pumps.append(pump)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        for fd, target in saved.items():
            os.dup2(target, fd)  # our write ends close here; the pumps end when the children's do
        for pump in pumps:
            pump.join(timeout=PUMP_DRAIN_SECONDS)


def _copy_safely(read_end: int, target: int) -> None:
    with os.fdopen(read_end, "rb", buffering=0) as source, os.fdopen(target, "wb", closefd=False) as sink:
        pending = b""
        while chunk := source.read(PUMP_CHUNK):
            pending += chunk
            if b"\n" not in pending and len(pending) < PUMP_CHUNK:
                continue
            head, newline, pending = pending.rpartition(b"\n")
            text = head + newline if newline else pending
            pending = pending if newline else b""
            sink.write(safe_text(text.decode("utf-8", "replace")).encode("utf-8"))
            sink.flush()
        if pending:
            sink.write(safe_text(pending.decode("utf-8", "replace")).encode("utf-8"))
            sink.flush()
