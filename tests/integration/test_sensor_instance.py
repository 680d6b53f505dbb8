"""A code server's sensor ticks share one Dagster instance (pipeline_defs/runtime/sensor_instance.py): ticks
evaluated the way the code server evaluates them (`dagster._grpc.impl.get_external_sensor_execution`,
from the daemon's instance ref) open it once, and each tick still sees what changed since the last."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import (
    ConfigurableResource,
    DagsterInstance,
    Definitions,
    SensorEvaluationContext,
    SkipReason,
    job,
    op,
    sensor,
)
from dagster._grpc import impl

from pipeline_defs.runtime.sensor_instance import install_kept_sensor_instance


class Label(ConfigurableResource):
    text: str = "runs"


@op
def nothing() -> None:
    pass


@job
def some_job() -> None:
    nothing()


@sensor(job=some_job)
def counting_sensor(context: SensorEvaluationContext, label: Label) -> SkipReason:
    """Takes a resource, as the project's sensors do: its context opens the instance for it."""
    return SkipReason(f"{len(context.instance.get_runs())} {label.text}")


def _tick(repository, instance: DagsterInstance) -> str:  # noqa: ANN001 - a RepositoryDefinition
    data = impl.get_external_sensor_execution(
        repository, None, instance.get_ref(), "counting_sensor", None, None, None, None, None
    )
    assert not hasattr(data, "error"), data
    return data.skip_message


REPOSITORY = Definitions(jobs=[some_job], sensors=[counting_sensor], resources={"label": Label()})


def _count_openings(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every `DagsterInstance.from_ref` from now on, appended to the list returned."""
    opened = []
    from_ref = DagsterInstance.from_ref
    monkeypatch.setattr(DagsterInstance, "from_ref", lambda ref: opened.append(ref) or from_ref(ref))
    return opened


def test_ticks_share_one_instance_and_each_sees_the_runs_added_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(impl, "SensorEvaluationContext", impl.SensorEvaluationContext)  # undone after
    assert install_kept_sensor_instance()
    repository, opened = REPOSITORY.get_repository_def(), _count_openings(monkeypatch)

    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        first = _tick(repository, instance)
        instance.create_run_for_job(some_job)
        second = _tick(repository, instance)
        third = _tick(repository, instance)

    assert (first, second, third) == ("0 runs", "1 runs", "1 runs")
    assert len(opened) == 1  # Dagster's own context opened and disposed one for every tick


def test_without_the_swap_every_tick_opens_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the swap saves: the same ticks through Dagster's own context class."""
    monkeypatch.setattr(impl, "SensorEvaluationContext", SensorEvaluationContext)
    repository, opened = REPOSITORY.get_repository_def(), _count_openings(monkeypatch)
    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        ticks = [_tick(repository, instance) for _ in range(3)]
    assert ticks == ["0 runs"] * 3
    assert len(opened) == 3
