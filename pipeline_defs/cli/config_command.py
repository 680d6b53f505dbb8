"""`pipeline config`: the effective configuration, every setting with its value and where it came from
(the environment, the config file, or its default)."""

from __future__ import annotations

import argparse
import json

from appdb.redaction import MASK, redact
from domain.core.configuration import declared_settings
from pipeline_defs.cli.terminal import table
from pipeline_defs.settings import PLUGIN_SECTIONS, Settings


def register(commands: argparse._SubParsersAction) -> None:
    config = commands.add_parser("config", help="the effective configuration and where each value came from")
    config.add_argument("--json", action="store_true", help="as JSON")
    config.set_defaults(handler=cmd_config)


def shown(value: object, secret: bool) -> str:
    """A value as `pipeline config` shows it: a secret URL with its password masked, a key masked."""
    if value in (None, "", ()):
        return "-"
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    if secret and "://" not in text:
        return MASK
    return redact(text)


def effective(settings: Settings) -> list[dict[str, str]]:
    rows = []
    sections = [("", Settings, settings)] + [
        (f"{name}.", section, getattr(settings, name)) for name, section in PLUGIN_SECTIONS.items()
    ]
    for prefix, section, values in sections:
        for name, declared in declared_settings(section):
            rows.append(
                {
                    "setting": f"{prefix}{name}",
                    "variable": declared.variable,
                    "value": shown(getattr(values, name), declared.secret),
                    "from": settings.origin(f"{prefix}{name}"),
                }
            )
    return rows


def cmd_config(settings: Settings, args: argparse.Namespace) -> int:
    rows = effective(settings)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(table(["setting", "variable", "value", "from"], [list(row.values()) for row in rows]))
    return 0
