"""Where a batch run's steps execute (PIPELINE_EXECUTOR): in the run's process (the default), on Celery
workers of other machines (`celery`), or in a Kubernetes pod each (`k8s`).

With Celery each step goes to a queue by kind: a script step (the skill tagger, the linker: CPU) to
PIPELINE_CELERY_CPU_QUEUE, a step that calls a model to PIPELINE_CELERY_MODEL_QUEUE, so CPU workers run
on machines with cores to spare and model workers beside the model hosts (`pipeline worker --queue`).
The run itself stays where the run launcher puts it and only sends the steps and waits for them.
"""

from __future__ import annotations

from typing import Any

from dagster import ExecutorDefinition, in_process_executor

from assets.factory import CELERY_QUEUE_TAG
from domain.language.declaration import UseCase
from pipeline_defs.settings import Settings

# The Celery app's settings on the sending side (each run); a worker's own are in
# pipeline_defs/runtime/worker.py.
CELERY_APP_CONFIG: dict[str, Any] = {
    "worker_prefetch_multiplier": 1,  # dagster-celery's own: a worker takes one step at a time
    "task_default_queue": "dagster",
    "task_default_priority": 5,
    "broker_connection_retry_on_startup": True,
}


def batch_executor(settings: Settings) -> ExecutorDefinition:
    """The executor of the work groups' batch jobs (the runs the discovery sensors start)."""
    if settings.executor == "celery":
        from dagster_celery import celery_executor

        return celery_executor.configured(
            {
                "broker": config_source(settings, "celery_broker_url"),
                "backend": config_source(settings, "celery_backend_url"),
                "config_source": CELERY_APP_CONFIG,
            },
            name="celery",
        )
    if settings.executor == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor  # configured by the run config (deploy/k8s/step_pods.yaml)
    return in_process_executor


def step_tags(use_case: UseCase, settings: Settings) -> dict[str, str]:
    """The tags that send a use case's step to its Celery queue (none for the other executors)."""
    if settings.executor != "celery":
        return {}
    queue = settings.celery_model_queue if use_case.uses_llm else settings.celery_cpu_queue
    return {CELERY_QUEUE_TAG: queue}


def config_source(settings: Settings, name: str) -> Any:
    """A setting as a Dagster config value: `{env: VARIABLE}` when read from the environment, so a
    password in a broker URL stays out of the run's stored config and the UI; else the value."""
    variable = settings.from_variable(name)
    return {"env": variable} if variable else getattr(settings, name)
