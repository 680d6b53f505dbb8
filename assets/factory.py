"""The one factory: a use-case declaration in, its asset, checks and jobs out.

Each use case gets its partitioned asset (with its checks; the batch loop in `batch_run.py` is its body)
and a job of its own for manual runs.
Discovery and batching go by *work group*: all LLM use cases that share a model form
one group, whose job materializes every member for the batch in one run with the model loaded
once; a script use case (no model) is a group of its own. Within a run, a member that other use
cases read goes first (`STEP_PRIORITY_TAG`): its outputs are written while the run still calls the
model for the rest, so the readers' runs (resolution) start then, not after the run ends.
A use case that reads another of its own group goes into a later stage group
(`<model>_stage2`), since Dagster would skip it in the same run. Each group has one
discovery sensor, built by `sensors/discovery_sensor.py`.
"""

# No `from __future__ import annotations` here: Dagster reads the asset's config annotation at runtime.
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dagster import (
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    BetaWarning,
    Config,
    ExecutorDefinition,
    define_asset_job,
    in_process_executor,
    multi_asset,
)

# The type `define_asset_job` returns; Dagster does not export it at the top level (a type hint only).
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from appdb.discovery import WorkSpec
from assets.batch_run import ITEMS_OK_CHECK, process_batch
from assets.gym_checks import batch_selection, gym_check_specs
from assets.partitions import partitions_for
from assets.run_tags import USE_CASE_TAG, WORK_GROUP_TAG
from domain.language.declaration import UseCase, code_version, model_label
from domain.language.declaration_parts import DeclarationError
from domain.language.output_parsing import describe_check
from domain.language.subject_kinds import SubjectKind
from domain.language.work_specs import work_spec
from resources.app_database import AppDatabase

# BackfillPolicy is beta in Dagster 1.13; we rely on it on purpose (UI backfills run in batches).
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)

LLM_POOL = "llm"  # the Dagster pool of LLM steps (sensors/run_liveness.py frees a dead run's slots)
STEP_PRIORITY_TAG = "dagster/priority"  # op tag: higher runs first among a run's ready steps
# dagster-celery's op tags (its package is an optional extra, so not imported here): the queue a step is
# sent to, and its priority there (5 unless tagged)
CELERY_QUEUE_TAG = "dagster-celery/queue"
CELERY_PRIORITY_TAG = "dagster-celery/priority"
CELERY_DEFAULT_PRIORITY = 5


class UseCaseRunConfig(Config):
    """force: redo the subjects whose output is already current (and retry parked ones)."""

    force: bool = False


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

    @property
    def priority(self) -> int:
        return max(member.use_case.priority for member in self.members)

    @property
    def use_case_names(self) -> list[str]:
        return [member.use_case.name for member in self.members]

    @property
    def subject(self) -> SubjectKind:
        """Every member runs on the same kind of subject (groups are split by kind)."""
        return self.members[0].use_case.subject

    @property
    def subject_kind(self) -> str:
        return self.subject.name


def job_name(use_case: UseCase) -> str:
    return f"{use_case.name}_job"


def llm_resource_key(use_case: UseCase) -> str:
    """The LLM resource a use case's runs use: `llm` (the deployment's backend), or `llm_<backend>` for a
    use case served by another backend."""
    return f"llm_{use_case.backend}" if use_case.backend else "llm"


def build_use_case(
    use_case: UseCase,
    registry: Mapping[str, UseCase],
    batch_size_override: int | None = None,
    step_tags: Mapping[str, str] | None = None,
) -> UseCaseDefinitions:
    """`step_tags`: more tags on the asset's step, for the executor (a Celery queue)."""
    spec = work_spec(use_case, registry)
    batch_size = batch_size_override or use_case.batch_size
    # the asset's backfill policy batches UI backfills: it must honour PIPELINE_BATCH_SIZE too
    read_by_others = any(use_case.name in other.upstream for other in registry.values())
    asset = build_use_case_asset(
        replace(use_case, batch_size=batch_size), spec, first_in_run=read_by_others, step_tags=step_tags
    )
    job = define_asset_job(
        job_name(use_case),
        selection=batch_selection([asset]),
        description=(
            f"Materialize {use_case.name} for a batch of {use_case.subject.plural} "
            f"({use_case.model or 'no model'})."
        ),
        tags={USE_CASE_TAG: use_case.name},
        executor_def=in_process_executor,
    )
    return UseCaseDefinitions(use_case, spec, asset, job, batch_size)


