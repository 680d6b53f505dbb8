"""The toy plugin's settings section: `[toy]` in a config file, PIPELINE_TOY_* in the environment."""

from __future__ import annotations

from dataclasses import dataclass

from domain.core.configuration import SettingError, setting


def _greeting(text: str) -> str:
    if not text.strip():
        raise SettingError("must not be blank")
    return text.strip()


@dataclass(frozen=True)
class ToySettings:
    greeting: str = setting(
        "PIPELINE_TOY_GREETING",
        "what the toy's `proverb_echo` puts before each proverb it echoes",
        "hello",
        parse=_greeting,
    )
