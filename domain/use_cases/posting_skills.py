"""posting_skills: the skill and knowledge mentions of each posting, grounded in its text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from domain.language.declaration import UseCase
from domain.language.declaration_parts import OutputCheck
from domain.quality import output_checks
from domain.quality.corrections import CorrectionContext, CorrectionError, Edits

SKILLS_PROMPT = """\
Job postings, each followed by the knowledge and skills it asks for, in JSON, copied \
word for word from the posting. "knowledge" is something known (a tool, language, \
subject or certificate); "skills" are things done (activities).

Title: Pastry Chef
Posting: Our hotel bakery needs a Pastry Chef for the morning shift. You bake bread \
and viennoiserie, decorate cakes for weddings and order ingredients. A food hygiene \
certificate is required; French is a plus.
Answer: {"knowledge": ["food hygiene certificate", "French"], "skills": ["bake bread", \
"decorate cakes", "order ingredients"]}

Title: Payroll Administrator
Posting: Run the monthly payroll for 900 employees in Sage, answer staff questions \
and reconcile pension deductions. You know UK tax rules and work accurately.
Answer: {"knowledge": ["Sage", "UK tax rules"], "skills": ["Run the monthly payroll", \
"answer staff questions", "reconcile pension deductions", "work accurately"]}

Title: {title}
Posting: {description}
Answer:"""

MAX_MENTIONS_PER_KIND = 15
MENTION_KINDS = ["skill", "knowledge"]
_MENTIONS = {
    "type": "array",
    "maxItems": MAX_MENTIONS_PER_KIND,
    "items": {"type": "string", "minLength": 1, "maxLength": 60},
}
# The model fills two short lists (fewer tokens than a list of objects); postprocess turns
# them into the stored list of {mention, kind, evidence}.
SKILLS_GENERATION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"knowledge": _MENTIONS, "skills": _MENTIONS},
    "required": ["knowledge", "skills"],
    "additionalProperties": False,
}

SKILLS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "skills": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "mention": {"type": "string", "minLength": 1},
                    "kind": {"type": "string", "enum": MENTION_KINDS},
                    "evidence": {"type": "string"},
                },
                "required": ["mention", "kind", "evidence"],
                "additionalProperties": False,
            },
        },
        "ungrounded": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["skills", "ungrounded"],
    "additionalProperties": False,
}

_SENTENCES = re.compile(r"(?<=[.!?;])\s+|\n+")
_EDGE_PUNCTUATION = " \t\n.,;:!?\"'()[]{}-*•"


def ground_skill_mentions(output: dict[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Dedupe and trim the generated mentions, keep those found in the posting (modulo case and
    whitespace), and store them as a list of {mention, kind, evidence}.

    The evidence is the posting's sentence that holds the mention, taken from the text
    rather than generated, so it is exact. Mentions not found are kept out and listed
    under `ungrounded`; a response whose every mention is ungrounded is an item error.
    """
    title = str(inputs.get("title") or "")
    description = str(inputs.get("description") or "")
    sentences = [s for s in _SENTENCES.split(description) if s.strip()] + [title]
    squashed_sentences = [output_checks.squash(sentence) for sentence in sentences]
    skills: list[dict[str, str]] = []
    ungrounded: list[str] = []
    seen: set[str] = set()
    generated = [(mention, "knowledge") for mention in output.get("knowledge", [])]
    generated += [(mention, "skill") for mention in output.get("skills", [])]
    for raw_mention, kind in generated:
        mention = " ".join(str(raw_mention).split()).strip(_EDGE_PUNCTUATION)
        key = mention.lower()
        if not mention or key in seen:
            continue
        seen.add(key)
        evidence = next(
            (
                sentence.strip()
                for sentence, squashed in zip(sentences, squashed_sentences, strict=True)
                if key in squashed
            ),
            None,
        )
        if evidence is None:
            ungrounded.append(mention)
            continue
        skills.append({"mention": mention, "kind": kind, "evidence": evidence})
    if ungrounded and not skills:
        raise ValueError(f"none of the {len(ungrounded)} mentions appears in the posting: {ungrounded[:5]}")
    return {"skills": skills, "ungrounded": ungrounded}


