"""The toy's commands, as the generic CLI mounts them."""

from domain.core.commands import PluginCommand

COMMANDS = (PluginCommand("toy", "proverbs: add, show", "tests.support.toy_domain.commands.toy_command"),)
