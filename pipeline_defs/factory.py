"""The one factory: a use-case declaration in, its asset, checks, job and sensor out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dagster import AssetsDefinition, SensorDefinition, define_asset_job

from appdb.work import WorkSpec
from assets.llm_use_case import build_use_case_asset
from pipeline_defs.declaration import DeclarationError, UseCase
from sensors.discovery import build_discovery_sensor

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


@dataclass(frozen=True)
class UseCaseDefinitions:
    use_case: UseCase
    spec: WorkSpec
    asset: AssetsDefinition
    job: UnresolvedAssetJobDefinition
    sensor: SensorDefinition
    batch_size: int


def job_name(use_case: UseCase) -> str:
    return f"{use_case.name}_job"


def work_spec(use_case: UseCase, registry: Mapping[str, UseCase]) -> WorkSpec:
    """What discovery needs: this use case's version and the versions of what it reads."""
    missing = [name for name in use_case.upstream if name not in registry]
    if missing:
        raise DeclarationError(f"{use_case.name}: upstream use case {missing[0]!r} is not declared")
    return WorkSpec(
        use_case=use_case.name,
        version=use_case.version,
        upstream_versions={name: registry[name].version for name in use_case.upstream},
        discovery_where=use_case.discovery_where,
    )


def build_use_case(
    use_case: UseCase, registry: Mapping[str, UseCase], batch_size_override: int | None = None
) -> UseCaseDefinitions:
    spec = work_spec(use_case, registry)
    batch_size = batch_size_override or use_case.batch_size
    asset = build_use_case_asset(use_case, spec)
    job = define_asset_job(
        job_name(use_case),
        selection=[asset.key],
        description=f"Materialize {use_case.name} for a batch of postings (model {use_case.model}).",
        tags={"pipeline/use_case": use_case.name},
    )
    sensor = build_discovery_sensor(use_case, spec, job, batch_size)
    return UseCaseDefinitions(use_case, spec, asset, job, sensor, batch_size)
