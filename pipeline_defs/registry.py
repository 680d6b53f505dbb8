"""The plugins this project ships: the one place that names them.

A plugin is a package of `plugins/` (or anywhere importable) with `plugin.py` holding `PLUGIN`, its
`DomainPlugin`, and, when it has commands, a light `commands/__init__.py` holding `COMMANDS` (names and
help texts, so `pipeline --help` lists them without importing the plugin). A third domain is its folder
and one line here. PIPELINE_DOMAINS (`settings.domains`) chooses which of them a deployment declares
(`catalog.py`); every registered plugin's settings section is read and its migrations applied whether
it is declared or not, so turning a domain off and on again keeps its configuration and its tables.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module

from domain.core.commands import PluginCommand
from domain.core.plugins import DomainPlugin

REGISTRY: dict[str, str] = {
    "postings": "plugins.postings",
    "autodo": "plugins.autodo",
}
"""Plugin name -> its package."""
DEFAULT_DOMAINS = ("postings",)
"""What PIPELINE_DOMAINS declares when it is not set."""


def registered_plugins() -> dict[str, DomainPlugin]:
    """Every registered plugin's declaration, by name (each must be named as it is registered); their
    migrations are added to the application database's (`appdb.database.add_migrations`)."""
    plugins = {name: _plugin(name, package) for name, package in REGISTRY.items()}
    for plugin in plugins.values():
        _register_migrations(plugin)
    return plugins


@cache
def _plugin(name: str, package: str) -> DomainPlugin:
    plugin = import_module(f"{package}.plugin").PLUGIN
    if plugin.name != name:
        raise ValueError(f"{package}: its plugin is named {plugin.name!r}, registered as {name!r}")
    return plugin


def _register_migrations(plugin: DomainPlugin) -> None:
    if plugin.migrations is not None:
        from appdb.database import add_migrations

        add_migrations(plugin.migrations)


def registered_commands() -> dict[str, tuple[str, PluginCommand]]:
    """Each plugin command by its name: (its plugin, its declaration), read from the plugins' light
    `commands` modules only."""
    found: dict[str, tuple[str, PluginCommand]] = {}
    for name, package in REGISTRY.items():
        try:
            commands = import_module(f"{package}.commands").COMMANDS
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.commands":
                raise
            continue
        for command in commands:
            if command.name in found:
                raise ValueError(f"plugins {found[command.name][0]} and {name} both declare `{command.name}`")
            found[command.name] = (name, command)
    return found
