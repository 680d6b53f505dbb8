"""Canaries for the places where this project swaps a piece of Dagster at runtime. Each test pins what
the swap relies on, so a Dagster upgrade that moves it fails here, loudly, naming the swap, instead of
the project quietly running without it (the pooled storages have their own canary,
`test_dagster_private_api.py`):

- the daemon's sensor loop (`pipeline_defs/runtime/daemon.py`: its waits cut short when work arrives);
- dagster-webserver's `uvicorn` (`pipeline_defs/runtime/webserver.py`: the app served inside `RequestGuard`);
- dagster dev's subprocess opener and body (`pipeline_defs/runtime/dev.py`: the guarded webserver and
  the waking daemon started in place of Dagster's own);
- the migrations folder Dagster reads to check a storage's revision
  (`pipeline_defs/runtime/dagster_storage.py`: read once per process, not at every opening of the instance);
- the code server's run processes and the opener of code servers (`pipeline_defs/runtime/run_processes.py`:
  runs forked from a process that loaded the code location once);
- the code server's sensor contexts (`pipeline_defs/runtime/sensor_instance.py`: one Dagster instance for
  every tick, not one opened and disposed per tick).

When one fails after an upgrade: read the new source, bring the swap in line, and run the end-to-end
tests (`tests/end_to_end/test_ui_guard.py`, `test_daemon_end_to_end.py`).
"""

from __future__ import annotations

import inspect
import types

import uvicorn


def test_the_daemon_loop_the_wake_up_wraps_is_where_it_was() -> None:
    from dagster._daemon import daemon as daemon_module
    from dagster._daemon import sensor as sensor_module

    loop = daemon_module.execute_sensor_iteration_loop  # looked up by name when the daemon runs
    assert loop is sensor_module.execute_sensor_iteration_loop
    assert "shutdown_event" in inspect.signature(loop).parameters
    assert "execute_sensor_iteration_loop(" in inspect.getsource(daemon_module.SensorDaemon.core_loop)
    assert ".wait(" in inspect.getsource(loop)  # its pause between looks is a wait on that event


def test_the_webserver_serves_through_its_modules_uvicorn_run_with_host_and_port() -> None:
    from dagster_webserver import cli as webserver_cli

    assert webserver_cli.uvicorn is uvicorn  # a module attribute: the guard replaces it
    source = inspect.getsource(webserver_cli)
    assert "uvicorn.run(\n            app,\n            host=host,\n            port=port," in source


def test_the_guarded_run_wraps_the_app_it_is_handed() -> None:
    from pipeline_defs.runtime.request_guard import RequestGuard
    from pipeline_defs.runtime.webserver import guarded_run

    served: list[object] = []
    run = guarded_run(lambda app, *args, **kwargs: served.append(app), ("proxy.example",))
    run(types.SimpleNamespace(), host="127.0.0.1", port=3000, log_level="warning")
    assert isinstance(served[0], RequestGuard)


def test_dagster_dev_starts_its_processes_through_its_modules_opener() -> None:
    from dagster._cli import dev as dagster_dev

    assert callable(dagster_dev.open_ipc_subprocess)  # a module global: `pipeline ui` replaces it
    source = inspect.getsource(dagster_dev.dev_command_impl)
    assert 'open_ipc_subprocess(\n                [sys.executable, "-m", "dagster_webserver"]' in source
    assert '"-m",\n                    "dagster._daemon",\n                    "run",' in source


def test_pipeline_ui_calls_dagster_devs_body_which_warns_of_nothing() -> None:
    """`pipeline ui` calls `dev_command_impl` with the arguments of its signature (the click command
    around it warned on every start that `dagster dev` is superseded by `dg dev`)."""
    from dagster._cli import dev as dagster_dev

    parameters = inspect.signature(dagster_dev.dev_command_impl).parameters
    assert {"port", "host", "workspace_opts", "shutdown_pipe", "use_legacy_code_server_behavior"} <= set(
        parameters
    )
    assert "superseded" not in inspect.getsource(dagster_dev.dev_command_impl)


