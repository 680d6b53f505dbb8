"""Nearest-neighbour search over taxonomy label vectors (usearch HNSW): a query reads ~1k vectors, not 100k.

The label vectors are unit rows, so inner product is cosine similarity. Small taxonomies (below
`EXACT_BELOW` labels) are searched exactly with one matrix product: an approximate graph buys
nothing there. Larger ones get an HNSW graph (usearch), built once and saved next to the label
vector cache, keyed by the vectors' digest; its recall against exact search is measured by
benchmarks/linking_quality.py (`index` section) and checked by tests/test_concept_index.py.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

from domain.core.progress import ProgressTask, progress_task

EXACT_BELOW = 5_000
# HNSW parameters: connectivity 16 and search expansion 256 gave recall@50 of ~0.99 on ESCO's
# ~110k labels (benchmarks/linking_quality.py); expansion_add 128 is usearch's default.
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 256


class LabelVectorIndex:
    """Top-k labels by cosine similarity for a batch of query vectors.

    vectors: unit label vectors, one row per label (row number = label id).
    cache_dir: where the HNSW graph is saved and found again (None: built in memory each time).
    exact: force brute-force search whatever the size (for measuring recall).
    """

    def __init__(self, vectors: np.ndarray, cache_dir: Path | None = None, exact: bool = False) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.exact = exact or len(self.vectors) < EXACT_BELOW
        self.build_seconds = 0.0
        self.loaded_from_cache = False
        self._hnsw = None if self.exact else self._open_hnsw(cache_dir)

    def __len__(self) -> int:
        return len(self.vectors)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(label ids, cosine similarities), each of shape (queries, k'), best first; k' = min(k, labels)."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        k = min(k, len(self.vectors))
        if self._hnsw is None:
            return self.exact_search(queries, k)
        matches = self._hnsw.search(queries, k)
        ids = np.asarray(matches.keys, dtype=np.int64).reshape(len(queries), -1)[:, :k]
        found = ids >= 0
        # Recompute cosines from the float32 vectors (the graph may hold a coarser copy).
        similarities = np.einsum("qkd,qd->qk", self.vectors[np.where(found, ids, 0)], queries)
        similarities = np.where(found, similarities, -np.inf).astype(np.float32)
        order = np.argsort(-similarities, axis=1, kind="stable")
        return np.take_along_axis(ids, order, 1), np.take_along_axis(similarities, order, 1)

    def exact_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Brute force: every label's cosine, the top k kept."""
        queries = np.atleast_2d(queries).astype(np.float32)
        k = min(k, len(self.vectors))
        scores = queries @ self.vectors.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        top_scores = np.take_along_axis(scores, top, 1)
        order = np.argsort(-top_scores, axis=1, kind="stable")
        return np.take_along_axis(top, order, 1).astype(np.int64), np.take_along_axis(top_scores, order, 1)

    def _open_hnsw(self, cache_dir: Path | None):  # noqa: ANN202 - usearch's Index, imported lazily
        from usearch.index import Index

        index = Index(
            ndim=self.vectors.shape[1],
            metric="ip",
            dtype="f16",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )
        cache_file = None
        if cache_dir is not None:
            digest = hashlib.sha256(self.vectors.tobytes()).hexdigest()[:20]
            cache_file = Path(cache_dir) / f"hnsw-{CONNECTIVITY}-{EXPANSION_ADD}-{digest}.usearch"
            if cache_file.is_file():
                index.load(str(cache_file))
                if len(index) == len(self.vectors):
                    index.expansion_search = EXPANSION_SEARCH
                    self.loaded_from_cache = True
                    return index
                index.reset()
        started = time.perf_counter()
        kept = f"kept in {cache_dir}" if cache_file is not None else "not kept: no cache directory"
        note = f"building the nearest-label graph once per taxonomy version ({kept})"
        with progress_task("label index", len(self.vectors), "labels", note) as task:
            index.add(np.arange(len(self.vectors), dtype=np.uint64), self.vectors, progress=_advancing(task))
        self.build_seconds = time.perf_counter() - started
        if cache_file is not None:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(f".{os.getpid()}.tmp")
            index.save(str(partial))
            partial.replace(cache_file)
        return index


def _advancing(task: ProgressTask):  # noqa: ANN202 - usearch's ProgressCallback
    """usearch's progress callback (vectors added so far, of all), moving `task` on; never stops the build."""
    done = 0

    def advance(processed: int, _total: int) -> bool:
        nonlocal done
        if processed > done:
            task.advance(processed - done)
            done = processed
        return True

    # usearch compares the annotations with the types themselves (this module's are strings)
    advance.__annotations__ = {"processed": int, "_total": int, "return": bool}
    return advance
