"""The one factory: use-case declarations in, their assets, checks, jobs and sensors out.

Each use case gets its asset (with checks) and a job of its own for manual runs.
Discovery and batching go by *work group*: all LLM use cases that share a model form
one group, whose job materializes every member for the batch in one run (summary, then
skills) with the model loaded once; a script use case (no model) is a group of its own.
A use case that reads another of its own group goes into a later stage group
(`<model>_stage2`), since Dagster would skip it in the same run. Each group has one
discovery sensor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dagster import AssetsDefinition, SensorDefinition, define_asset_job, in_process_executor

from appdb.work import WorkSpec
from assets.gym import batch_selection
from assets.llm_use_case import build_use_case_asset
from domain.language.declaration import UseCase, model_label
from domain.language.declaration_parts import DeclarationError

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


@dataclass(frozen=True)
class UseCaseDefinitions:
    use_case: UseCase
    spec: WorkSpec
    asset: AssetsDefinition
    job: UnresolvedAssetJobDefinition
    batch_size: int


@dataclass(frozen=True)
class WorkGroup:
    """Use cases discovered and run together: one model (or one script), one run per batch."""

    name: str
    model: str | None
    members: tuple[UseCaseDefinitions, ...]
    job: UnresolvedAssetJobDefinition
    batch_size: int
    sensor: SensorDefinition | None = None

    @property
    def priority(self) -> int:
        return max(member.use_case.priority for member in self.members)

    @property
    def use_case_names(self) -> list[str]:
        return [member.use_case.name for member in self.members]


def job_name(use_case: UseCase) -> str:
    return f"{use_case.name}_job"


def work_spec(use_case: UseCase, registry: Mapping[str, UseCase], _path: tuple[str, ...] = ()) -> WorkSpec:
    """What discovery needs: this use case's version and model, and the specs of what it reads."""
    missing = [name for name in use_case.upstream if name not in registry]
    if missing:
        raise DeclarationError(f"{use_case.name}: upstream use case {missing[0]!r} is not declared")
    if use_case.name in _path:
        raise DeclarationError(f"use cases depend on each other in a cycle: {[*_path, use_case.name]}")
    return WorkSpec(
        use_case=use_case.name,
        version=use_case.version,
        upstream_versions={name: registry[name].version for name in use_case.upstream},
        discovery_where=use_case.discovery_where,
        reference_inputs=use_case.reference_inputs,
        model=model_label(use_case),
        upstream_models={name: model_label(registry[name]) for name in use_case.upstream},
        upstream_specs={
            name: work_spec(registry[name], registry, (*_path, use_case.name)) for name in use_case.upstream
        },
    )


def build_use_case(
    use_case: UseCase, registry: Mapping[str, UseCase], batch_size_override: int | None = None
) -> UseCaseDefinitions:
    spec = work_spec(use_case, registry)
    batch_size = batch_size_override or use_case.batch_size
    # the asset's backfill policy batches UI backfills: it must honour PIPELINE_BATCH_SIZE too
    asset = build_use_case_asset(replace(use_case, batch_size=batch_size), spec)
    job = define_asset_job(
        job_name(use_case),
        selection=batch_selection([asset]),
        description=f"Materialize {use_case.name} for a batch of postings ({use_case.model or 'no model'}).",
        tags={"pipeline/use_case": use_case.name},
        executor_def=in_process_executor,
    )
    return UseCaseDefinitions(use_case, spec, asset, job, batch_size)


def group_name_for(use_case: UseCase) -> str:
    """LLM use cases group by model (`gemma3:270m` -> `gemma3_270m`); a script is its own group."""
    if use_case.is_script or not use_case.model:  # a script, or a chain of script steps only
        return use_case.name
    return re.sub(r"[^a-z0-9]+", "_", use_case.model.lower()).strip("_")


def build_work_groups(built: Sequence[UseCaseDefinitions]) -> list[WorkGroup]:
    """Group use cases by model, upstream first, and give each group its job and sensor."""
    from sensors.discovery import build_discovery_sensor  # the sensor module imports WorkGroup

    by_name: dict[str, list[UseCaseDefinitions]] = {}
    stage: dict[str, int] = {}
    base_of: dict[str, str] = {}
    for item in upstream_first(built):
        # Dagster skips a step whose upstream step in the same run yielded no output (ours yield
        # per-posting materializations only), so a use case reading another of its own group
        # runs in a later stage: a group and job of its own (e.g. a fan-in synthesizer).
        base = group_name_for(item.use_case)
        same_group = [
            stage[name] + 1 for name in item.use_case.upstream if name in stage and base_of[name] == base
        ]
        stage[item.use_case.name] = max(same_group, default=0)
        base_of[item.use_case.name] = base
        name = base if not stage[item.use_case.name] else f"{base}_stage{stage[item.use_case.name] + 1}"
        by_name.setdefault(name, []).append(item)
    groups = []
    for name, members in by_name.items():
        model = None if members[0].use_case.is_script else members[0].use_case.model
        job = define_asset_job(
            f"{name}_batch_job",
            selection=batch_selection([member.asset for member in members]),
            description=(
                f"One batch of postings through {', '.join(m.use_case.name for m in members)}"
                + (f", with {model} loaded once." if model else " (no model).")
            ),
            tags={"pipeline/work_group": name},
            executor_def=in_process_executor,  # one process: resources (the loaded model) shared by steps
        )
        group = WorkGroup(name, model, tuple(members), job, min(m.batch_size for m in members))
        groups.append(replace(group, sensor=build_discovery_sensor(group)))
    return groups


def upstream_first(built: Sequence[UseCaseDefinitions]) -> list[UseCaseDefinitions]:
    """Order use cases so each comes after what it reads; among equals, higher priority first."""
    remaining = sorted(built, key=lambda item: -item.use_case.priority)
    ordered: list[UseCaseDefinitions] = []
    done: set[str] = set()
    while remaining:
        ready = [item for item in remaining if set(item.use_case.upstream) <= done]
        if not ready:
            raise DeclarationError(
                f"use cases depend on each other in a cycle: {[i.use_case.name for i in remaining]}"
            )
        ordered.append(ready[0])
        done.add(ready[0].use_case.name)
        remaining.remove(ready[0])
    return ordered
