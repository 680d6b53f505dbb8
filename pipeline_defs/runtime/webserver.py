"""dagster-webserver behind `RequestGuard`: `python -m pipeline_defs.runtime.webserver` takes
dagster-webserver's own arguments (what `pipeline ui` runs in place of `python -m dagster_webserver`,
and what a service runs through `pipeline webserver`).

dagster-webserver builds its Starlette app and hands it to `uvicorn.run`; the app is wrapped on the way,
so everything else (instance, workspace, code servers, logging, shutdown) stays dagster-webserver's.
Pinned by `tests/unit/test_dagster_runtime_swaps.py` (the module's `uvicorn.run`, called with host and port).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn

from pipeline_defs.runtime.request_guard import RequestGuard, allowed_hosts
from pipeline_defs.settings import Settings

ANY_ADDRESS = ("0.0.0.0", "::", "")


def guarded_app_hosts(host: str | None, port: int, allowed: Sequence[str] = ()) -> frozenset[str]:
    """The Host values to accept: loopback names, the bound address, and `allowed` (a reverse proxy's
    names: PIPELINE_UI_ALLOWED_HOSTS)."""
    extra = list(allowed)
    if host and host not in ANY_ADDRESS:
        extra.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return allowed_hosts(port, extra)


def guarded_run(run: Callable[..., Any], allowed: Sequence[str] = ()) -> Callable[..., Any]:
    """`uvicorn.run` that serves the app inside `RequestGuard`."""

    def run_guarded(app: Any, *args: Any, **kwargs: Any) -> Any:
        hosts = guarded_app_hosts(kwargs.get("host"), int(kwargs["port"]), allowed)
        return run(RequestGuard(app, hosts), *args, **kwargs)

    return run_guarded


def main() -> None:
    """dagster-webserver's command line (it reads sys.argv), serving the guarded app."""
    from dagster_webserver import cli as webserver_cli

    from pipeline_defs.runtime.run_processes import install_server_opener

    settings = Settings.from_env()
    install_server_opener()  # the code server it opens is pipeline_defs/runtime/run_processes.py
    webserver_cli.uvicorn = types.SimpleNamespace(run=guarded_run(uvicorn.run, settings.ui_allowed_hosts))
    webserver_cli.main()


if __name__ == "__main__":
    main()
