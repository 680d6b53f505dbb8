"""Quality metrics for skill extraction (token spans) and skill linking (rankings). Pure functions.

Spans are `(doc_id, start, end)` with token offsets, `end` exclusive.

- strict: a predicted span counts only when its document and both boundaries equal a
  gold span's.
- loose: a predicted span and a gold span match when they share at least one token of
  the same document. Each gold span and each predicted span is used in at most one
  match, and the matching is a maximum one-to-one matching (so the count does not
  depend on the order of the spans): tp = its size, fp = predicted - tp, fn = gold - tp.

Duplicate spans are counted once. Precision, recall and F1 are 0.0 when their
denominator is 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

Span = tuple[Hashable, int, int]
SPAN_MODES = ("strict", "loose")


@dataclass(frozen=True)
class SpanScores:
    precision: float
    recall: float
    f1: float
    tp: int
    fp: int
    fn: int


def span_scores(gold: Iterable[Span], predicted: Iterable[Span], mode: str = "strict") -> SpanScores:
    """Precision, recall and F1 of `predicted` against `gold` spans (see the module docstring for modes)."""
    if mode not in SPAN_MODES:
        raise ValueError(f"mode must be one of {', '.join(SPAN_MODES)}, not {mode!r}")
    gold_set, predicted_set = set(gold), set(predicted)
    for span in (*gold_set, *predicted_set):
        if span[2] <= span[1]:
            raise ValueError(f"empty or reversed span {span!r}: end must be greater than start")
    if mode == "strict":
        tp = len(gold_set & predicted_set)
    else:
        tp = _maximum_overlap_matching(gold_set, predicted_set)
    return _scores(tp, len(predicted_set) - tp, len(gold_set) - tp)


def _scores(tp: int, fp: int, fn: int) -> SpanScores:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return SpanScores(precision, recall, f1, tp, fp, fn)


def _maximum_overlap_matching(gold: set[Span], predicted: set[Span]) -> int:
    """Size of a maximum one-to-one matching between overlapping gold and predicted spans."""
    gold_by_doc: dict[Hashable, list[Span]] = defaultdict(list)
    for span in gold:
        gold_by_doc[span[0]].append(span)
    matched = 0
    predicted_by_doc: dict[Hashable, list[Span]] = defaultdict(list)
    for span in predicted:
        predicted_by_doc[span[0]].append(span)
    for doc, doc_predicted in predicted_by_doc.items():
        doc_gold = gold_by_doc.get(doc, [])
        neighbours = [
            [g for g, gold_span in enumerate(doc_gold) if span[1] < gold_span[2] and gold_span[1] < span[2]]
            for span in doc_predicted
        ]
        owner: dict[int, int] = {}  # gold index -> predicted index
        matched += sum(_augment(p, neighbours, owner, set()) for p in range(len(doc_predicted)))
    return matched


def _augment(predicted: int, neighbours: list[list[int]], owner: dict[int, int], seen: set[int]) -> bool:
    """Kuhn's augmenting path: match `predicted`, moving earlier matches along when that frees a gold span."""
    for gold in neighbours[predicted]:
        if gold in seen:
            continue
        seen.add(gold)
        if gold not in owner or _augment(owner[gold], neighbours, owner, seen):
            owner[gold] = predicted
            return True
    return False


def bio_to_spans(tags: Sequence[str], doc_id: Hashable = 0) -> list[Span]:
    """Spans of a BIO tag sequence ("B", "I", "O", optionally typed as "B-SKILL").

    An "I" that follows "O", starts the sequence or changes the type opens a new span
    (the CoNLL evaluation convention).
    """
    spans: list[Span] = []
    start: int | None = None
    current_type: str | None = None
    for position, tag in enumerate([*tags, "O"]):
        prefix, _, tag_type = tag.partition("-")
        prefix = prefix.upper()
        if prefix not in ("B", "I", "O"):
            raise ValueError(f"not a BIO tag at position {position}: {tag!r}")
        continues = prefix == "I" and start is not None and tag_type == current_type
        if start is not None and not continues:
            spans.append((doc_id, start, position))
            start = None
        if prefix == "B" or (prefix == "I" and not continues):
            start, current_type = position, tag_type
    return spans


def _check_rankings(rankings: Sequence[Sequence[Hashable]], relevant: Sequence[set]) -> None:
    if len(rankings) != len(relevant):
        raise ValueError(f"{len(rankings)} rankings but {len(relevant)} relevant sets")
    if not rankings:
        raise ValueError("no queries to score")
    for position, items in enumerate(relevant):
        if not items:
            raise ValueError(f"query {position} has no relevant item (exclude such queries first)")


def mean_reciprocal_rank(rankings: Sequence[Sequence[Hashable]], relevant: Sequence[set]) -> float:
    """Mean over queries of 1 / rank of the first relevant item (0 when none is ranked)."""
    _check_rankings(rankings, relevant)
    total = 0.0
    for ranking, items in zip(rankings, relevant, strict=True):
        for rank, item in enumerate(ranking, start=1):
            if item in items:
                total += 1.0 / rank
                break
    return total / len(rankings)


def r_precision_at_k(rankings: Sequence[Sequence[Hashable]], relevant: Sequence[set], k: int) -> float:
    """RP@k (Decorte et al. 2022): mean over queries of (# relevant in top k) / min(k, # relevant)."""
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    _check_rankings(rankings, relevant)
    total = 0.0
    for ranking, items in zip(rankings, relevant, strict=True):
        hits = len(set(ranking[:k]) & items)
        total += hits / min(k, len(items))
    return total / len(rankings)
