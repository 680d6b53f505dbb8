"""An LLM as a second opinion on candidate mentions: keep or drop each, and say skill or knowledge.

One short few-shot prompt per candidate (the sentence around it and the phrase), answered with
a one-field JSON object under a grammar. Only candidates the tagger is unsure of (marginal
below `below`) are asked, at most `max_calls` per posting, so the cost stays bounded; the
others pass unchanged. A reply that cannot be read keeps the candidate as it was (and is
counted). Framework-free: the caller passes `generate(prompt, schema) -> text`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from plugins.postings.skills.mention_grounding import Mention, sentence_around

VERIFY_PROMPT = """\
For each phrase from a job posting, say whether it names a skill (something the worker does), \
knowledge (a tool, language, subject or certificate the worker knows) or none (not a skill).

Sentence: You will build data pipelines in Python and Spark.
Phrase: build data pipelines
Answer: {"label": "skill"}

Sentence: You will build data pipelines in Python and Spark.
Phrase: Python
Answer: {"label": "knowledge"}

Sentence: We offer a competitive salary and 25 days of holiday.
Phrase: competitive salary
Answer: {"label": "none"}

Sentence: Experience with stakeholder management and agile methods is a plus.
Phrase: stakeholder management
Answer: {"label": "skill"}

Sentence: Our office is located in the city centre.
Phrase: office
Answer: {"label": "none"}

Sentence: {sentence}
Phrase: {phrase}
Answer:"""

VERIFY_SCHEMA = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": ["skill", "knowledge", "none"]}},
    "required": ["label"],
    "additionalProperties": False,
}
MAX_SENTENCE_CHARS = 300


@dataclass
class VerificationStats:
    asked: int = 0
    dropped: int = 0
    relabelled: int = 0
    unreadable: int = 0
    errors: list[str] = field(default_factory=list)


def verification_prompt(mention: Mention, text: str) -> str:
    sentence = sentence_around(text, mention.start, mention.end)[:MAX_SENTENCE_CHARS]
    return VERIFY_PROMPT.replace("{sentence}", sentence).replace("{phrase}", mention.text)


def verify_mentions(
    mentions: list[Mention],
    texts: dict[str, str],
    generate: Callable[[str, dict], str],
    below: float = 0.8,
    max_calls: int = 20,
) -> tuple[list[Mention], VerificationStats]:
    """The mentions the LLM keeps (with its kind), asking about the least certain ones first.

    `texts` maps a field ("title", "description") to its text, for the evidence sentence.
    """
    stats = VerificationStats()
    unsure = sorted((m for m in mentions if m.score < below), key=lambda m: m.score)[:max_calls]
    verdicts: dict[int, str] = {}
    for mention in unsure:
        stats.asked += 1
        try:
            reply = json.loads(generate(verification_prompt(mention, texts[mention.field]), VERIFY_SCHEMA))
            label = reply["label"]
            if label not in ("skill", "knowledge", "none"):
                raise ValueError(f"unknown label {label!r}")
        except (ValueError, KeyError, TypeError) as exc:
            stats.unreadable += 1
            stats.errors.append(f"{mention.text!r}: {exc}"[:200])
            continue
        verdicts[id(mention)] = label
    kept: list[Mention] = []
    for mention in mentions:
        label = verdicts.get(id(mention))
        if label is None:
            kept.append(mention)
        elif label == "none":
            stats.dropped += 1
        else:
            stats.relabelled += label != mention.kind
            kept.append(replace(mention, kind=label, source=f"{mention.source}+llm"))
    return kept, stats
