"""Where a batch run's steps execute (PIPELINE_EXECUTOR): in the run's process (the default), on Celery
workers of other machines (`celery`), or in a Kubernetes pod each (`k8s`).

With Celery each step goes to a queue by kind: a script step (the skill tagger, the linker: CPU) to
PIPELINE_CELERY_CPU_QUEUE, a step that calls a model to PIPELINE_CELERY_MODEL_QUEUE, so CPU workers run
on machines with cores to spare and model workers beside the model hosts (`pipeline worker --queue`).
The run itself stays where the run launcher puts it and only sends the steps and waits for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dagster import ExecutorDefinition, in_process_executor

from assets.factory import CELERY_QUEUE_TAG
from domain.language.declaration import UseCase
from pipeline_defs.settings import Settings
from resources.app_database import source_of_run
from resources.run_heartbeat import DEFAULT_LEASE_SECONDS, RunHeartbeat

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
        return run_beating_celery_executor(settings).configured(
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


def run_beating_celery_executor(settings: Settings) -> ExecutorDefinition:
    """dagster-celery's executor whose run process beats the run's heartbeat while it sends the steps and
    waits for them. Without it a run's only heartbeat came from its step's worker process, so a step
    waiting in the broker's queue (or its run waiting on the `llm` pool) had none, and the liveness
    sensor failed a run that was merely queued. The step's worker process beats a row of its own
    (`resources/app_database.AppDatabase.step_heartbeat`)."""
    from dagster import executor, multiple_process_executor_requirements
    from dagster_celery import celery_executor
    from dagster_celery.executor import CeleryExecutor

    class RunBeatingCeleryExecutor(CeleryExecutor):
        def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[Any]:
            run = plan_context.dagster_run
            heartbeat = RunHeartbeat(
                settings.database_url,
                run.run_id,
                run.job_name,
                source_of_run(dict(run.tags)),
                settings.heartbeat_seconds,
                settings.lease_seconds or DEFAULT_LEASE_SECONDS,
            ).start(plan_context.instance)
            try:
                yield from super().execute(plan_context, execution_plan)
            finally:
                heartbeat.stop(timeout=settings.heartbeat_seconds)

    @executor(
        name="celery",
        config_schema=celery_executor.config_schema,
        requirements=multiple_process_executor_requirements(),
    )
    def _celery(init_context: Any) -> RunBeatingCeleryExecutor:
        inner = celery_executor.executor_creation_fn(init_context)
        return RunBeatingCeleryExecutor(
            retries=inner.retries,
            broker=inner.broker,
            backend=inner.backend,
            include=inner.include,
            config_source=init_context.executor_config.get("config_source"),
        )

    return _celery


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