def test_dagster_checks_storage_revisions_through_its_modules_script_directory() -> None:
    from dagster._core.storage import sql as dagster_sql

    from pipeline_defs.runtime import dagster_storage

    # a module global that `check_alembic_revision` looks up when it runs: the swap replaces it
    assert dagster_sql.ScriptDirectory is dagster_storage._ScriptDirectoryOnce
    source = inspect.getsource(dagster_sql.check_alembic_revision)
    assert "ScriptDirectory.from_config(alembic_config)" in source


def test_the_migrations_are_read_once_per_folder_and_still_name_dagsters_head() -> None:
    from alembic.script import ScriptDirectory
    from dagster._core.storage.runs.sqlite import sqlite_run_storage
    from dagster._core.storage.sql import get_alembic_config

    from pipeline_defs.runtime import dagster_storage

    config = get_alembic_config(sqlite_run_storage.__file__)
    once = dagster_storage._ScriptDirectoryOnce
    assert once.from_config(config) is once.from_config(config)
    head = ScriptDirectory.from_config(config).as_revision_number("head")
    assert once.from_config(config).as_revision_number("head") == head


def test_the_code_server_starts_runs_through_its_own_multiprocessing_context() -> None:
    """pipeline_defs/runtime/run_processes.py gives each `DagsterApiServer` a forkserver context in place of
    the spawn context it creates, and its runs are that context's processes."""
    from dagster._grpc import server

    init = inspect.getsource(server.DagsterApiServer.__init__)
    assert 'self._mp_ctx = multiprocessing.get_context("spawn")' in init
    start_run = inspect.getsource(server.DagsterApiServer.StartRun)
    assert (
        "execution_process = self._mp_ctx.Process(\n            target=start_run_in_subprocess," in start_run
    )


def test_code_servers_are_opened_as_python_m_dagster_through_the_modules_opener() -> None:
    """A process opening a code server runs `python -m dagster api grpc` (or `code-server start`)
    through `dagster._grpc.server.open_ipc_subprocess`, a module global the swap replaces."""
    from dagster._core.origin import get_python_environment_entry_point
    from dagster._grpc import server
    from dagster._grpc.constants import GrpcServerCommand

    from pipeline_defs.runtime.run_processes import DAGSTER_ENTRY, SERVER_COMMANDS

    assert tuple(get_python_environment_entry_point("python")[1:]) == DAGSTER_ENTRY
    assert {tuple(command.server_command[:2]) for command in GrpcServerCommand} == set(SERVER_COMMANDS)
    source = inspect.getsource(server.open_server_process)
    assert "entrypoint = get_python_environment_entry_point(" in source
    assert "server_process = open_ipc_subprocess(subprocess_args, cwd=cwd, env=env)" in source


def test_the_code_server_makes_sensor_contexts_through_its_modules_name_and_they_open_lazily() -> None:
    """pipeline_defs/runtime/sensor_instance.py replaces the context class `dagster._grpc.impl` names; its
    subclass hands the context an instance before the context's own `instance` would open one from
    the ref (and dispose it at the tick's end)."""
    from dagster import SensorEvaluationContext
    from dagster._grpc import impl

    from pipeline_defs.runtime.sensor_instance import KeptInstanceSensorContext

    assert impl.SensorEvaluationContext in (SensorEvaluationContext, KeptInstanceSensorContext)
    assert "with SensorEvaluationContext(" in inspect.getsource(impl.get_external_sensor_execution)
    opening = inspect.getsource(SensorEvaluationContext.instance.fget)
    assert "if not self._instance:" in opening
    assert "DagsterInstance.from_ref(self._instance_ref)" in opening
    init = inspect.getsource(SensorEvaluationContext.__init__)
    assert "self._instance_ref = " in init and "self._instance = " in init
