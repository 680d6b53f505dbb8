"""Which use cases ship: the defaults, the summary styles and the opt-in groups a deployment may choose.

`pipeline_defs/catalog.py` applies the settings (PIPELINE_SUMMARY_STYLE, PIPELINE_EXTRA_USE_CASES).
"""

from __future__ import annotations

from domain.language.declaration import UseCase
from plugins.postings.use_cases.posting_assessment import ASSESSMENT_USE_CASES
from plugins.postings.use_cases.posting_skills import (
    MODEL,
    POSTING_SKILLS,
    POSTING_SKILLS_LLM,
    verified_skills,
)
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from plugins.postings.use_cases.refined_summary import REFINED_POSTING_SUMMARY
from plugins.postings.use_cases.skill_entities import SKILL_ENTITIES, refereed_skill_entities

USE_CASES: tuple[UseCase, ...] = (POSTING_SUMMARY, POSTING_SKILLS, SKILL_ENTITIES)
SUMMARY_STYLES: dict[str, UseCase] = {"plain": POSTING_SUMMARY, "refined": REFINED_POSTING_SUMMARY}
EXTRA_USE_CASES: dict[str, tuple[UseCase, ...]] = {"posting_assessment": ASSESSMENT_USE_CASES}


def skills_use_case(style: str, verify_model: str = "") -> UseCase:
    """posting_skills in the chosen style: `tagger` (CPU), `tagger+llm` (verified by `verify_model`),
    `llm` (the earlier prompt alone)."""
    if style == "tagger":
        return POSTING_SKILLS
    if style == "tagger+llm":
        return verified_skills(verify_model or MODEL)
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
