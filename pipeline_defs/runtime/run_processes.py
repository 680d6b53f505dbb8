"""Runs forked from a process that loaded the code location once, not spawned to load it again.

Dagster's code server starts every run as a new Python process (`multiprocessing`'s spawn context in
`dagster/_grpc/server.py: DagsterApiServer`), which imports Dagster and this code location before it
does anything: ~2.5 CPU s a run, and a backlog of 100,000 postings takes ~45 runs. With
`PIPELINE_RUN_START=forkserver` (the default where the platform has it) the code server's runs come
from a `forkserver` that imported `pipeline_defs.definitions` once; each run is a fork of it and starts
with the code location loaded. The forkserver is started with the code server's first run, from the
code server's environment, and goes with the code server (a reload of the location starts a new one).

Two swaps, both in processes this project starts (the first whatever `PIPELINE_RUN_START`, so that the
code server's sensor ticks share one Dagster instance, `pipeline_defs/runtime/sensor_instance.py`):

- a process that opens a code server (`pipeline ui`'s dagster dev, and a code server that opens
  another: `dagster code-server start` serves through a `dagster api grpc` of its own) opens
  `python -m pipeline_defs.runtime.run_processes ...` in place of `python -m dagster ...`, with the same
  arguments (`open_server_process` calls the module global `open_ipc_subprocess`);
- that entry gives each `DagsterApiServer` it creates the forkserver context, then runs Dagster's own
  command line.

Both reach into Dagster's internals: pinned by `tests/unit/test_dagster_runtime_swaps.py`. Where this
Dagster lacks them, or with `PIPELINE_RUN_START=spawn`, runs start Dagster's own way.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Sequence
from typing import Any

THIS_MODULE = "pipeline_defs.runtime.run_processes"
DAGSTER_ENTRY = ("-m", "dagster")
SERVER_COMMANDS = (("api", "grpc"), ("code-server", "start"))
PRELOADED = ("pipeline_defs.definitions", "dagster._grpc.impl")
"""What the forkserver imports before it forks the first run: the code location, and the function
Dagster's code server runs in each run process."""


def through_this_module(args: Sequence[str]) -> list[str]:
    """`python -m dagster api grpc ...` (or `code-server start`) as
    `python -m pipeline_defs.runtime.run_processes api grpc ...`; any other command unchanged."""
    args = list(args)
    if tuple(args[1:3]) == DAGSTER_ENTRY and tuple(args[3:5]) in SERVER_COMMANDS:
        return [args[0], "-m", THIS_MODULE, *args[3:]]
    return args


def install_server_opener() -> bool:
    """Open code servers through this module from this process on; False where Dagster opens them
    otherwise than its pinned way."""
    from dagster._grpc import server

    opener = getattr(server, "open_ipc_subprocess", None)
    if not callable(opener) or getattr(opener, "opens_through_run_processes", False):
        return callable(opener)

    def open_through_this_module(args: Sequence[str], *rest: Any, **kwargs: Any) -> Any:
        return opener(through_this_module(args), *rest, **kwargs)

    open_through_this_module.opens_through_run_processes = True  # ty: ignore[unresolved-attribute]
    server.open_ipc_subprocess = open_through_this_module
    return True


def forking_context() -> Any:
    """The forkserver context whose server preloads the code location."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))
    return context


def install_forking_runs() -> bool:
    """Give each code server created in this process the forkserver context for its runs; False where
    Dagster's code server keeps it elsewhere than its pinned attribute."""
    from dagster._grpc.server import DagsterApiServer

    original: Callable[..., None] = DagsterApiServer.__init__
    if getattr(original, "forks_runs", False):
        return True

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if getattr(self, "_mp_ctx", None) is not None:
            self._mp_ctx = forking_context()

    __init__.forks_runs = True  # ty: ignore[unresolved-attribute]
    DagsterApiServer.__init__ = __init__  # ty: ignore[invalid-assignment]
    return True


def main() -> None:
    """Dagster's command line (`api grpc ...`, `code-server start ...`): its runs forked (with
    `PIPELINE_RUN_START=forkserver`), its sensor ticks sharing one instance (`sensor_instance.py`)."""
    from dagster._cli import main as dagster_main

    from pipeline_defs.runtime.sensor_instance import install_kept_sensor_instance
    from pipeline_defs.settings import Settings

    install_server_opener()  # a code server that opens another (`code-server start`) opens it here too
    if Settings.from_env().run_start == "forkserver" and not install_forking_runs():
        _warn(
            "starts runs otherwise than pipeline_defs/runtime/run_processes.py expects; each run loads the "
            "code location anew"
        )
    if not install_kept_sensor_instance():
        _warn(
            "makes sensor contexts otherwise than pipeline_defs/runtime/sensor_instance.py expects; each "
            "sensor tick opens a Dagster instance"
        )
    sys.argv = ["dagster", *sys.argv[1:]]
    dagster_main()


def _warn(what: str) -> None:
    print(f"warning: this Dagster's code server {what}", file=sys.stderr)


if __name__ == "__main__":
    main()
