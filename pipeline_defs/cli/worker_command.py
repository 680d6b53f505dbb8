"""`pipeline worker`: a Celery worker for the batch runs' steps, on this machine (docs/operations.md,
"Past one machine")."""

from __future__ import annotations

import argparse
import sys

from console.terminal import EXIT_ERROR
from domain.core.configuration import SettingError
from pipeline_defs.settings import Settings, queue_name

HELP = "a Celery worker for the batch runs' steps (PIPELINE_EXECUTOR=celery), on the queues named"


def register(commands: argparse._SubParsersAction) -> None:
    worker = commands.add_parser("worker", help=HELP)
    worker.add_argument(
        "--queue",
        action="append",
        dest="queues",
        metavar="NAME",
        help="a queue to take steps from (repeat for more; default: PIPELINE_CELERY_CPU_QUEUE and "
        "PIPELINE_CELERY_MODEL_QUEUE, `cpu` and `model`)",
    )
    worker.add_argument(
        "--concurrency", type=int, default=None, help="steps at once (default: the machine's cores)"
    )
    worker.add_argument(
        "--name", default=None, help="the worker's name before @host (default: pipeline-QUEUES)"
    )
    worker.set_defaults(handler=cmd_worker)


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.runtime.dagster_home import ensure_dagster_home
    from pipeline_defs.runtime.worker import (
        WorkerSetupError,
        celery_app,
        check_broker,
        check_worker_settings,
        run_worker,
    )

    queues = args.queues or [settings.celery_cpu_queue, settings.celery_model_queue]
    try:
        queues = [queue_name(queue) for queue in queues]
    except SettingError as exc:
        print(f"error: --queue {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.concurrency is not None and args.concurrency < 1:
        print("error: --concurrency must be at least 1", file=sys.stderr)
        return EXIT_ERROR
    try:
        check_worker_settings(settings)
        app = celery_app(settings)
        check_broker(app, settings)  # before anything is written to the databases
        ensure_dagster_home(settings)  # DAGSTER_HOME and the storage URL for the steps' instance
        print(f"worker on queues {', '.join(queues)}", flush=True)
        run_worker(app, queues, args.concurrency, args.name)
    except WorkerSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0
