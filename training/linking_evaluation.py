"""How well a SkillResolver links skills, posed as the field poses it (Decorte et al. 2022 splits).

- span given: one query per distinct (sentence, span); the span is linked in its sentence and
  all ESCO concepts are ranked (a linking-only diagnostic);
- sentence level: one query per distinct sentence; the concepts found in the sentence (sentence
  retrieval, label n-grams, and the mentions an `extract(sentence)` callable returns, each linked)
  are ranked by confidence: the figure to set beside published sentence-level systems;
- resolution: at a threshold, the share of spans resolved to the right concept, to a wrong one,
  or left unmatched, and the coverage/precision curve over thresholds.

MRR and RP@k as in plugins/postings/skills/skill_metrics.py. Used by the trainer (model selection) and by
benchmarks/linking_quality.py (the report).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from plugins.postings.skills.skill_metrics import mean_reciprocal_rank, r_precision_at_k
from plugins.postings.skills.skill_resolver import SkillResolver
from training.linking_data import DecorteSplit, gold_concepts, gold_index

CUTOFFS = (1, 5, 10)
RANK_DEPTH = 100  # ranks beyond this add under 0.01 to MRR; deeper rankings cost a full scan
Extractor = Callable[[str], Sequence[str]]


def no_extractor(sentence: str) -> list[str]:
    """Sentence-level retrieval alone: no mentions."""
    return []


def ranking_metrics(rankings: list[list[str]], relevant: list[set[str]]) -> dict[str, float]:
    return {
        "queries": len(rankings),
        "mrr": round(mean_reciprocal_rank(rankings, relevant), 4),
        **{f"rp@{k}": round(100 * r_precision_at_k(rankings, relevant, k), 2) for k in CUTOFFS},
    }


@dataclass
class GoldMapper:
    """Gold preferred labels -> concept URIs of the loaded taxonomy, counting what maps nowhere."""

    resolver: SkillResolver

    def __post_init__(self) -> None:
        self.index = gold_index(self.resolver.preferred_labels)
        self.unmapped: set[str] = set()

    def __call__(self, labels: frozenset[str]) -> set[str]:
        uris, unmapped = gold_concepts(labels, self.index)
        self.unmapped.update(unmapped)
        return uris


def span_given(resolver: SkillResolver, split: DecorteSplit, use_context: bool = True) -> dict[str, Any]:
    """Rank concepts for each distinct (sentence, span) of the split; MRR, RP@k, seconds per query."""
    gold = GoldMapper(resolver)
    rankings, relevant, seconds = [], [], 0.0
    for query in split.span_queries:
        uris = gold(query.gold_labels)
        if not uris:
            continue
        started = time.perf_counter()
        ranked = resolver.rank(query.span, limit=RANK_DEPTH, context=query.sentence if use_context else None)
        seconds += time.perf_counter() - started
        rankings.append([uri for uri, _ in ranked])
        relevant.append(uris)
    return {
        **ranking_metrics(rankings, relevant),
        "seconds_per_query": round(seconds / len(rankings), 4),
        "unmapped_gold_labels": sorted(gold.unmapped),
    }


def sentence_level(
    resolver: SkillResolver, split: DecorteSplit, extract: Extractor | None = None
) -> dict[str, Any]:
    """Rank concepts for each distinct sentence from what `extract` finds in it (None: gold spans)."""
    gold = GoldMapper(resolver)
    rankings, relevant, seconds = [], [], 0.0
    for query in split.sentence_queries:
        uris = gold(query.gold_labels)
        if not uris:
            continue
        started = time.perf_counter()
        mentions = list(query.spans) if extract is None else list(extract(query.sentence))
        if resolver.linker is not None:
            ranked = resolver.link_sentence(query.sentence, mentions)
        else:
            ranked = rule_based_sentence_ranking(resolver, query.sentence, mentions)
        seconds += time.perf_counter() - started
        rankings.append([uri for uri, _ in ranked[:RANK_DEPTH]])
        relevant.append(uris)
    return {**ranking_metrics(rankings, relevant), "seconds_per_query": round(seconds / len(rankings), 4)}


def rule_based_sentence_ranking(
    resolver: SkillResolver, sentence: str, mentions: Sequence[str]
) -> list[tuple[str, float]]:
    """The rule-based resolver at sentence level: the sentence and each mention ranked, best score kept."""
    best: dict[str, float] = {}
    for query in [sentence, *mentions]:
        for uri, score in resolver.rank(query, limit=RANK_DEPTH):
            best[uri] = max(best.get(uri, -1.0), score)
    return sorted(best.items(), key=lambda item: -item[1])


@dataclass(frozen=True)
class TopAnswer:
    """The linker's best concept for one span, its confidence, and whether it is a gold concept."""

    confidence: float
    right: bool
    gold_among_candidates: bool = False  # a gold concept is among the linker's candidates at all


