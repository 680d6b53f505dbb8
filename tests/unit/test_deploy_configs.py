"""The deployment files of deploy/ against Dagster's own schemas: nothing can run Docker or Kubernetes
here, so a typo in a key, a launcher's missing required field or a variable name the project does not
read would otherwise show only on the user's cluster.

Each `dagster.yaml` goes through Dagster's instance schema (as `DagsterInstance` reads it), then each
configurable class it names (the run launcher, the storage) through that class's own `config_type()`;
the step-pod run config through `k8s_job_executor`'s schema. The class-level check uses Dagster's
private `dagster._config.process_config` (no public API validates a class's config without building
it, and building K8sRunLauncher needs a cluster): `test_private_config_api_still_behaves` pins it."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config

from domain.core.configuration import declared_settings
from pipeline_defs.settings import PROJECT_ROOT, Settings, plugin_sections

DEPLOY = PROJECT_ROOT / "deploy"
INSTANCE_FILES = {
    "docker": (DEPLOY / "docker" / "dagster.yaml", "dagster_docker", "DockerRunLauncher"),
    "k8s": (DEPLOY / "k8s" / "dagster.yaml", "dagster_k8s", "K8sRunLauncher"),
}
# the variables the files name for Dagster itself or the platform, beside the project's settings
PLATFORM_VARIABLES = {"DAGSTER_HOME"}


def project_variables() -> set[str]:
    """Every environment variable the settings read (docs/configuration.md)."""
    sections = [Settings, *plugin_sections().values()]
    return {
        name
        for section in sections
        for _, declared in declared_settings(section)
        for name in (declared.variable, *declared.also)
    }


def class_config_errors(module: str, class_name: str, config: dict[str, Any]) -> list[str]:
    """What Dagster's schema of that configurable class says is wrong with `config` (none: valid)."""
    configurable = getattr(importlib.import_module(module), class_name)
    result = process_config(configurable.config_type(), config)
    return [] if result.success else [error.message for error in result.errors or []]


@pytest.fixture
def variables_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """`{env: NAME}` values are resolved when Dagster processes a config: give them a value."""
    monkeypatch.setenv("PIPELINE_DAGSTER_POSTGRES_URL", "postgresql+psycopg2://dagster@db-host:5432/dagster")


@pytest.mark.parametrize("platform", INSTANCE_FILES)
def test_instance_file_passes_dagsters_schemas(platform: str, variables_set: None, tmp_path: Path) -> None:
    path, module, launcher = INSTANCE_FILES[platform]
    (tmp_path / "dagster.yaml").write_text(path.read_text())
    config, _ = dagster_instance_config(str(tmp_path))  # raises DagsterInvalidConfigError, naming the key

    assert config["run_launcher"]["module"] == module and config["run_launcher"]["class"] == launcher
    assert class_config_errors(module, launcher, config["run_launcher"]["config"]) == []
    assert (
        class_config_errors("dagster_postgres", "DagsterPostgresStorage", config["storage"]["postgres"]) == []
    )


@pytest.mark.parametrize("platform", INSTANCE_FILES)
def test_variables_passed_to_runs_are_ones_the_project_reads(platform: str) -> None:
    """A misspelt name (PIPELINE_LLM_HOST) would reach the run's container as nothing at all."""
    path, _, _ = INSTANCE_FILES[platform]
    launcher = yaml.safe_load(path.read_text())["run_launcher"]["config"]
    named = {entry.split("=", 1)[0] for entry in launcher.get("env_vars", [])}
    named |= set(re.findall(r"\benv: (\w+)", path.read_text()))
    unknown = named - project_variables() - PLATFORM_VARIABLES
    assert not unknown, f"{path.name} names variables no setting reads: {sorted(unknown)}"


def test_step_pod_run_config_passes_the_k8s_executors_schema() -> None:
    from dagster_k8s import k8s_job_executor

    run_config = yaml.safe_load((DEPLOY / "k8s" / "step_pods.yaml").read_text())
    result = process_config(k8s_job_executor.config_schema.config_type, run_config["execution"]["config"])
    assert result.success, [error.message for error in result.errors or []]
    assert result.value["max_concurrent"] == 4


def test_a_wrong_key_is_caught(variables_set: None) -> None:
    """The check can fail: a launcher field misspelt, a required one missing."""
    _, module, launcher = INSTANCE_FILES["docker"]
    assert class_config_errors(module, launcher, {"image": "x", "netwrok": "pipeline"})
    _, module, launcher = INSTANCE_FILES["k8s"]
    missing = class_config_errors(module, launcher, {"job_image": "x", "service_account_name": "s"})
    assert any("instance_config_map" in message for message in missing), missing


def test_private_config_api_still_behaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary for `dagster._config.process_config` (private): its signature, that it resolves
    `{env: NAME}` and fills defaults on success, and names the field on failure. When a Dagster
    upgrade breaks it, find its new home and update the import above."""
    assert list(inspect.signature(process_config).parameters) == ["config_type", "config_dict"]
    assert list(inspect.signature(dagster_instance_config).parameters)[:2] == ["base_dir", "config_filename"]
    from dagster_docker import DockerRunLauncher

    monkeypatch.setenv("CANARY_IMAGE", "registry.example/canary:1")
    good = process_config(DockerRunLauncher.config_type(), {"image": {"env": "CANARY_IMAGE"}})
    assert good.success and good.value["image"] == "registry.example/canary:1"
    bad = process_config(DockerRunLauncher.config_type(), {"imag": "x"})
    assert not bad.success and "imag" in " ".join(error.message for error in bad.errors)
