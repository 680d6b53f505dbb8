"""Which of the registered plugins (`registry.py`), and so which use cases, a deployment declares.

PIPELINE_DOMAINS chooses the plugins (`postings` by default; `postings,autodo` adds autodo's assets,
use cases, jobs and sensors); each plugin's settings choose its use cases (for postings the summary,
skills and linking styles and the extras: `plugins/postings/use_cases/shipped.py`). Nothing here names
a plugin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from appdb.discovery import WorkSpec
from domain.core.plugins import DomainPlugin
from domain.language.declaration import UseCase
from domain.language.subject_kinds import SubjectKind
from domain.language.work_specs import work_spec
from domain.quality.corrections import EditOption
from pipeline_defs.model_choice import choose_models
from pipeline_defs.registry import registered_plugins
from pipeline_defs.settings import Settings


def declared_plugins(settings: Settings) -> list[DomainPlugin]:
    plugins = registered_plugins()
    unknown = [name for name in settings.domains if name not in plugins]
    if unknown:
        raise ValueError(f"PIPELINE_DOMAINS: no domain {unknown[0]!r} (choices: {', '.join(plugins)})")
    return [plugins[name] for name in dict.fromkeys(settings.domains)]


def plugin_settings(settings: Settings, plugin: DomainPlugin) -> object:
    """A plugin's section of the settings (None for a plugin without one)."""
    return settings.section(plugin.name)


def review_options() -> tuple[EditOption, ...]:
    """The corrections `pipeline review correct` takes: every registered plugin's, each name once."""
    options: dict[str, EditOption] = {}
    for plugin in registered_plugins().values():
        for option in plugin.review_options:
            options.setdefault(option.name, option)
    return tuple(options.values())


def reference_jobs(settings: Settings) -> list[str]:
    """The declared plugins' reference-data jobs, which `pipeline run` materializes before any use case."""
    return [job for plugin in declared_plugins(settings) for job in plugin.reference_jobs]


def declared_use_cases(settings: Settings) -> tuple[UseCase, ...]:
    """Each declared plugin's use cases, as its settings choose them, on the models, backends and prompt
    styles the settings choose (`pipeline_defs/model_choice.py`)."""
    chosen: list[UseCase] = []
    plugins = declared_plugins(settings)
    for plugin in plugins:
        chosen += plugin.declared_use_cases(plugin_settings(settings, plugin))
    defaults = {plugin.name: plugin.default_model for plugin in plugins}
    return tuple(choose_models(chosen, settings, defaults))


def with_lease(use_case: UseCase, lease_seconds: int) -> UseCase:
    """The use case with PIPELINE_LEASE_SECONDS as its claim lease (tests use a short one)."""
    return replace(use_case, retry=replace(use_case.retry, lease_seconds=lease_seconds))


def leased_use_cases(settings: Settings) -> list[UseCase]:
    """The declared use cases with the lease the settings give (PIPELINE_LEASE_SECONDS), if any."""
    use_cases = list(declared_use_cases(settings))
    if settings.lease_seconds:
        use_cases = [with_lease(use_case, settings.lease_seconds) for use_case in use_cases]
    return use_cases


@dataclass(frozen=True)
class DeclaredWork:
    """A declared use case and what discovery needs of it, without Dagster: what the light commands
    (`pipeline status`, `trace`) read, where `wiring.build_use_cases` would build the code location."""

    use_case: UseCase
    spec: WorkSpec


def declared_work(settings: Settings) -> list[DeclaredWork]:
    use_cases = leased_use_cases(settings)
    registry = {use_case.name: use_case for use_case in use_cases}
    return [DeclaredWork(use_case, work_spec(use_case, registry)) for use_case in use_cases]


def declared_kinds(settings: Settings) -> list[SubjectKind]:
    """The kinds of subject the declared plugins bring."""
    return [plugin.kind for plugin in declared_plugins(settings)]


def find_subject(session: object, kinds: list[SubjectKind], key: str) -> tuple[SubjectKind, dict] | None:
    """The first of `kinds` that stores a subject with this key, with the subject's fields."""
    for kind in kinds:
        fields = kind.table.read(session, [key]).get(key)
        if fields is not None:
            return kind, fields
    return None


def subject_labels(session: object, kinds: list[SubjectKind], keys: list[str]) -> dict[str, str]:
    """Each key's one-line label (a posting's title), from whichever of `kinds` stores it."""
    return {key: label for kind in kinds for key, label in kind.table.labels(session, keys).items()}
