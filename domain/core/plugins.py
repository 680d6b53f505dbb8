"""Domain plugins: what a kind of subject brings to the work engine.

The engine (discovery, claims and leases, retries and parking, versions and staleness, traces, checks and
review, the Dagster assets with a dynamic partition per subject) knows subjects only as a kind, a key,
fields and a content hash. A plugin supplies the rest:

- `kind`: its subjects (`domain.language.subject_kinds.SubjectKind`: name, noun, fields, table);
- `use_cases(settings)`: the use cases it declares over them, chosen by its settings section;
- `definitions(context)`: its own Dagster objects beside the engine's (source assets, reference data,
  their sensors and resources), merged by the entry (`pipeline_defs/definitions.py`);
- `settings`: its section of the configuration (a dataclass of `domain.core.configuration.setting`s),
  read, validated and documented (docs/configuration.md) by the entry from this declaration;
- `default_model`: the model its use cases declare when the deployment names none (PIPELINE_MODEL
  replaces it; a model its settings chose, such as the skills verifier's, stays);
- `commands`: its own commands (`domain.core.commands.PluginCommand`: its ingest or scan, its export,
  ...), which the generic CLI mounts;
- `reference_jobs`: jobs of its Dagster part that `pipeline run` materializes before any use case
  (postings: the skills taxonomy);
- `review_options`: the corrections `pipeline review correct` takes for its use cases;
- `migrations`: a folder of Alembic revisions for its own tables, a branch of the application
  database's history (`branch_labels = ("<name>",)`), applied with the engine's;
- `gold_paths(settings)`: public gold sets of its use cases the gym evaluates against.

The plugins live in `plugins/`; the entry's registry (`pipeline_defs/registry.py`) is the one place
that names them, and PIPELINE_DOMAINS chooses which a deployment loads. This module only declares what
a plugin is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.core.commands import PluginCommand
from domain.language.declaration import UseCase
from domain.language.subject_kinds import SubjectKind
from domain.quality.corrections import EditOption


@dataclass(frozen=True)
class PluginContext:
    """What a plugin's Dagster part is built from: its settings section, the core settings (data
    directory, LLM server), its declared use cases, and `configured(name)`, a core setting as a
    resource's field: read from an environment variable, it is written as that variable (Dagster's
    `EnvVar`), so the UI shows the variable's name, not a password in it."""

    settings: Any
    core: Any
    use_cases: tuple[UseCase, ...]
    configured: Callable[..., Any]


@dataclass(frozen=True)
class DomainPlugin:
    kind: SubjectKind
    description: str
    use_cases: Callable[[Any], tuple[UseCase, ...]]
    definitions: Callable[[PluginContext], Any] | None = None
    settings: type | None = None
    default_model: str = ""  # the model its declarations name when the deployment names none
    commands: tuple[PluginCommand, ...] = ()
    reference_jobs: tuple[str, ...] = ()  # materialized by `pipeline run` before any use case
    review_options: tuple[EditOption, ...] = ()  # what `pipeline review correct` takes for its use cases
    migrations: Path | None = None  # its own Alembic revisions: a branch labelled with its name
    gold_paths: Callable[[Any], Mapping[str, str]] | None = None  # use case -> gold file, from its section

    @property
    def name(self) -> str:
        return self.kind.name

    def declared_use_cases(self, section: Any) -> tuple[UseCase, ...]:
        """Its use cases for this settings section; each must run on its kind."""
        use_cases = self.use_cases(section)
        for use_case in use_cases:
            if use_case.subject.name != self.kind.name:
                raise ValueError(
                    f"plugin {self.kind.name}: use case {use_case.name} runs on {use_case.subject_kind}"
                )
        return use_cases
