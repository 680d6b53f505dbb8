"""A Celery worker for the steps of the batch runs (PIPELINE_EXECUTOR=celery): `pipeline worker`.

It is dagster-celery's own task (`execute_plan`: load the run from Dagster's storage, execute the step,
send its events back), in a Celery app built from our settings instead of a config file, with the code
location loaded once before the worker forks its processes (each step then costs no import).
A step's message is acknowledged when the step ends, not when it starts: a worker that dies or loses
the broker mid-step leaves it to the broker, which gives it to another worker of the same queue.
dagster-celery's app and task are pinned by `tests/integration/test_celery_executor.py` (a real broker and
worker); the worker's refusals by `tests/unit/test_executors.py`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from appdb.redaction import redact
from pipeline_defs.executors import CELERY_APP_CONFIG
from pipeline_defs.settings import Settings

WORKER_APP_CONFIG: dict[str, Any] = {
    **CELERY_APP_CONFIG,
    "task_acks_late": True,  # acknowledged when the step ends: a lost worker's step is delivered again
    "task_reject_on_worker_lost": True,  # a worker process killed mid-step: back to the queue, not failed
    # the broker notices a worker host gone within about two of these (RabbitMQ's own default is 60 s)
    "broker_heartbeat": 10,
    "worker_cancel_long_running_tasks_on_connection_loss": True,
}
BROKER_CHECK_SECONDS = 5.0


class WorkerSetupError(Exception):
    """What keeps a worker from starting, in one line."""


def check_worker_settings(settings: Settings) -> None:
    """A worker runs steps of runs the daemon started on another machine: it needs the same broker
    and the same databases (the steps read their run from Dagster's storage and write outputs to the
    application database)."""
    if settings.executor != "celery":
        raise WorkerSetupError(
            f"PIPELINE_EXECUTOR is {settings.executor}: no run sends steps to Celery. Set "
            "PIPELINE_EXECUTOR=celery here and for the daemon"
        )
    if not settings.dagster_postgres_url:
        raise WorkerSetupError(
            "a worker reads its runs from Dagster's storage: set PIPELINE_DAGSTER_POSTGRES_URL to the "
            "daemon's (PostgreSQL)"
        )
    if settings.database_url.startswith("sqlite"):
        raise WorkerSetupError(
            "a worker writes to the application database the daemon uses: set PIPELINE_DATABASE_URL to "
            "the daemon's (PostgreSQL)"
        )


def celery_app(settings: Settings, app_config: dict[str, Any] | None = None) -> Any:
    """dagster-celery's app with its step task, on the configured broker and result backend."""
    from dagster_celery.executor import CeleryExecutor
    from dagster_celery.make_app import make_app
    from dagster_celery.tasks import create_task

    executor = CeleryExecutor.for_cli(
        broker=settings.celery_broker_url,
        backend=settings.celery_backend_url,
        config_source=app_config or WORKER_APP_CONFIG,
    )
    app = make_app(executor.app_args())
    create_task(app)
    return app


def check_broker(app: Any, settings: Settings) -> None:
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=BROKER_CHECK_SECONDS)
    except Exception as exc:  # kombu raises the transport's own errors
        raise WorkerSetupError(
            f"cannot reach the Celery broker {redact(settings.celery_broker_url)}: {exc}"
        ) from None


def worker_name(queues: Sequence[str], name: str | None) -> str:
    return f"{name or 'pipeline-' + '-'.join(queues)}@{socket.gethostname()}"


def run_worker(app: Any, queues: Sequence[str], concurrency: int | None, name: str | None) -> None:
    """Start the worker in this process (until stopped: SIGTERM finishes the steps under way first)."""
    import pipeline_defs.definitions  # noqa: F401  the code location, once, before the worker forks

    argv = ["worker", "--loglevel=INFO", "-Q", ",".join(queues), "-n", worker_name(queues, name)]
    if concurrency:
        argv.append(f"--concurrency={concurrency}")
    app.worker_main(argv)