def build_use_case_asset(
    use_case: UseCase,
    spec: WorkSpec,
    first_in_run: bool = False,
    step_tags: Mapping[str, str] | None = None,
) -> AssetsDefinition:
    """The partitioned asset for one declared use case, with its checks; `first_in_run`: its step goes
    before the other members' in a work group's run (other use cases wait for its outputs)."""
    op_tags = dict(step_tags or {})
    if first_in_run:
        op_tags[STEP_PRIORITY_TAG] = "1"
        if CELERY_QUEUE_TAG in op_tags:  # the Celery executor reads its own priority tag, not Dagster's
            op_tags[CELERY_PRIORITY_TAG] = str(CELERY_DEFAULT_PRIORITY + 1)
    check_specs = [
        AssetCheckSpec(
            ITEMS_OK_CHECK,
            asset=use_case.name,
            description=(
                f"Every {use_case.subject.noun} in the batch produced a valid output (names the failures)."
            ),
        ),
        *(
            # A blocking check gates each output (a failing one is rejected, not stored), so it is
            # not Dagster-blocking: that would fail the whole run and hold back the good outputs.
            AssetCheckSpec(check.name, asset=use_case.name, description=describe_check(check))
            for check in use_case.checks
        ),
        *gym_check_specs(use_case),
    ]

    # a multi-asset of one, so that a batch job can run it without planning its checks (each run
    # reports them as evaluations of its own materializations: assets/check_reports.py)
    @multi_asset(
        name=use_case.name,
        specs=[
            AssetSpec(
                use_case.name,
                description=use_case.description,
                partitions_def=partitions_for(use_case.subject_kind),
                deps=[
                    AssetKey(use_case.subject_kind),  # its subjects' source asset (`postings`, `autodo`)
                    *(AssetKey(name) for name in (*use_case.upstream, *use_case.reference_inputs)),
                ],
                code_version=code_version(use_case),
                skippable=True,
                kinds={"python"},
                group_name="enrichment",
                metadata={
                    "model": model_label(use_case),
                    "use_case_version": use_case.version,
                    "batch_size": use_case.batch_size,
                },
            )
        ],
        can_subset=True,
        backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=use_case.batch_size),
        check_specs=check_specs,
        pool=LLM_POOL if use_case.uses_llm else None,
        op_tags=op_tags or None,
        required_resource_keys={
            "app_db",
            "gym",
            *use_case.resources,
            *((llm_resource_key(use_case),) if use_case.uses_llm else ()),
        },
    )
    def _use_case_asset(context: AssetExecutionContext, config: UseCaseRunConfig) -> Iterator[Any]:
        app_db: AppDatabase = context.resources.app_db
        llm = getattr(context.resources, llm_resource_key(use_case)) if use_case.uses_llm else None
        outcome = yield from process_batch(context, use_case, spec, app_db, llm, force=config.force)
        context.log.info(
            f"{use_case.name}: finished: {len(outcome.done)} done, {len(outcome.unchanged)} unchanged input, "
            f"{len(outcome.failed)} failed"
        )

    return _use_case_asset


def group_name_for(use_case: UseCase) -> str:
    """LLM use cases group by model (`gemma3:270m` -> `gemma3_270m`) and kind of subject (the kind's
    suffix: `gemma3_270m_autodo`; a kind may keep the bare model name); a script is its own group."""
    if not use_case.uses_llm:  # a script, or a chain of script steps only
        return use_case.name
    base = re.sub(r"[^a-z0-9]+", "_", use_case.model.lower()).strip("_")
    backend = f"_{use_case.backend}" if use_case.backend else ""
    return f"{base}{backend}{use_case.subject.suffix}"


def build_work_groups(
    built: Sequence[UseCaseDefinitions], executor: ExecutorDefinition = in_process_executor
) -> list[WorkGroup]:
    """Group use cases by model, upstream first, and give each group its batch job, whose steps run on
    `executor` (by default in the run's process, sharing its resources: the loaded model)."""
    by_name: dict[str, list[UseCaseDefinitions]] = {}
    stage: dict[str, int] = {}
    base_of: dict[str, str] = {}
    group_of: dict[str, str] = {}
    for item in upstream_first(built):
        # Dagster skips a step whose upstream step in the same run yielded no output (ours yield
        # per-subject materializations only), so a use case reading another of its own group
        # runs in a later stage: a group and job of its own (e.g. a fan-in synthesizer).
        upstream = [name for name in item.use_case.upstream if name in stage]
        base = group_name_for(item.use_case)
        level = max((stage[name] + 1 for name in upstream if base_of[name] == base), default=0)
        # Groups run in the order made (`pipeline run`, the demo), so a use case does not join a group
        # made before the group of another model it reads (skill_entities refereed by the summary's
        # model reads posting_skills, a script): it takes a later stage of its own.
        made = list(by_name)  # the groups so far, in the order made
        while (name := _stage_name(base, level)) in by_name and any(
            made.index(group_of[up]) > made.index(name) for up in upstream if base_of[up] != base
        ):
            level += 1
        stage[item.use_case.name], base_of[item.use_case.name] = level, base
        group_of[item.use_case.name] = name
        by_name.setdefault(name, []).append(item)
    groups = []
    for name, members in by_name.items():
        model = members[0].use_case.model if members[0].use_case.uses_llm else None
        job = define_asset_job(
            f"{name}_batch_job",
            selection=batch_selection([member.asset for member in members]),
            description=(
                f"One batch of {members[0].use_case.subject.plural} through "
                f"{', '.join(m.use_case.name for m in members)}"
                + (f", with {model} loaded once." if model else " (no model).")
            ),
            tags={WORK_GROUP_TAG: name},
            executor_def=executor,
        )
        groups.append(WorkGroup(name, model, tuple(members), job, min(m.batch_size for m in members)))
    return groups


def _stage_name(base: str, level: int) -> str:
    return base if not level else f"{base}_stage{level + 1}"


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
