"""The declared use cases. Add one here; `factory.py` turns it into an asset, checks, jobs and a sensor.

posting_summary and posting_skills are LLM use cases on the same model, so one run
does both for a batch with the model loaded once; skill_entities is a script use case
(entity resolution against the taxonomy, no model) that reads posting_skills.

The shipped prompts are few-shot completion prompts: they suit base models such as
the embedded Gemma 3 270M (not instruction-tuned) and work on instruction-tuned
models too. The fixed examples come first so llama.cpp evaluates them once per run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete

from appdb.models import KEY_LENGTH, PostingSkillConcept, utcnow
from pipeline_defs import checks
from pipeline_defs.declaration import OutputCheck, ScriptContext, UseCase
from resources.taxonomy import STAGES as RESOLUTION_STAGES

# --- posting_summary -------------------------------------------------------------------------

SUMMARY_PROMPT = """\
Job postings, each followed by a short factual summary in JSON: one or two sentences \
saying who hires, for what role, where, and the main requirements.

Title: Senior Data Engineer
Company: Nordwind Logistics
Location: Hamburg, Germany
Posting: Nordwind Logistics moves 40,000 parcels a day across northern Europe. Our data \
platform team is looking for a Senior Data Engineer to build and run batch and streaming \
pipelines in Python, Spark and Airflow on AWS. You have 5+ years of experience with SQL \
and data modelling, you care about data quality, and you enjoy mentoring. Hybrid, 3 days \
in the office.
Summary: {"summary": "Nordwind Logistics is hiring a Senior Data Engineer in Hamburg to \
build batch and streaming pipelines with Python, Spark and Airflow on AWS; it asks for 5+ \
years of SQL and data modelling."}

Title: Registered Nurse, Night Shift
Company: St. Mary's Community Hospital
Location: Leeds, UK
Posting: Join our acute medical ward as a Registered Nurse on permanent night shifts. \
You will assess and monitor patients, administer medication, keep accurate care records \
and work closely with doctors and healthcare assistants. NMC registration is required; \
experience in acute care is an advantage.
Summary: {"summary": "St. Mary's Community Hospital in Leeds seeks an NMC-registered \
nurse for night shifts on an acute medical ward, assessing patients, giving medication \
and keeping care records."}

Title: {title}
Company: {company}
Location: {location}
Posting: {description}
Summary:"""

SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string", "minLength": 1, "maxLength": 600}},
    "required": ["summary"],
    "additionalProperties": False,
}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def normalize_summary(output: dict[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Collapse whitespace and drop repeated sentences (small models loop); empty is an error."""
    text = " ".join(str(output.get("summary", "")).split())
    sentences = list(
        dict.fromkeys(sentence.strip() for sentence in _SENTENCE_END.split(text) if sentence.strip())
    )
    summary = " ".join(sentences)
    if not summary:
        raise ValueError("the model returned an empty summary")
    return {"summary": summary}


def summary_for_judge(output: dict[str, Any]) -> str:
    """What the judge grades: the summary text."""
    return str(output["summary"])


def summary_gold_items(output: dict[str, Any]) -> set[str]:
    """Compared with a corrected summary as a bag of words (precision/recall of its words)."""
    return set(checks.words(str(output["summary"])))


POSTING_SUMMARY = UseCase(
    name="posting_summary",
    version="2026-11-22.1",
    model="gemma3:270m",
    description="A one- or two-sentence factual summary of each posting.",
    prompt=SUMMARY_PROMPT,
    output_schema=SUMMARY_SCHEMA,
    priority=10,
    batch_size=25,
    options={"temperature": 0.0, "max_tokens": 120, "repeat_penalty": 1.2},
    input_limits={"description": 3000},
    postprocess=normalize_summary,
    preview_field="summary",
    checks=(
        OutputCheck("summary_not_empty", "No summary is empty.", checks.summary_not_empty, blocking=True),
        OutputCheck(
            "summary_length",
            f"Each summary has {checks.SUMMARY_MIN_CHARS} to {checks.SUMMARY_MAX_CHARS} characters.",
            checks.summary_length,
        ),
        OutputCheck(
            "summary_not_a_copy",
            f"No summary is copied from its posting (at most {checks.MAX_COPY_SHARE:.0%} of its "
            f"{checks.COPY_NGRAM}-word sequences verbatim).",
            checks.summary_not_a_copy,  # a near-copy is a lazy but usable summary: reviewed, not blocked
        ),
        OutputCheck(
            "summary_not_degenerate",
            f"No summary loops (at most {checks.MAX_REPEATED_SHARE:.0%} of its "
            f"{checks.DEGENERATE_NGRAM}-word sequences repeated).",
            checks.summary_not_degenerate,
            blocking=True,
        ),
    ),
    judge_view=summary_for_judge,
    gold_items=summary_gold_items,
)

