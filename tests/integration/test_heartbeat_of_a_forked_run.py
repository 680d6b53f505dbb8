"""A run that ends in a process forked by the forkserver ends its heartbeat: finished daemon runs were
recorded `dead` (issue 66, item 8).

The code server forks each run from a forkserver (`PIPELINE_RUN_START=forkserver`, the default,
`pipeline_defs/runtime/run_processes.py`), and a forkserver's child ends with `os._exit`: the heartbeat's
`atexit` hook never ran, the row stayed `alive` for a pid that was gone, and the reaper then marked
the finished run dead ("its process is gone"). The process here is forked the same way.
"""

from __future__ import annotations

import uuid

from appdb import heartbeats
from appdb.database import migrate, session_scope
from pipeline_defs.runtime.run_processes import forking_context
from resources.run_heartbeat import RunHeartbeat


def a_run_that_finishes(url: str, run_id: str) -> None:
    """What a run's process does with its heartbeat: starts it with the run's resources, then returns."""
    RunHeartbeat(url, run_id, "posting_summary_job", "sensor", 60.0).start()


def test_a_finished_run_in_a_forked_process_is_recorded_ended_not_alive(app_db_url: str) -> None:
    migrate(app_db_url)
    run_id = uuid.uuid4().hex
    # the code server's own context: a plain forkserver context would start this process's forkserver
    # without the code location preloaded, and every later fork in it would lack it
    process = forking_context().Process(target=a_run_that_finishes, args=(app_db_url, run_id))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
    with session_scope(app_db_url) as session:
        beat = heartbeats.heartbeats_of(session, [run_id])[run_id]
        alive = [b.run_id for b in heartbeats.alive_heartbeats(session)]
    assert beat.state == "ended", f"left {beat.state!r}: the reaper would record the finished run dead"
    assert run_id not in alive
