"""A plugin's own commands (`pipeline ingest`, `pipeline autodo ...`): what the generic CLI mounts.

A plugin lists its commands in a light module of its own (`plugins/<name>/commands/__init__.py`:
`COMMANDS`, names and help texts only), so `pipeline --help` lists them without importing the plugin;
the module a command names is imported only when that command runs. Its `register(commands)` adds an
argparse parser (a group of subcommands if it likes) whose handler takes a `CommandContext` and the
parsed arguments: the entry's services, so the plugin's code imports nothing of the entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class PluginCommand:
    name: str  # `pipeline <name>`
    help: str  # what `pipeline --help` lists (the module registers the same text; a test keeps them equal)
    module: str  # the module whose `register(commands)` adds the parser; imported only when it runs


class CommandContext(Protocol):
    """What the entry gives a plugin's command: the settings and the runs of its use cases."""

    @property
    def core(self) -> Any:
        """The core settings (database URL, data directory, LLM backend, ...)."""

    @property
    def section(self) -> Any:
        """The plugin's own settings section (None for a plugin without one)."""

    @property
    def database_url(self) -> str: ...

    @property
    def in_clone(self) -> bool:
        """Run from a checkout (`.venv/bin/pipeline`, `make ui`) rather than an installed package."""

    def dagster_instance(self) -> AbstractContextManager[Any]:
        """The project's Dagster instance (its home made first), for a plugin's Dagster part."""

    def run_subjects(
        self, keys: Sequence[str] | None, *, verbose: bool = False
    ) -> tuple[list[str], list[str]]:
        """Run the plugin's use cases in this process, on these subjects (None: all pending), upstream
        first: (run ids, failed run ids)."""

    def work_specs(self) -> dict[str, Any]:
        """Each declared use case's discovery spec (`appdb.discovery.WorkSpec`), by name, as `pipeline
        status` reads them (no Dagster)."""

    def run_all(self, *, verbose: bool = False, progress: str = "auto") -> Any:
        """What `pipeline run` does (reference data, then every pending batch), printing as it does;
        its outcome (`.ok`, `.failed_count`, `.reports`, `.runs_ok`, `.only_blocked_by_checks()`)."""
