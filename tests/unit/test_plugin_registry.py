"""The registry is the one place naming the plugins; what it refuses, and what `pipeline --help` costs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from domain.core.commands import PluginCommand
from pipeline_defs import registry
from pipeline_defs.cli.main import all_commands


def test_every_shipped_plugin_is_registered_under_its_kinds_name() -> None:
    plugins = registry.registered_plugins()
    assert set(plugins) == set(registry.REGISTRY)
    assert all(plugin.name == name for name, plugin in plugins.items())
    assert {"ingest", "demo", "export", "autodo"} <= set(all_commands())  # the plugins' own, mounted


def test_two_plugins_may_not_declare_one_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import plugins.autodo.commands as autodo_commands

    taken = PluginCommand("ingest", "another ingest", "plugins.autodo.commands.autodo_commands")
    monkeypatch.setattr(autodo_commands, "COMMANDS", (*autodo_commands.COMMANDS, taken))
    with pytest.raises(ValueError, match="both declare `ingest`"):
        registry.registered_commands()


def test_a_plugin_registered_under_another_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.REGISTRY, "todo", "plugins.autodo")
    with pytest.raises(ValueError, match="registered as 'todo'"):
        registry.registered_plugins()


def test_help_lists_the_plugins_commands_without_importing_the_plugins() -> None:
    probe = (
        "import sys\nfrom pipeline_defs.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.endswith('.plugin') or m == 'pipeline_defs.settings'))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "ingest" in done.stdout and "autodo" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"