# --- posting_skills --------------------------------------------------------------------------

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
    squashed_sentences = [checks.squash(sentence) for sentence in sentences]
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


def skills_for_judge(output: dict[str, Any]) -> str:
    """What the judge grades: the kept mentions."""
    return "; ".join(skill["mention"] for skill in output["skills"]) or "(none)"


def skills_gold_items(output: dict[str, Any]) -> set[str]:
    """Compared with corrected skills as a set of mentions (modulo case and whitespace)."""
    return {checks.squash(skill["mention"]) for skill in output["skills"]}


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
            checks.schema_valid(SKILLS_SCHEMA),
            blocking=True,
        ),
        OutputCheck(
            "skills_in_posting",
            "Every kept mention appears in its posting's text.",
            checks.skills_in_posting,
            blocking=True,
        ),
        OutputCheck(
            "skills_grounded",
            "Most mentions of each posting appear in its text (ungrounded ones are dropped and counted).",
            checks.skills_mostly_grounded,
        ),
    ),
    judge_view=skills_for_judge,
    gold_items=skills_gold_items,
)

# --- skill_entities (a script use case: entity resolution, no model) --------------------------

REVIEWED_STAGE = "review"  # a concept a reviewer chose (`pipeline review correct ID --concept ...`)
ENTITIES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "mention": {"type": "string"},
                    "source_mention": {"type": "string"},
                    "kind": {"type": "string"},
                    "concept_uri": {"type": ["string", "null"]},
                    "concept_label": {"type": ["string", "null"]},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                    "stage": {"enum": [*RESOLUTION_STAGES, REVIEWED_STAGE]},
                },
                "required": ["mention", "source_mention", "kind", "concept_uri", "confidence", "stage"],
            },
        },
        "matched": {"type": "integer", "minimum": 0},
        "unmatched": {"type": "integer", "minimum": 0},
    },
    "required": ["entities", "matched", "unmatched"],
}


def resolve_skill_mentions(inputs: Mapping[str, Any], context: ScriptContext) -> dict[str, Any]:
    """Resolve each skill mention (split first when it holds several) to a taxonomy concept."""
    with context.app_db.session() as session:
        resolver = context.resources.taxonomy.resolver(session)
    entities = []
    for skill in inputs["posting_skills"]["skills"]:
        for resolution in resolver.resolve(skill["mention"]):
            entities.append(
                {
                    "mention": resolution.mention,
                    "source_mention": skill["mention"],
                    "kind": skill["kind"],
                    "concept_uri": resolution.concept_uri,
                    "concept_label": resolution.concept_label,
                    "confidence": round(float(resolution.confidence), 4),
                    "stage": resolution.stage,
                }
            )
    unmatched = sum(1 for entity in entities if entity["concept_uri"] is None)
    return {"entities": entities, "matched": len(entities) - unmatched, "unmatched": unmatched}


def store_skill_concepts(session: Any, posting_key: str, output: dict[str, Any]) -> None:
    """Rewrite the posting's rows in `posting_skill_concepts`, so postings can be found by concept."""
    session.execute(delete(PostingSkillConcept).where(PostingSkillConcept.posting_key == posting_key))
    rows: dict[str, PostingSkillConcept] = {}
    for entity in output["entities"]:
        mention = entity["mention"][:KEY_LENGTH]
        if mention.lower() in rows:
            continue
        rows[mention.lower()] = PostingSkillConcept(
            posting_key=posting_key,
            mention=mention,
            kind=entity["kind"],
            concept_uri=entity["concept_uri"],
            concept_label=entity.get("concept_label"),
            confidence=entity["confidence"],
            stage=entity["stage"],
            updated_at=utcnow(),
        )
    session.add_all(rows.values())


def entities_gold_items(output: dict[str, Any]) -> set[str]:
    """Compared with corrected resolutions as a set of (mention, concept) pairs."""
    return {f"{checks.squash(entity['mention'])} -> {entity['concept_uri']}" for entity in output["entities"]}


SKILL_ENTITIES = UseCase(
    name="skill_entities",
    version="2026-11-22.1",
    description="Each skill mention resolved to a taxonomy concept (exact, alt label, fuzzy, semantic).",
    function=resolve_skill_mentions,
    resources=("taxonomy",),
    upstream=("posting_skills",),
    reference_inputs=("skills_taxonomy",),
    output_schema=ENTITIES_SCHEMA,
    priority=5,
    batch_size=100,
    after_store=store_skill_concepts,
    checks=(
        OutputCheck(
            "resolution_coverage",
            f"At most {checks.MAX_UNMATCHED_SHARE:.0%} of each posting's mentions are unmatched.",
            checks.resolution_coverage,
        ),
    ),
    gold_items=entities_gold_items,
)

USE_CASES: tuple[UseCase, ...] = (POSTING_SUMMARY, POSTING_SKILLS, SKILL_ENTITIES)
