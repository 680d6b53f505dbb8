"""Runs forked from a process that loaded the code location (pipeline_defs/runtime/run_processes.py): a run's
process starts with it loaded, and code servers are opened through the entry that forks their runs."""

from __future__ import annotations

import sys
import time

from pipeline_defs.runtime.run_processes import THIS_MODULE, forking_context, through_this_module


def _report_what_is_loaded(queue) -> None:  # noqa: ANN001 - in the run's process
    queue.put(("pipeline_defs.definitions" in sys.modules, time.process_time()))


def test_a_run_process_starts_with_the_code_location_loaded_and_spends_no_cpu_loading_it() -> None:
    context = forking_context()
    queue = context.Queue()
    run = context.Process(target=_report_what_is_loaded, args=(queue,))
    run.start()
    loaded, cpu_seconds = queue.get(timeout=300)  # the forkserver's first import, on a loaded machine
    run.join(timeout=60)
    assert loaded
    assert cpu_seconds < 1.0  # spawned, the same process imported the code location: ~2.5 CPU s


def test_code_servers_are_opened_through_the_entry_that_forks_their_runs() -> None:
    python = "/venv/bin/python"
    assert through_this_module([python, "-m", "dagster", "api", "grpc", "--socket", "/tmp/s"]) == [
        python, "-m", THIS_MODULE, "api", "grpc", "--socket", "/tmp/s",
    ]  # fmt: skip
    assert (
        through_this_module([python, "-m", "dagster", "code-server", "start", "-p", "4000"])[2] == THIS_MODULE
    )
    webserver = [python, "-m", "dagster_webserver", "-p", "3000"]
    assert through_this_module(webserver) == webserver  # anything else as it was