def top_answers(resolver: SkillResolver, split: DecorteSplit) -> list[TopAnswer]:
    """For each span with an ESCO label: the best candidate (before any threshold)."""
    gold = GoldMapper(resolver)
    answers = []
    for query in split.span_queries:
        uris = gold(query.gold_labels)
        if not uris:
            continue
        concepts, confidence = resolver.confidence_of(query.span, query.sentence)
        if not len(concepts):
            answers.append(TopAnswer(0.0, False))
            continue
        candidates = {resolver.concept_uris[c] for c in concepts.tolist()}
        answers.append(
            TopAnswer(confidence, resolver.concept_uris[concepts[0]] in uris, bool(candidates & uris))
        )
    return answers


def candidate_recall(answers: Sequence[TopAnswer]) -> float:
    """Share of spans whose gold concept is among the linker's candidates at all."""
    return round(sum(a.gold_among_candidates for a in answers) / max(len(answers), 1), 4)


def shares_at(answers: Sequence[TopAnswer], threshold: float) -> dict[str, float]:
    """Right / wrong / unmatched shares of the spans if answers below `threshold` were "unmatched"."""
    kept = [answer for answer in answers if answer.confidence >= threshold]
    right = sum(answer.right for answer in kept)
    total = max(len(answers), 1)
    return {
        "threshold": round(threshold, 4),
        "right": right / total,
        "wrong": (len(kept) - right) / total,
        "unmatched": (len(answers) - len(kept)) / total,
        "precision": right / len(kept) if kept else 1.0,
    }


def coverage_curve(answers: Sequence[TopAnswer], points: int = 11) -> list[dict[str, float]]:
    """Shares at evenly spaced thresholds 0, 0.1, ..., 1.0."""
    return [shares_at(answers, float(t)) for t in np.linspace(0.0, 1.0, points)]


def precision_threshold(answers: Sequence[TopAnswer], max_wrong: float = 0.10) -> float:
    """The lowest threshold (most spans resolved) at which at most `max_wrong` of the spans are wrong."""
    candidates = sorted({round(answer.confidence, 4) for answer in answers} | {1.0})
    for threshold in candidates:
        if shares_at(answers, threshold)["wrong"] <= max_wrong:
            return threshold
    return 1.0


def span_outcome(concept_uris: Sequence[str | None], gold: set[str]) -> str:
    """How (c) counts a span from the concepts its resolutions found (None: unmatched): "right" when
    one is a gold concept, "unmatched" when all are None, else "wrong"."""
    if any(uri in gold for uri in concept_uris if uri is not None):
        return "right"
    return "wrong" if any(uri is not None for uri in concept_uris) else "unmatched"


def resolution_shares(
    resolver: SkillResolver, split: DecorteSplit, use_context: bool = True
) -> dict[str, Any]:
    """What resolve() answers at the resolver's own threshold: right / wrong / unmatched per span.

    A span is right when one of its resolutions is a gold concept, unmatched when all are
    unmatched, else wrong; for the wrong and unmatched ones, also how many have a gold concept
    among the candidates a reviewer is offered (`Resolution.candidates`). Spans annotated LABEL NOT
    PRESENT are reported apart: for them "unmatched" is the right answer.
    """
    gold = GoldMapper(resolver)
    counts = {"right": 0, "wrong": 0, "unmatched": 0}
    in_candidates = {"wrong": 0, "unmatched": 0}  # spans whose gold concept a reviewer is offered
    confidences: list[float] = []
    seconds = 0.0
    spans = 0
    for query in split.span_queries:
        uris = gold(query.gold_labels)
        if not uris:
            continue
        started = time.perf_counter()
        resolutions = resolver.resolve(query.span, query.sentence if use_context else None)
        seconds += time.perf_counter() - started
        spans += 1
        matched = [r for r in resolutions if r.concept_uri is not None]
        confidences += [r.confidence for r in matched]
        among_candidates = any(c.concept_uri in uris for r in resolutions for c in r.candidates)
        outcome = span_outcome([r.concept_uri for r in resolutions], uris)
        counts[outcome] += 1
        if outcome in in_candidates:
            in_candidates[outcome] += among_candidates
    left_alone = 0
    for sentence, span in split.unlinked_spans:
        resolutions = resolver.resolve(span, sentence if use_context else None)
        left_alone += all(r.concept_uri is None for r in resolutions)
    return {
        "spans": spans,
        **{key: round(value / max(spans, 1), 4) for key, value in counts.items()},
        # of the spans answered wrongly / left unmatched: gold among the Resolution's candidates
        **{f"{key}_gold_in_candidates": value for key, value in in_candidates.items()},
        **{f"{key}_spans": counts[key] for key in in_candidates},
        "mean_confidence": round(float(np.mean(confidences)), 4) if confidences else None,
        "seconds_per_span": round(seconds / max(spans, 1), 4),
        "label_not_present_spans": len(split.unlinked_spans),
        "label_not_present_left_unmatched": round(left_alone / max(len(split.unlinked_spans), 1), 4),
    }
