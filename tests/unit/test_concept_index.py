"""The label index finds the labels brute force finds: exactly when small, with measured recall when large."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from domain.core.progress import ProgressTask, reporting_to
from plugins.postings.skills.concept_index import EXACT_BELOW, LabelVectorIndex


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(count: int, dim: int, seed: int) -> np.ndarray:
    """Vectors around a few hundred centres, like label embeddings (random vectors have no neighbours)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(count // 20, dim))
    return unit(centres[rng.integers(0, len(centres), count)] + 0.35 * rng.normal(size=(count, dim)))


def brute_force(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]


def test_a_small_taxonomy_is_searched_exactly() -> None:
    vectors = clustered(600, 24, seed=1)
    queries = unit(vectors[:50] + 0.2 * np.random.default_rng(2).normal(size=(50, 24)))
    index = LabelVectorIndex(vectors)
    assert index.exact
    ids, similarities = index.search(queries, 10)
    np.testing.assert_array_equal(ids, brute_force(vectors, queries, 10))
    np.testing.assert_allclose(similarities[:, 0], (queries @ vectors.T).max(axis=1), rtol=1e-5)
    assert index.search(queries[0], 10_000)[0].shape == (1, 600)  # k beyond the labels: all of them


def test_a_large_taxonomy_uses_the_graph_with_high_recall_and_a_reusable_cache(tmp_path: Path) -> None:
    vectors = clustered(EXACT_BELOW + 1000, 32, seed=3)
    queries = unit(vectors[:200] + 0.3 * np.random.default_rng(4).normal(size=(200, 32)))
    index = LabelVectorIndex(vectors, cache_dir=tmp_path)
    assert not index.exact and not index.loaded_from_cache
    ids, similarities = index.search(queries, 10)
    exact = brute_force(vectors, queries, 10)
    recall = np.mean([len(set(found) & set(truth)) / 10 for found, truth in zip(ids, exact, strict=True)])
    assert recall >= 0.95
    assert np.all(np.diff(similarities, axis=1) <= 1e-6)  # best first
    np.testing.assert_allclose(similarities, np.take_along_axis(queries @ vectors.T, ids, 1), rtol=1e-5)

    again = LabelVectorIndex(vectors, cache_dir=tmp_path)
    assert again.loaded_from_cache and again.build_seconds == 0.0
    np.testing.assert_array_equal(again.search(queries, 10)[0], ids)
    changed = LabelVectorIndex(vectors[:-1], cache_dir=tmp_path)  # other vectors: not the cached graph
    assert not changed.loaded_from_cache


class TaskLog:
    """A progress reporter that keeps what each task showed: (label, total, note) and its counts."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, int | None, str]] = []
        self.counts: dict[str, list[int]] = {}

    def started(self, task: ProgressTask) -> None:
        self.tasks.append((task.label, task.total, task.note))

    def advanced(self, task: ProgressTask) -> None:
        self.counts.setdefault(task.label, []).append(task.done)

    def finished(self, task: ProgressTask) -> None:
        self.counts.setdefault(task.label, []).append(task.done)


def test_building_the_graph_shows_its_progress_and_loading_it_shows_none(tmp_path: Path) -> None:
    """Building the graph over ESCO's ~110k labels takes minutes on 2 cores: the terminal counts it."""
    vectors = clustered(EXACT_BELOW + 1000, 32, seed=5)
    log = TaskLog()
    with reporting_to(log):
        LabelVectorIndex(vectors, cache_dir=tmp_path)
        LabelVectorIndex(vectors, cache_dir=tmp_path)  # from the cache: nothing to show

    assert [(label, total) for label, total, _ in log.tasks] == [("label index", len(vectors))]
    assert str(tmp_path) in log.tasks[0][2]
    counts = log.counts["label index"]
    assert counts == sorted(counts) and counts[-1] == len(vectors) and len(counts) > 2


@pytest.mark.parametrize("k", [1, 5])
def test_forcing_exact_search_matches_brute_force(k: int) -> None:
    vectors = clustered(EXACT_BELOW + 100, 16, seed=5)
    index = LabelVectorIndex(vectors, exact=True)
    queries = vectors[:20]
    np.testing.assert_array_equal(index.search(queries, k)[0], brute_force(vectors, queries, k))
