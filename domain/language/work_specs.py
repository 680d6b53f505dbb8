"""What discovery needs to know of a use case (`appdb.discovery.WorkSpec`), derived from its declaration.

Dagster-free, so the light commands (`pipeline status`, `pipeline trace`) find pending work without
building the code location."""

from __future__ import annotations

from collections.abc import Mapping

from appdb.discovery import WorkSpec
from domain.language.declaration import UseCase, model_label
from domain.language.declaration_parts import DeclarationError


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
        subjects=use_case.subject.table,
    )


def work_specs(use_cases: list[UseCase] | tuple[UseCase, ...]) -> list[WorkSpec]:
    """Each use case's spec, its upstream looked up among `use_cases`."""
    registry = {use_case.name: use_case for use_case in use_cases}
    return [work_spec(use_case, registry) for use_case in use_cases]
