"""The toy plugin's declaration: its kind (proverbs, kept in the engine's `subjects` table), one script
use case whose output follows its setting, its command (`pipeline toy`) and its migrations."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from appdb.subject_tables import shared_subject_table
from domain.core.plugins import DomainPlugin, PluginContext
from domain.language.declaration import UseCase
from domain.language.declaration_parts import ScriptContext
from domain.language.subject_kinds import SubjectKind
from tests.support.toy_domain.commands import COMMANDS
from tests.support.toy_domain.toy_settings import ToySettings

KIND = "toy"
TOY = SubjectKind(
    name=KIND,
    noun="proverb",
    variables=("key", "text"),
    table=shared_subject_table(KIND, label_field="text"),
)
ECHO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"echo": {"type": "string"}},
    "required": ["echo"],
}


def echo_use_case(settings: ToySettings) -> UseCase:
    def echo(inputs: Mapping[str, Any], context: ScriptContext) -> dict[str, Any]:
        return {"echo": f"{settings.greeting}: {inputs['text']}"}

    return UseCase(
        name="proverb_echo",
        version="2026-12-07.1",
        output_schema=ECHO_SCHEMA,
        function=echo,
        subject=TOY,
        description="Each proverb, greeted as the toy's setting says.",
    )


def toy_definitions(context: PluginContext) -> Any:
    from dagster import Definitions

    from assets.subjects_asset import build_subject_asset

    return Definitions(assets=[build_subject_asset(TOY, "Proverbs (`pipeline toy add`).")])


PLUGIN = DomainPlugin(
    kind=TOY,
    description="Proverbs, echoed (a test's third domain).",
    use_cases=lambda settings: (echo_use_case(settings),),
    definitions=toy_definitions,
    settings=ToySettings,
    commands=COMMANDS,
    migrations=Path(__file__).resolve().parent / "migrations",
)
