"""A model as referee of the linker's unsure answers: it chooses among the concepts a reviewer is offered.

The learned linker keeps its three best concepts on every resolution (`Resolution.candidates`).
Where its answer is wrong, the annotators' concept is usually among them (on Decorte TECH
validation, 13 of 15 wrong answers and 33 of 40 unmatched spans): the linker ranks a
near-synonym first. A model that reads the sentence can tell "work in teams" from "teamwork
principles"; so the unsure answers of a posting are listed, each with its sentence and its
candidates lettered, and one call answers a letter or "none" for each, under a grammar.

The referee's word is final for the entities it was asked about: a letter takes that candidate,
"none" leaves the mention unmatched (its candidates stay for a reviewer). An answer that cannot
be read, or a letter with no candidate behind it, leaves the linker's answer as it was. The
stage "referee" marks a concept the model chose; `referee` on an entity keeps what it answered.

Framework-free: `plugins/postings/use_cases/skill_entities.py` declares the chain that runs it
(PIPELINE_LINK_STYLE=linker+llm), and `benchmarks/linking_referee.py` measures it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.language.chat_prompts import ChatPrompt

LETTERS = ("a", "b", "c")
NO_CONCEPT = "none"
REFEREE_STAGE = "referee"
# Which of the linker's answers are asked: its own choices (not a label matched as written) that
# it is less sure of than this. Chosen before measuring; measured after: at 0.8 or above, the linker's
# best answer was right for every Decorte validation span (18 TECH, 21 HOUSE).
ASK_BELOW = 0.8
MAX_REFEREED = 12  # per posting, the least sure first: the call's length stays bounded
MAX_SENTENCE_CHARS = 240
ASKED_STAGES = ("learned", "unmatched")

# The examples are written for this prompt from ordinary job-ad wording and ESCO's own labels; none
# comes from the benchmark's sentences.
REFEREE_PROMPT = """\
Skill phrases from job postings, each with the sentence it is in and three concepts of a skills \
taxonomy. For each phrase in order, the letter of the concept the phrase asks for, or "none" \
when none of the three is what the phrase means, or when unsure: a wrong concept costs more than none.

Phrases:
1. work closely with other teams | in: You will work closely with other teams to deliver our roadmap.
   a) teamwork principles  b) work in teams  c) manage a team
2. Kubernetes | in: Experience with Docker and Kubernetes is a plus.
   a) Kubernetes  b) Docker  c) cloud technologies
3. fast-paced environment | in: You thrive in a fast-paced environment.
   a) manage time  b) work in a fast-paced environment  c) cope with stress
Answer: {"choices": ["b", "a", "b"]}

Phrases:
1. our customers | in: Our customers are at the heart of everything we do.
   a) customer service  b) maintain relationship with customers  c) provide customer follow-up services
2. write clean, tested code | in: We expect you to write clean, tested code and review your peers' work.
   a) programming testing  b) develop software prototype  c) use software design patterns
Answer: {"choices": ["none", "none"]}

Phrases:
{resolve.listing}
Answer:"""

REFEREE_CHAT = ChatPrompt(
    system="""\
You check how skill phrases from job postings were linked to a skills taxonomy. Each phrase comes with \
the sentence it is in and three candidate concepts a) b) c). For each phrase in order, answer the \
letter of the concept the phrase asks for, or "none" when none of the three is what the phrase means \
or when you are unsure: a wrong concept costs more than none. Answer with JSON only: \
{"choices": ["a", "none", ...]}, one entry per phrase.""",
    examples=(
        (
            """\
1. work closely with other teams | in: You will work closely with other teams to deliver our roadmap.
   a) teamwork principles  b) work in teams  c) manage a team
2. Kubernetes | in: Experience with Docker and Kubernetes is a plus.
   a) Kubernetes  b) Docker  c) cloud technologies""",
            '{"choices": ["b", "a"]}',
        ),
    ),
    user="{resolve.listing}",
)

REFEREE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "choices": {"type": "array", "maxItems": MAX_REFEREED, "items": {"enum": [*LETTERS, NO_CONCEPT]}},
    },
    "required": ["choices"],
    "additionalProperties": False,
}


@dataclass
class RefereeCounts:
    """What the referee did to one posting's entities."""

    asked: int = 0
    kept: int = 0  # the linker's answer confirmed
    changed: int = 0  # another candidate, or a concept where the linker left the mention unmatched
    unmatched: int = 0  # "none"
    unreadable: int = 0  # no answer for the entity, or a letter with no candidate behind it

    def add(self, other: RefereeCounts) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


def asked_entities(entities: Sequence[Mapping[str, Any]], below: float = ASK_BELOW) -> list[int]:
    """Indices of the entities to ask, in their order: the linker's own answers below `below`
    with two or more candidates, at most MAX_REFEREED of them (the least sure first)."""
    unsure = [
        index
        for index, entity in enumerate(entities)
        if entity.get("stage") in ASKED_STAGES
        and len(entity.get("candidates") or ()) > 1
        and float(entity.get("confidence") or 0.0) < below
    ]
    unsure.sort(key=lambda index: float(entities[index].get("confidence") or 0.0))
    return sorted(unsure[:MAX_REFEREED])


def referee_listing(
    entities: Sequence[Mapping[str, Any]], asked: Sequence[int], sentences: Sequence[str]
) -> str:
    """The numbered phrases of the prompt: each asked entity, its sentence and its lettered candidates.

    sentences: the sentence of each entity (same order as `entities`; the mention itself when none).
    """
    lines = []
    for number, index in enumerate(asked, 1):
        entity = entities[index]
        sentence = " ".join((sentences[index] or entity["mention"]).split())[:MAX_SENTENCE_CHARS]
        lines.append(f"{number}. {entity['mention']} | in: {sentence}")
        lettered = zip(LETTERS, entity["candidates"], strict=False)
        lines.append("   " + "  ".join(f"{letter}) {c['concept_label']}" for letter, c in lettered))
    return "\n".join(lines)


def apply_choices(
    entities: Sequence[Mapping[str, Any]], asked: Sequence[int], choices: Sequence[Any]
) -> tuple[list[dict[str, Any]], RefereeCounts]:
    """The entities with the referee's answers applied (see the module docstring) and what changed."""
    result = [dict(entity) for entity in entities]
    counts = RefereeCounts(asked=len(asked))
    for position, index in enumerate(asked):
        choice = choices[position] if position < len(choices) else None
        entity = result[index]
        candidates = entity.get("candidates") or []
        if choice == NO_CONCEPT:
            counts.unmatched += entity["concept_uri"] is not None
            entity.update(concept_uri=None, concept_label=None, confidence=0.0, stage="unmatched")
        elif choice in LETTERS and LETTERS.index(choice) < len(candidates):
            chosen = candidates[LETTERS.index(choice)]
            confirmed = chosen["concept_uri"] == entity["concept_uri"]
            counts.kept += confirmed
            counts.changed += not confirmed
            # the linker's own figure for the chosen concept: the referee is a second opinion, and
            # nothing calibrates it into a probability
            confidence = float(entity["confidence"]) if confirmed else float(chosen["probability"])
            entity.update(
                concept_uri=chosen["concept_uri"],
                concept_label=chosen["concept_label"],
                confidence=round(confidence, 4),
                stage=REFEREE_STAGE,
            )
        else:
            counts.unreadable += 1
            continue
        entity["referee"] = choice
    return result, counts
