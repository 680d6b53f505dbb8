"""skill_entities: each skill mention resolved to a taxonomy concept (a script use case: no model)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from domain.language.declaration import UseCase
from domain.language.declaration_parts import OutputCheck, ScriptContext
from domain.language.quality_loop import QualityLoop
from domain.language.steps import Chain, LLMStep, Route, ScriptStep, StepContext
from domain.quality.corrections import CorrectionContext, CorrectionError, Edits, ReviewEdit
from plugins.postings.quality import output_checks
from plugins.postings.skills import link_referee
from plugins.postings.skills.resolution_figures import resolution_figures
from plugins.postings.skills.resolution_stages import STAGES as RESOLUTION_STAGES
from plugins.postings.store.postings_kind import POSTINGS
from plugins.postings.store.taxonomy import REFERENCE_NAME as TAXONOMY_REFERENCE
from plugins.postings.store.taxonomy import concept_label, replace_posting_skill_concepts
from plugins.postings.use_cases.review_options import CONCEPT

if TYPE_CHECKING:  # the resolver (numpy, the embedding clients) is loaded by the runs, not the CLI
    from plugins.postings.skills.skill_resolver import Resolution

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
                    "stage": {"enum": [*RESOLUTION_STAGES, REVIEWED_STAGE, link_referee.REFEREE_STAGE]},
                    # what the referee answered (PIPELINE_LINK_STYLE=linker+llm), when it was asked
                    "referee": {"enum": [*link_referee.LETTERS, link_referee.NO_CONCEPT]},
                    # the learned linker's best concepts, best first (absent without the linker)
                    "candidates": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "concept_uri": {"type": "string"},
                                "concept_label": {"type": "string"},
                                "probability": {"type": "number", "minimum": 0, "maximum": 1},
                            },
                            "required": ["concept_uri", "concept_label", "probability"],
                        },
                    },
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
    return entities_output([entity for entity, _ in _resolved_entities(inputs, context)])


def _resolved_entities(inputs: Mapping[str, Any], context: ScriptContext) -> list[tuple[dict[str, Any], str]]:
    """Each resolved part of each mention, with the sentence the mention came from."""
    taxonomy = context.resources.taxonomy
    resolver = taxonomy.built_resolver(context.references.get(TAXONOMY_REFERENCE))
    if resolver is None:  # the run's first posting, or a taxonomy loaded since the run began
        with context.app_db.session() as session:
            resolver = taxonomy.resolver(session)
    entities = []
    for skill in inputs["posting_skills"]["skills"]:
        evidence = skill.get("evidence") or ""
        # the sentence the mention came from weighs in the learned linker's choice
        for resolution in resolver.resolve(skill["mention"], context=evidence or None):
            entities.append((resolution_entity(resolution, skill["mention"], skill["kind"]), evidence))
    return entities


def load_resolver(context: ScriptContext) -> None:
    """The resolver over the loaded taxonomy, built ahead of the first posting (`UseCase.warm_up`)."""
    with context.app_db.session() as session:
        context.resources.taxonomy.resolver(session)


def resolution_entity(resolution: Resolution, source_mention: str, kind: str) -> dict[str, Any]:
    """One resolved part of a mention, as the output stores it."""
    entity = {
        "mention": resolution.mention,
        "source_mention": source_mention,
        "kind": kind,
        "concept_uri": resolution.concept_uri,
        "concept_label": resolution.concept_label,
        "confidence": round(float(resolution.confidence), 4),
        "stage": resolution.stage,
    }
    if resolution.candidates:
        entity["candidates"] = [dataclasses.asdict(c) for c in resolution.candidates]
    return entity


def entities_output(entities: list[dict[str, Any]]) -> dict[str, Any]:
    unmatched = sum(1 for entity in entities if entity["concept_uri"] is None)
    return {"entities": entities, "matched": len(entities) - unmatched, "unmatched": unmatched}


def store_skill_concepts(session: Any, outputs: Mapping[str, dict[str, Any]]) -> None:
    """Rewrite the postings' rows in `posting_skill_concepts`, so postings can be found by concept."""
    replace_posting_skill_concepts(session, {key: output["entities"] for key, output in outputs.items()})


UNMATCHED = ("none", "unmatched")


def edit_concepts(value: dict[str, Any], edits: Edits, context: CorrectionContext) -> dict[str, Any]:
    """A reviewer's concept for a mention (`--concept MENTION=URI`, `=N` for the entity's N-th
    candidate, or `=none` for unmatched)."""
    where, concepts = context.where, _concepts(edits.all(CONCEPT.name))
    entities = [dict(entity) for entity in value["entities"]]
    for mention, uri in concepts.items():
        targets = [e for e in entities if e["mention"].lower() == " ".join(mention.split()).lower()]
        if not targets:
            listed = ", ".join(repr(e["mention"]) for e in entities) or "none"
            raise CorrectionError(f"{where}: no mention {mention!r} (mentions: {listed})")
        if uri.strip().isdigit():
            uri = _candidate_uri(targets[0], int(uri), f"{where}: {mention!r}")
        if uri.strip().lower() in UNMATCHED:
            concept_uri, label = None, None
        else:
            label = concept_label(context.session, uri.strip())
            if label is None:
                raise CorrectionError(f"{where}: {uri!r} is not a concept URI of the loaded taxonomy")
            concept_uri = uri.strip()
        for entity in targets:
            entity.update(concept_uri=concept_uri, concept_label=label, confidence=1.0, stage=REVIEWED_STAGE)
    return {**value, **entities_output(entities)}


