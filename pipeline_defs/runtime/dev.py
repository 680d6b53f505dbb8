"""`dagster dev` with our processes: its webserver is `python -m pipeline_defs.runtime.webserver`
(dagster-webserver with the same arguments, its app wrapped in `request_guard.RequestGuard`) instead of
`python -m dagster_webserver`, its daemon `python -m pipeline_defs.runtime.daemon` (dagster-daemon, its
sensors woken when work arrives instead of waiting for Dagster's next 5 s look), and the code server it
opens `run_processes.py`'s (runs forked from a process that loaded the code location once). The shared
code server, logging and shutdown stay dagster dev's.

It replaces dagster dev's module global `open_ipc_subprocess` for the call and calls its body
(`dev_command_impl`), not its click command, which warns on every start that it is superseded by
`dg dev` (docs/operations.md says why `pipeline ui` stays the way in). Pinned by
`tests/unit/test_dagster_runtime_swaps.py` (the opener and the body's arguments) and
`tests/unit/test_request_guard.py` (which modules are swapped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

WEBSERVER_MODULE = "dagster_webserver"
GUARDED_WEBSERVER_MODULE = "pipeline_defs.runtime.webserver"
DAEMON_MODULE = "dagster._daemon"
QUICK_DAEMON_MODULE = "pipeline_defs.runtime.daemon"
SWAPPED_MODULES = {WEBSERVER_MODULE: GUARDED_WEBSERVER_MODULE, DAEMON_MODULE: QUICK_DAEMON_MODULE}


def run_dagster_dev(workspace: str, port: int) -> None:
    """dagster dev on 127.0.0.1:`port` over `workspace`, with the swaps above; returns when it ends."""
    from dagster._cli import dev as dagster_dev
    from dagster_shared.cli import WorkspaceOpts

    from pipeline_defs.runtime.run_processes import install_server_opener

    original = dagster_dev.open_ipc_subprocess
    dagster_dev.open_ipc_subprocess = swap_modules(original)
    install_server_opener()  # the code server dagster dev opens is pipeline_defs/runtime/run_processes.py
    try:
        dagster_dev.dev_command_impl(
            code_server_log_level="warning",
            log_level="info",
            log_format="colored",
            port=str(port),
            host="127.0.0.1",
            use_legacy_code_server_behavior=False,
            shutdown_pipe=None,
            verbose=False,
            workspace_opts=WorkspaceOpts(workspace=[workspace]),
        )
    finally:
        dagster_dev.open_ipc_subprocess = original


def swap_modules(open_subprocess: Callable[..., Any]) -> Callable[..., Any]:
    """dagster dev's `open_ipc_subprocess`, starting the guarded webserver and the waking daemon
    instead of the stock ones; any other command starts as it is."""

    def open_swapped(command: Sequence[str], **kwargs: Any) -> Any:
        parts = list(command)
        if parts[1:2] == ["-m"] and len(parts) > 2 and parts[2] in SWAPPED_MODULES:
            parts[2] = SWAPPED_MODULES[parts[2]]
        return open_subprocess(parts, **kwargs)

    return open_swapped
