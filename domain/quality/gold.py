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

Public gold: a use case may declare a public gold set (`PublicGold`: its subjects' keys and their gold
items); configured with its path, the gold check scores the current answers of those subjects too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ItemsFunction = Callable[[dict[str, Any]], Iterable[str]]


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


# --- public gold sets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PublicGold:
    """A public gold set a use case can be scored against: `load(path)` gives subject key -> gold items
    (compared modulo case). The path is configuration (`GymResource.public_gold_paths`)."""

    name: str
    load: Callable[[str], Mapping[str, set[str]]]


def score_public(gold: Mapping[str, set[str]], answers: Mapping[str, Iterable[str]]) -> GoldScores | None:
    """Current answers of the subjects a public gold set knows, against its items (modulo case)."""
    pairs = [(gold[key], {item.lower() for item in answer}) for key, answer in answers.items() if key in gold]
    return score(pairs)