def edit_skills(value: dict[str, Any], edits: Edits, context: CorrectionContext) -> dict[str, Any]:
    """A reviewer's added and removed mentions (`--add-skill [knowledge:]M`, `--remove-skill M`): added
    ones must appear in the posting, like the model's."""
    where, posting = context.where, context.posting
    kept = list(value["skills"])
    for mention in edits.remove_skills:
        matches = [s for s in kept if s["mention"].lower() == " ".join(mention.split()).lower()]
        if not matches:
            listed = ", ".join(repr(s["mention"]) for s in kept) or "none"
            raise CorrectionError(f"{where}: no mention {mention!r} to remove (mentions: {listed})")
        kept = [s for s in kept if s not in matches]
    added = [kind_and_mention(text) for text in edits.add_skills]
    raw = {
        "knowledge": [s["mention"] for s in kept if s["kind"] == "knowledge"]
        + [m for kind, m in added if kind == "knowledge"],
        "skills": [s["mention"] for s in kept if s["kind"] == "skill"]
        + [m for kind, m in added if kind == "skill"],
    }
    try:
        grounded = ground_skill_mentions(raw, posting)
    except ValueError as exc:
        raise CorrectionError(f"{where}: {exc}") from exc
    missing = [m for _, m in added if m.lower() in {u.lower() for u in grounded["ungrounded"]}]
    if missing:
        raise CorrectionError(
            f"{where}: {missing[0]!r} does not appear in the posting "
            "(skills are mentions copied from its text)"
        )
    return {**value, "skills": grounded["skills"]}


def kind_and_mention(text: str) -> tuple[str, str]:
    """`knowledge:Python` or `skill:bake bread`; a bare mention is a skill."""
    kind, sep, mention = text.partition(":")
    if sep and kind.strip().lower() in ("knowledge", "skill"):
        return kind.strip().lower(), mention.strip()
    return "skill", text.strip()


def skills_for_judge(output: dict[str, Any]) -> str:
    """What the judge grades: the kept mentions."""
    return "; ".join(skill["mention"] for skill in output["skills"]) or "(none)"


def skills_display(output: dict[str, Any]) -> str:
    """The mentions with their kind, as review lists show them."""
    return "; ".join(f"{s['mention']} ({s['kind']})" for s in output["skills"]) or "(no skills)"


def skills_gold_items(output: dict[str, Any]) -> set[str]:
    """Compared with corrected skills as a set of mentions (modulo case and whitespace)."""
    return {output_checks.squash(skill["mention"]) for skill in output["skills"]}


POSTING_SKILLS = UseCase(
    name="posting_skills",
    version="2026-11-22.1",
    model="gemma3:270m",
    description="Skill and knowledge mentions of each posting, grounded in its text.",
    prompt=SKILLS_PROMPT,
    generation_schema=SKILLS_GENERATION_SCHEMA,
    output_schema=SKILLS_SCHEMA,
    priority=9,
    batch_size=25,
    options={"temperature": 0.0, "max_tokens": 300, "repeat_penalty": 1.1},
    input_limits={"description": 2500},
    postprocess=ground_skill_mentions,
    checks=(
        OutputCheck(
            "skills_schema_valid",
            "Each output follows the skills schema that skill_entities reads.",
            output_checks.schema_valid(SKILLS_SCHEMA),
            blocking=True,
        ),
        OutputCheck(
            "skills_in_posting",
            "Every kept mention appears in its posting's text.",
            output_checks.skills_in_posting,
            blocking=True,
        ),
        OutputCheck(
            "skills_grounded",
            "Most mentions of each posting appear in its text (ungrounded ones are dropped and counted).",
            output_checks.skills_mostly_grounded,
        ),
    ),
    judge_view=skills_for_judge,
    gold_items=skills_gold_items,
    display=skills_display,
    review_edits={"skills": edit_skills},
)
