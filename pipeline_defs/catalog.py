"""Which use cases this deployment declares: the defaults, with the settings' choices applied.

- PIPELINE_SUMMARY_STYLE: `plain` (default; one call) or `refined` (the multi-step
  extract -> grade -> improve -> final chain). Both are the `posting_summary` asset;
  switching changes its version, so every summary is redone in the new style.
- PIPELINE_SKILLS_STYLE: `tagger` (default; the CRF tagger on a CPU), `tagger+llm` (the tagger's
  unsure mentions verified by PIPELINE_SKILLS_VERIFY_MODEL; the default on Ollama when that is set)
  or `llm` (the earlier prompt alone). See plugins/postings/use_cases/posting_skills.py.
- PIPELINE_LINK_STYLE: `linker` (default; the learned linker on a CPU) or `linker+llm` (its unsure
  answers refereed by PIPELINE_LINK_REFEREE_MODEL among its three best concepts; the default on
  Ollama when that is set). See plugins/postings/skills/link_referee.py.
- PIPELINE_EXTRA_USE_CASES: comma-separated opt-in groups; `posting_assessment` adds
  three expert assessments and their synthesizer (fan-out and fan-in).
- PIPELINE_DOMAINS: the domain plugins (`domain/core/plugins.py`): `postings` (default) and/or
  `autodo`; each brings its use cases.
"""

from __future__ import annotations

from domain.core.plugins import POSTINGS_PLUGIN, DomainPlugin
from domain.language.declaration import UseCase
from pipeline_defs.settings import Settings
from plugins.autodo.autodo_use_cases import AUTODO_PLUGIN
from plugins.postings.use_cases.shipped import (
    EXTRA_USE_CASES,
    SUMMARY_STYLES,
    USE_CASES,
    entities_use_case,
    skills_use_case,
)

PLUGINS: dict[str, DomainPlugin] = {plugin.kind: plugin for plugin in (POSTINGS_PLUGIN, AUTODO_PLUGIN)}


def declared_plugins(settings: Settings) -> list[DomainPlugin]:
    unknown = [name for name in settings.domains if name not in PLUGINS]
    if unknown:
        raise ValueError(f"PIPELINE_DOMAINS: no domain {unknown[0]!r} (choices: {', '.join(PLUGINS)})")
    return [PLUGINS[name] for name in dict.fromkeys(settings.domains)]


def declared_use_cases(settings: Settings) -> tuple[UseCase, ...]:
    """Each declared domain's use cases: for postings the defaults with the chosen summary style, then
    the chosen extras; for other domains their plugin's use cases."""
    chosen: list[UseCase] = []
    for plugin in declared_plugins(settings):
        chosen += posting_use_cases(settings) if plugin is POSTINGS_PLUGIN else plugin.use_cases
    return tuple(chosen)


def posting_use_cases(settings: Settings) -> tuple[UseCase, ...]:
    """The default use cases with the chosen summary style, then the chosen extras."""
    if settings.summary_style not in SUMMARY_STYLES:
        raise ValueError(
            f"PIPELINE_SUMMARY_STYLE must be one of {', '.join(SUMMARY_STYLES)}, "
            f"not {settings.summary_style!r}"
        )
    unknown = [name for name in settings.extra_use_cases if name not in EXTRA_USE_CASES]
    if unknown:
        raise ValueError(
            f"PIPELINE_EXTRA_USE_CASES: no opt-in use cases {unknown[0]!r} "
            f"(choices: {', '.join(EXTRA_USE_CASES)})"
        )
    styled = {
        use_case.name: use_case
        for use_case in (
            SUMMARY_STYLES[settings.summary_style],
            skills_use_case(settings.skills_style, settings.skills_verify_model),
            entities_use_case(settings.link_style, settings.link_referee_model),
        )
    }
    chosen = [styled.get(use_case.name, use_case) for use_case in USE_CASES]
    for name in dict.fromkeys(settings.extra_use_cases):
        chosen += EXTRA_USE_CASES[name]
    return tuple(chosen)
