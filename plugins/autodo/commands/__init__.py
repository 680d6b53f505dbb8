"""autodo's commands, as the generic CLI mounts them (names and help only: nothing heavy is imported)."""

from domain.core.commands import PluginCommand

COMMANDS = (
    PluginCommand(
        "autodo", "TODO files and code comments as work items", "plugins.autodo.commands.autodo_commands"
    ),
)
