"""PIPELINE_EXECUTOR: which executor the batch jobs get and which Celery queue each step is sent to;
the default leaves every job as it was (in the run's process, no queue tags)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dagster import validate_run_config

from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.worker import WorkerSetupError, check_worker_settings
from pipeline_defs.settings import PROJECT_ROOT, Settings

QUEUE_TAG = "dagster-celery/queue"
BATCH_JOBS = {"gemma3_270m_batch_job", "posting_skills_batch_job", "skill_entities_batch_job"}


def batch_jobs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **environment: str) -> dict:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    repository = build_definitions(Settings.from_env()).get_repository_def()
    return {job.name: job for job in repository.get_all_jobs() if job.name in BATCH_JOBS}


def step_queues(job) -> dict[str, str | None]:
    return {node.name: node.tags.get(QUEUE_TAG) for node in job.graph.node_dict.values()}


def test_by_default_the_batch_steps_run_in_the_runs_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    jobs = batch_jobs(monkeypatch, tmp_path)
    assert set(jobs) == BATCH_JOBS
    assert {job.executor_def.name for job in jobs.values()} == {"in_process"}
    assert all(queue is None for job in jobs.values() for queue in step_queues(job).values())


def test_celery_sends_script_steps_to_the_cpu_queue_and_model_steps_to_the_model_queue(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    jobs = batch_jobs(
        monkeypatch,
        tmp_path,
        PIPELINE_EXECUTOR="celery",
        PIPELINE_CELERY_CPU_QUEUE="cores",
    )
    assert {job.executor_def.name for job in jobs.values()} == {"celery"}
    assert step_queues(jobs["gemma3_270m_batch_job"]) == {"posting_summary": "model"}
    assert step_queues(jobs["posting_skills_batch_job"]) == {"posting_skills": "cores"}
    assert step_queues(jobs["skill_entities_batch_job"]) == {"skill_entities": "cores"}


def test_the_k8s_executor_takes_the_step_pod_run_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """deploy/k8s/step_pods.yaml is the run config of a batch job on `k8s_job_executor`."""
    jobs = batch_jobs(monkeypatch, tmp_path, PIPELINE_EXECUTOR="k8s")
    run_config = yaml.safe_load((PROJECT_ROOT / "deploy" / "k8s" / "step_pods.yaml").read_text())
    validated = validate_run_config(jobs["posting_skills_batch_job"], run_config)
    assert validated["execution"]["k8s"]["job_namespace"] == "posting-enrichment"


def test_an_unknown_executor_or_queue_name_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_EXECUTOR", "celeri")
    with pytest.raises(ValueError, match="PIPELINE_EXECUTOR must be one of in_process, celery, k8s"):
        Settings.from_env()
    monkeypatch.setenv("PIPELINE_EXECUTOR", "celery")
    monkeypatch.setenv("PIPELINE_CELERY_MODEL_QUEUE", "gpu hosts")
    with pytest.raises(ValueError, match="PIPELINE_CELERY_MODEL_QUEUE must be a queue name"):
        Settings.from_env()


def test_a_worker_refuses_settings_that_cannot_reach_the_daemons_runs(tmp_path: Path) -> None:
    base = {"PIPELINE_DATA_DIR": str(tmp_path)}
    messages = []
    for environment in (
        {},
        {"PIPELINE_EXECUTOR": "celery"},
        {"PIPELINE_EXECUTOR": "celery", "PIPELINE_DAGSTER_POSTGRES_URL": "postgresql+psycopg2://db/dagster"},
    ):
        with pytest.raises(WorkerSetupError) as refused:
            check_worker_settings(Settings.from_env({**base, **environment}))
        messages.append(str(refused.value))
    assert "PIPELINE_EXECUTOR=celery" in messages[0]
    assert "PIPELINE_DAGSTER_POSTGRES_URL" in messages[1]
    assert "PIPELINE_DATABASE_URL" in messages[2]
    assert all("\n" not in message for message in messages)
