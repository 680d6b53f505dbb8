"""Extraction and ranking metrics against answers worked out by hand."""

import pytest

from plugins.postings.skills.skill_metrics import (
    SpanScores,
    bio_to_spans,
    mean_reciprocal_rank,
    r_precision_at_k,
    span_scores,
)

GOLD = [("d1", 0, 2), ("d1", 5, 8)]
PREDICTED = [("d1", 0, 3), ("d1", 5, 8), ("d1", 10, 11)]


def test_strict_counts_only_exact_boundaries() -> None:
    # (5, 8) matches; (0, 3) has a different end; (10, 11) matches nothing.
    scores = span_scores(GOLD, PREDICTED, "strict")
    assert (scores.tp, scores.fp, scores.fn) == (1, 2, 1)
    assert scores.precision == pytest.approx(1 / 3)
    assert scores.recall == pytest.approx(1 / 2)
    assert scores.f1 == pytest.approx(2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2))  # 0.4


def test_loose_counts_any_token_overlap() -> None:
    # (0, 3) shares tokens 0-1 with (0, 2): now two matches, only (10, 11) is spurious.
    scores = span_scores(GOLD, PREDICTED, "loose")
    assert scores == SpanScores(precision=2 / 3, recall=1.0, f1=pytest.approx(0.8), tp=2, fp=1, fn=0)


def test_loose_matches_each_span_at_most_once() -> None:
    # Two predictions inside one gold span: one is a hit, the other a false positive.
    scores = span_scores([("d", 0, 4)], [("d", 0, 1), ("d", 2, 3)], "loose")
    assert (scores.tp, scores.fp, scores.fn) == (1, 1, 0)
    # One long prediction over two gold spans: one hit, one miss.
    scores = span_scores([("d", 0, 2), ("d", 3, 5)], [("d", 0, 5)], "loose")
    assert (scores.tp, scores.fp, scores.fn) == (1, 0, 1)


def test_loose_matching_is_maximal_whatever_the_order() -> None:
    # Greedy could pair (1, 3) with (0, 2) and leave (0, 1) unmatched; the maximum matching
    # pairs (0, 1)-(0, 2) and (1, 3)-(2, 4).
    gold = [("d", 0, 2), ("d", 2, 4)]
    for predicted in ([("d", 1, 3), ("d", 0, 1)], [("d", 0, 1), ("d", 1, 3)]):
        assert span_scores(gold, predicted, "loose").tp == 2


def test_spans_of_different_documents_never_match() -> None:
    for mode in ("strict", "loose"):
        assert span_scores([("a", 0, 2)], [("b", 0, 2)], mode).tp == 0


def test_adjacent_spans_do_not_overlap() -> None:
    assert span_scores([("d", 0, 2)], [("d", 2, 4)], "loose").tp == 0


def test_empty_inputs_score_zero_and_bad_input_is_refused() -> None:
    assert span_scores([], [], "strict") == SpanScores(0.0, 0.0, 0.0, 0, 0, 0)
    assert span_scores([("d", 0, 1)], [], "loose") == SpanScores(0.0, 0.0, 0.0, 0, 0, 1)
    with pytest.raises(ValueError, match="mode must be one of"):
        span_scores([], [], "partial")
    with pytest.raises(ValueError, match="empty or reversed span"):
        span_scores([("d", 3, 3)], [], "strict")


def test_bio_to_spans() -> None:
    tags = ["B", "I", "O", "I", "B", "B", "I", "O", "B"]
    assert bio_to_spans(tags, "doc") == [
        ("doc", 0, 2),
        ("doc", 3, 4),
        ("doc", 4, 5),
        ("doc", 5, 7),
        ("doc", 8, 9),
    ]
    assert bio_to_spans(["B-SKILL", "I-SKILL", "I-KNOWLEDGE"]) == [(0, 0, 2), (0, 2, 3)]
    assert bio_to_spans(["O", "O"]) == []
    with pytest.raises(ValueError, match="not a BIO tag at position 1"):
        bio_to_spans(["O", "X"])


def test_mean_reciprocal_rank() -> None:
    rankings = [["a", "b", "c"], ["x", "y", "z"], ["p", "q"]]
    relevant = [{"a"}, {"z", "w"}, {"nowhere"}]
    # 1/1 + 1/3 + 0, over three queries.
    assert mean_reciprocal_rank(rankings, relevant) == pytest.approx((1 + 1 / 3 + 0) / 3)


def test_r_precision_at_k_divides_by_min_of_k_and_relevant_count() -> None:
    rankings = [["a", "b", "c", "d", "e"], ["b", "a"]]
    relevant = [{"a", "c", "x"}, {"a"}]
    # query 1: top1 {a} -> 1/min(1,3); top2 {a} -> 1/min(2,3); top5 {a,c} -> 2/min(5,3)
    # query 2: top1 {} -> 0/1;          top2 {a} -> 1/min(2,1); top5 {a} -> 1/min(5,1)
    assert r_precision_at_k(rankings, relevant, 1) == pytest.approx((1 + 0) / 2)
    assert r_precision_at_k(rankings, relevant, 2) == pytest.approx((1 / 2 + 1) / 2)
    assert r_precision_at_k(rankings, relevant, 5) == pytest.approx((2 / 3 + 1) / 2)


def test_ranking_metrics_refuse_inconsistent_input() -> None:
    with pytest.raises(ValueError, match="2 rankings but 1 relevant"):
        mean_reciprocal_rank([["a"], ["b"]], [{"a"}])
    with pytest.raises(ValueError, match="no relevant item"):
        r_precision_at_k([["a"]], [set()], 1)
    with pytest.raises(ValueError, match="no queries"):
        mean_reciprocal_rank([], [])
    with pytest.raises(ValueError, match="k must be at least 1"):
        r_precision_at_k([["a"]], [{"a"}], 0)