def _concepts(pairs: list[str]) -> dict[str, str]:
    """`MENTION=URI` pairs, by mention."""
    concepts = {}
    for pair in pairs:
        mention, sep, uri = pair.partition("=")
        if not sep or not mention.strip() or not uri.strip():
            raise CorrectionError(f"--concept {pair!r}: write MENTION=URI (or MENTION=none)")
        concepts[mention.strip()] = uri.strip()
    return concepts


def _candidate_uri(entity: Mapping[str, Any], number: int, where: str) -> str:
    candidates = entity.get("candidates") or []
    if not candidates:
        raise CorrectionError(
            f"{where} has no candidates (resolved without the learned linker): write a URI or none"
        )
    if not 1 <= number <= len(candidates):
        raise CorrectionError(
            f"{where} has {len(candidates)} candidates: write a number from 1 to {len(candidates)}, "
            "a concept URI or none"
        )
    return str(candidates[number - 1]["concept_uri"])


def entities_display(output: dict[str, Any]) -> str:
    """Each mention and its concept, as review lists show them (an unmatched one with its candidates)."""

    def shown(entity: Mapping[str, Any]) -> str:
        if entity.get("concept_label"):
            return f"{entity['mention']} -> {entity['concept_label']}"
        candidates = " | ".join(
            f"{number} {c['concept_label']}" for number, c in enumerate(entity.get("candidates") or [], 1)
        )
        return f"{entity['mention']} -> unmatched" + (f" (candidates: {candidates})" if candidates else "")

    return "; ".join(shown(e) for e in output["entities"]) or "(no mentions)"


def entities_gold_items(output: dict[str, Any]) -> set[str]:
    """Compared with corrected resolutions as a set of (mention, concept) pairs."""
    return {
        f"{output_checks.squash(entity['mention'])} -> {entity['concept_uri']}"
        for entity in output["entities"]
    }


SKILL_ENTITIES = UseCase(
    name="skill_entities",
    subject=POSTINGS,
    version="2026-11-27.1",  # the linker retrained without benchmark-derived data (issue 43)
    description="Each skill mention resolved to a taxonomy concept (exact, alt label, fuzzy, semantic).",
    function=resolve_skill_mentions,
    warm_up=load_resolver,  # a run started before the first skills loads it while they are made
    resources=("taxonomy",),
    upstream=("posting_skills",),
    reference_inputs=(TAXONOMY_REFERENCE,),
    output_schema=ENTITIES_SCHEMA,
    priority=5,
    batch_size=500,  # a script: a run's process start (2-3 s of CPU) costs more than 100 postings' work
    after_store=store_skill_concepts,
    checks=(
        OutputCheck(
            "resolution_coverage",
            f"At most {output_checks.MAX_UNMATCHED_SHARE:.0%} of each posting's mentions are unmatched.",
            output_checks.resolution_coverage,
        ),
    ),
    run_figures=resolution_figures,
    preview_field="entities",  # a table in the UI: mention, concept, confidence, stage
    quality=QualityLoop(
        display=entities_display,
        gold_items=entities_gold_items,
        review_edits=(ReviewEdit((CONCEPT,), edit_concepts),),
    ),
)


# --- the refereed chain (PIPELINE_LINK_STYLE=linker+llm): resolve -> referee (LLM) -> final ---------


def resolve_for_referee(inputs: Mapping[str, Any], context: StepContext) -> dict[str, Any]:
    """The linker's entities, and the unsure ones listed with their sentences and candidates."""
    resolved = _resolved_entities(inputs, context)
    entities = [entity for entity, _ in resolved]
    asked = link_referee.asked_entities(entities)
    listing = link_referee.referee_listing(entities, asked, [sentence for _, sentence in resolved])
    return {**entities_output(entities), "asked": asked, "asked_count": len(asked), "listing": listing}


def refereed_entities(inputs: Mapping[str, Any], context: StepContext) -> dict[str, Any]:
    """The stored output: the linker's entities with the referee's choices applied, when it was asked."""
    resolved = inputs["resolve"]
    verdict = inputs.get("referee")
    choices = list(verdict.get("choices") or []) if isinstance(verdict, Mapping) else []
    entities, counts = link_referee.apply_choices(resolved["entities"], resolved["asked"], choices)
    if counts.unreadable and context is not None:
        context.log.warning(f"referee: {counts.unreadable} of {counts.asked} entities had no usable answer")
    return entities_output(entities)


def refereed_skill_entities(model: str) -> UseCase:
    """skill_entities with `model` choosing among the candidates of the linker's unsure answers."""
    return dataclasses.replace(
        SKILL_ENTITIES,
        version="2026-11-27.2",  # the linker retrained without benchmark-derived data (issue 43)
        description=(
            "Each skill mention resolved to a taxonomy concept by the learned linker; "
            f"its unsure answers refereed by {model} among its three best concepts."
        ),
        function=None,
        batch_size=25,  # a model call per posting with unsure answers
        steps=Chain(
            steps=(
                ScriptStep(
                    "resolve",
                    resolve_for_referee,
                    routes=(Route("referee", when="resolve.asked_count > 0", priority=1), Route("final")),
                ),
                LLMStep(
                    "referee",
                    model,
                    link_referee.REFEREE_PROMPT,
                    link_referee.REFEREE_SCHEMA,
                    routes=(Route("final"),),
                    options={"temperature": 0.0, "max_tokens": 200},
                    chat=link_referee.REFEREE_CHAT,
                ),
                ScriptStep("final", refereed_entities),
            ),
            max_steps_per_subject=4,
        ),
    )
