"""autodo as a plugin: TODO files and code comments as work items. Its Dagster part is the engine's
source asset for a kind kept in the `subjects` table; its commands are `pipeline autodo ...`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from domain.core.plugins import DomainPlugin, PluginContext
from plugins.autodo.autodo_kind import AUTODO
from plugins.autodo.autodo_settings import AutodoSettings
from plugins.autodo.autodo_use_cases import AUTODO_SCOPE, AUTODO_USE_CASES
from plugins.autodo.commands import COMMANDS

if TYPE_CHECKING:  # Dagster is imported when the code location is built, not for a light command
    from dagster import Definitions

DESCRIPTION = "TODO files and code comments as work items (`pipeline autodo scan`)."


def autodo_definitions(context: PluginContext) -> Definitions:
    from dagster import Definitions  # Dagster, lazily: `pipeline status` needs none

    from assets.subjects_asset import build_subject_asset

    return Definitions(assets=[build_subject_asset(AUTODO, DESCRIPTION)])


def _use_cases(settings: Any) -> tuple:
    return AUTODO_USE_CASES


PLUGIN = DomainPlugin(
    kind=AUTODO,
    description=DESCRIPTION,
    use_cases=_use_cases,
    definitions=autodo_definitions,
    settings=AutodoSettings,
    default_model=AUTODO_SCOPE.model,
    commands=COMMANDS,
)
AUTODO_PLUGIN = PLUGIN
