"""Which use cases ship: the defaults, the summary styles and the opt-in groups a deployment may choose.

`posting_use_cases(settings)` applies the postings' settings:

- PIPELINE_SUMMARY_STYLE: `plain` (default; one call) or `refined` (the multi-step
  extract -> grade -> improve -> final chain). Both are the `posting_summary` asset;
  switching changes its version, so every summary is redone in the new style.
- PIPELINE_SKILLS_STYLE: `tagger` (default; the CRF tagger on a CPU), `tagger+llm` (the tagger's
  unsure mentions verified by PIPELINE_SKILLS_VERIFY_MODEL; the default on Ollama when that is set)
  or `llm` (the earlier prompt alone). See posting_skills.py.
- PIPELINE_LINK_STYLE: `linker` (default; the learned linker on a CPU) or `linker+llm` (its unsure
  answers refereed by PIPELINE_LINK_REFEREE_MODEL among its three best concepts; the default on
  Ollama when that is set). See plugins/postings/skills/link_referee.py.
- PIPELINE_EXTRA_USE_CASES: comma-separated opt-in groups; `posting_assessment` adds
  three expert assessments and their synthesizer (fan-out and fan-in).
"""

from __future__ import annotations

from typing import Any

from domain.language.declaration import UseCase
from plugins.postings.use_cases.posting_assessment import ASSESSMENT_USE_CASES
from plugins.postings.use_cases.posting_skills import (
    MODEL,
    POSTING_SKILLS,
    POSTING_SKILLS_LLM,
    verified_skills,
    with_crf_tagger,
)
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from plugins.postings.use_cases.refined_summary import REFINED_POSTING_SUMMARY
from plugins.postings.use_cases.skill_entities import SKILL_ENTITIES, refereed_skill_entities

USE_CASES: tuple[UseCase, ...] = (POSTING_SUMMARY, POSTING_SKILLS, SKILL_ENTITIES)
SUMMARY_STYLES: dict[str, UseCase] = {"plain": POSTING_SUMMARY, "refined": REFINED_POSTING_SUMMARY}
EXTRA_USE_CASES: dict[str, tuple[UseCase, ...]] = {"posting_assessment": ASSESSMENT_USE_CASES}


def skills_use_case(style: str, verify_model: str = "", tagger: str = "context") -> UseCase:
    """posting_skills in the chosen style: `tagger` (CPU), `tagger+llm` (verified by `verify_model`),
    `llm` (the earlier prompt alone); `tagger` is `context` or `crf`."""
    if style == "tagger":
        return POSTING_SKILLS if tagger == "context" else with_crf_tagger(POSTING_SKILLS)
    if style == "tagger+llm":
        verified = verified_skills(verify_model or MODEL)
        return verified if tagger == "context" else with_crf_tagger(verified)
    if style == "llm":
        return POSTING_SKILLS_LLM
    raise ValueError(f"PIPELINE_SKILLS_STYLE must be one of {', '.join(SKILLS_STYLES)}, not {style!r}")


SKILLS_STYLES = ("tagger", "tagger+llm", "llm")


def entities_use_case(style: str, referee_model: str = "") -> UseCase:
    """skill_entities in the chosen style: `linker` (CPU) or `linker+llm` (its unsure answers
    refereed by `referee_model`, by default the embedded model)."""
    if style == "linker":
        return SKILL_ENTITIES
    if style == "linker+llm":
        return refereed_skill_entities(referee_model or MODEL)
    raise ValueError(f"PIPELINE_LINK_STYLE must be one of {', '.join(LINK_STYLES)}, not {style!r}")


LINK_STYLES = ("linker", "linker+llm")


def posting_use_cases(settings: Any) -> tuple[UseCase, ...]:
    """The default use cases with the chosen styles, then the chosen extras."""
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
            skills_use_case(settings.skills_style, settings.skills_verify_model, settings.skills_tagger),
            entities_use_case(settings.link_style, settings.link_referee_model),
        )
    }
    chosen = [styled.get(use_case.name, use_case) for use_case in USE_CASES]
    for name in dict.fromkeys(settings.extra_use_cases):
        chosen += EXTRA_USE_CASES[name]
    return tuple(chosen)
