"""What a plugin's command gets from the entry (`domain.core.commands.CommandContext`): the settings,
its section, the project's Dagster instance, and the runs `pipeline run` makes, so that its code imports
nothing of the entry. Dagster and the code location are imported only by the services that need them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pipeline_defs.settings import Settings, running_from_a_clone


class EntryContext:
    def __init__(self, settings: Settings, plugin: str) -> None:
        self.core = settings
        self.plugin = plugin

    @property
    def section(self) -> Any:
        return self.core.section(self.plugin)

    @property
    def database_url(self) -> str:
        return self.core.database_url

    @property
    def in_clone(self) -> bool:
        """Run from a checkout (`.venv/bin/pipeline`, `make ui`) rather than an installed package."""
        return running_from_a_clone()

    @contextmanager
    def dagster_instance(self) -> Iterator[Any]:
        from dagster import DagsterInstance

        from pipeline_defs.runtime.dagster_home import ensure_dagster_home

        ensure_dagster_home(self.core)
        with DagsterInstance.get() as instance:
            yield instance

    def work_specs(self) -> dict[str, Any]:
        from pipeline_defs.catalog import declared_work

        return {item.use_case.name: item.spec for item in declared_work(self.core)}

    def run_subjects(
        self, keys: Sequence[str] | None, *, verbose: bool = False
    ) -> tuple[list[str], list[str]]:
        from pipeline_defs.cli.subject_runs import run_subjects

        return run_subjects(self.core, self.plugin, keys, verbose=verbose)

    def run_all(self, *, verbose: bool = False, progress: str = "auto") -> Any:
        from pipeline_defs.cli.run_commands import run_all

        return run_all(self.core, None, verbose, progress)
