"""Gold evaluation: the model's current answers against reviewers' corrections and public gold sets.

Each output is turned into a set of comparable items by its use case's `gold_items`
(words of a summary, mentions of a skills list, mention->concept pairs of a
resolution; the whole output when a use case declares none). Over all compared
outputs, micro-averaged:

- precision = shared items / items in the answers,
- recall = shared items / items in the gold,
- F1 = their harmonic mean,
- agreement = share of reviewed outputs whose answer has exactly the gold's items; an
  output a reviewer rejected (without correcting it) counts as a disagreement.

Public gold: SkillSpan (JSON lines of sentences with BIO skill and knowledge tags).
Postings ingested with the key `skillspan-<source>-<idx>` (see
`benchmarks/skillspan_postings.py`) are compared with the gold spans' text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domain.skills.skill_metrics import bio_to_spans

ItemsFunction = Callable[[dict[str, Any]], Iterable[str]]
SKILLSPAN_KEY_PREFIX = "skillspan-"


@dataclass(frozen=True)
class GoldScores:
    compared: int  # outputs with both a gold value and a current answer
    precision: float
    recall: float
    f1: float
    agreement: float
    agreed: int
    rejected: int  # outputs a reviewer rejected without a correction (disagreements)
    tp: int
    fp: int
    fn: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def whole_output(output: dict[str, Any]) -> set[str]:
    """The fallback comparison: one item, the output itself."""
    return {json.dumps(output, sort_keys=True, ensure_ascii=False)}


def score(pairs: Sequence[tuple[Iterable[str], Iterable[str]]], rejected: int = 0) -> GoldScores | None:
    """Scores of (gold items, answer items) pairs; None when there is nothing to compare."""
    if not pairs and not rejected:
        return None
    tp = fp = fn = agreed = 0
    for gold, answer in pairs:
        gold_set, answer_set = set(gold), set(answer)
        tp += len(gold_set & answer_set)
        fp += len(answer_set - gold_set)
        fn += len(gold_set - answer_set)
        agreed += gold_set == answer_set
    precision = tp / (tp + fp) if tp + fp else (1.0 if pairs else 0.0)
    recall = tp / (tp + fn) if tp + fn else (1.0 if pairs else 0.0)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    reviewed = len(pairs) + rejected
    return GoldScores(
        compared=len(pairs),
        precision=precision,
        recall=recall,
        f1=f1,
        agreement=agreed / reviewed,
        agreed=agreed,
        rejected=rejected,
        tp=tp,
        fp=fp,
        fn=fn,
    )


def score_corpus(
    pairs: Sequence[Any], rejected: int, items: ItemsFunction | None
) -> tuple[GoldScores | None, int]:
    """Scores of `appdb.review.GoldPair`s with an answer; also how many still await one."""
    items = items or whole_output
    answered = [(items(pair.gold), items(pair.answer)) for pair in pairs if pair.answer is not None]
    waiting = sum(1 for pair in pairs if pair.answer is None)
    return score(answered, rejected), waiting


# --- SkillSpan ---------------------------------------------------------------------------------


def load_skillspan_gold(path: str | Path) -> dict[str, set[str]]:
    """Posting key (`skillspan-<source>-<idx>`) -> the gold mentions (span texts, lowercased)."""
    gold: dict[str, set[str]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key = f"{SKILLSPAN_KEY_PREFIX}{row['source']}-{row['idx']}"
                tokens = row["tokens"]
                spans = bio_to_spans(row["tags_skill"]) + bio_to_spans(row["tags_knowledge"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a SkillSpan sentence: {exc}") from exc
            mentions = gold.setdefault(key, set())
            mentions.update(" ".join(tokens[start:end]).lower() for _, start, end in spans)
    return gold


def score_skillspan(gold: Mapping[str, set[str]], answers: Mapping[str, Iterable[str]]) -> GoldScores | None:
    """Current skills answers of SkillSpan postings against the gold mentions (modulo case)."""
    pairs = [(gold[key], {item.lower() for item in answer}) for key, answer in answers.items() if key in gold]
    return score(pairs)
