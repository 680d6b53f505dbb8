"""Resolve free-text skill mentions to concepts of the loaded skills taxonomy.

Stages, cheapest and surest first: exact match on a preferred label, exact match on an
alternative label, fuzzy string match (rapidfuzz) above `fuzzy_threshold`, cosine
similarity of embeddings above `semantic_threshold` (only with an embedding backend),
else "unmatched". A mention naming several skills ("Python and SQL") is split only when
the whole is not a label itself ("health and safety", "CI/CD" stay whole).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz import fuzz, process
from sqlalchemy.orm import Session

from appdb.taxonomy import normalize_label, read_taxonomy_labels
from domain.skills.embeddings import EmbeddingBackend

STAGES = ("exact", "alt_label", "fuzzy", "semantic", "unmatched")
EXACT_CONFIDENCE = 1.0
ALT_LABEL_CONFIDENCE = 0.95
EMBEDDING_BACKENDS = ("none", "ollama", "minilm")
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"

# How label similarity (0-100) is scored, for both the fuzzy stage and `rank`. The default,
# the mean of rapidfuzz's token_set_ratio and token_sort_ratio, ranked ESCO best of the
# scorers we measured (benchmarks/resolution_quality.py, `--scorer`): token_set_ratio
# rewards a label that contains all the mention's words ("java" in "Java (computer
# programming)"), token_sort_ratio penalizes the label's extra words, and neither
# minds word order. WRatio and partial_ratio score a short word high against any long
# label containing it and ranked clearly worse.
FUZZY_SCORERS = ("token_set_sort_mean", "token_sort_ratio", "token_set_ratio", "ratio", "WRatio")
DEFAULT_SCORER = "token_set_sort_mean"
_RAPIDFUZZ_SCORERS: dict[str, Callable[..., float]] = {
    "token_set_ratio": fuzz.token_set_ratio,
    "ratio": fuzz.ratio,
    "WRatio": fuzz.WRatio,
}


@dataclass(frozen=True)
class Resolution:
    """One resolved part of a mention; `concept_uri` is None when the stage is "unmatched"."""

    mention: str
    concept_uri: str | None
    concept_label: str | None
    confidence: float
    stage: str


# Separators between several skills in one mention. "&" only with spaces around it
# ("R&D" stays whole); "/" is handled separately below.
_SEPARATOR = re.compile(r"\s*(?:[,;|/]|(?<=\s)&(?=\s)|\band\b|\bor\b|\bas well as\b)\s*", re.IGNORECASE)
_FUZZY_NOISE = re.compile(r"[()\[\]{}\"',:;!?*]+")


def split_mention(text: str, is_label: Callable[[str], bool] | None = None) -> list[str]:
    """Split a mention that names several skills: "Python, SQL & dbt" -> ["Python", "SQL", "dbt"].

    Conservative: nothing inside parentheses is split; a "/" next to a word of one or two
    characters stays ("CI/CD", "TCP/IP", "A/B testing"); and with `is_label`, adjacent pieces that
    together form a known label are kept together ("health and safety", "research and
    development, Python" -> ["research and development", "Python"]).
    """
    pieces: list[tuple[int, int]] = []
    start = 0
    for match in _SEPARATOR.finditer(text):
        if _inside_parentheses(text, match.start()) or _short_slash(text, match):
            continue
        pieces.append((start, match.start()))
        start = match.end()
    pieces.append((start, len(text)))
    pieces = [(begin, end) for begin, end in pieces if normalize_label(text[begin:end])]
    if not pieces:
        return []
    parts: list[str] = []
    index = 0
    while index < len(pieces):
        taken = index + 1
        if is_label is not None:
            for stop in range(len(pieces), index + 1, -1):
                if is_label(text[pieces[index][0] : pieces[stop - 1][1]]):
                    taken = stop
                    break
        parts.append(text[pieces[index][0] : pieces[taken - 1][1]].strip())
        index = taken
    return parts


def _inside_parentheses(text: str, position: int) -> bool:
    depth = 0
    for char in text[:position]:
        if char in "([{":
            depth += 1
        elif char in ")]}" and depth:
            depth -= 1
    return depth > 0


def _short_slash(text: str, match: re.Match[str]) -> bool:
    """Whether a "/" touches a word of at most two characters, and so joins (CI/CD, I/O, TCP/IP, C/C++)."""
    if match.group().strip() != "/":
        return False
    before = re.search(r"[\w+#.]*$", text[: match.start()])
    after = re.match(r"[\w+#.]*", text[match.end() :])
    shortest = min(len(before.group()) if before else 0, len(after.group()) if after else 0)
    return shortest <= 2


def _fuzzy_key(normalized: str) -> str:
    """The form fuzzy matching compares: brackets, quotes and list punctuation become spaces."""
    return " ".join(_FUZZY_NOISE.sub(" ", normalized).split())


def _sorted_tokens(key: str) -> str:
    """Words in sorted order: `ratio` of two such strings is `token_sort_ratio` of the originals."""
    return " ".join(sorted(key.split()))


@dataclass(frozen=True)
class TaxonomyLabelEntry:
    concept_uri: str
    label: str
    normalized_label: str
    is_preferred: bool


class SkillResolver:
    """Resolves mentions against all taxonomy labels, held in memory (built once per run)."""

    def __init__(
        self,
        labels: Sequence[TaxonomyLabelEntry],
        preferred_labels: dict[str, str],
        fuzzy_threshold: float = 88.0,
        semantic_threshold: float = 0.75,
        embeddings: EmbeddingBackend | None = None,
        scorer: str = DEFAULT_SCORER,
        vector_cache_dir: Path | None = None,
    ) -> None:
        if scorer not in FUZZY_SCORERS:
            raise ValueError(f"scorer must be one of {', '.join(FUZZY_SCORERS)}, not {scorer!r}")
        self.fuzzy_threshold = fuzzy_threshold
        self.semantic_threshold = semantic_threshold
        self.embeddings = embeddings
        self.vector_cache_dir = vector_cache_dir
        self.scorer = scorer
        self.concept_uris: list[str] = list(preferred_labels)
        self.preferred_labels = dict(preferred_labels)
        self._concept_index = {uri: index for index, uri in enumerate(self.concept_uris)}
        concept_index = self._concept_index
        self._exact: dict[str, list[str]] = {}
        self._alternative: dict[str, list[str]] = {}
        label_index: dict[str, int] = {}
        self._label_texts: list[str] = []  # one per distinct normalized label: its first spelling
        self._fuzzy_keys: list[str] = []
        self._label_concepts: list[list[str]] = []
        pairs: list[tuple[int, int]] = []  # (concept index, label index)
        preferred_label_of = np.zeros(len(self.concept_uris), dtype=np.int64)
        for entry in labels:
            if entry.concept_uri not in concept_index:
                continue
            lookup = self._exact if entry.is_preferred else self._alternative
            uris = lookup.setdefault(entry.normalized_label, [])
            if entry.concept_uri not in uris:
                uris.append(entry.concept_uri)
            index = label_index.get(entry.normalized_label)
            if index is None:
                index = label_index[entry.normalized_label] = len(self._label_texts)
                self._label_texts.append(entry.label)
                self._fuzzy_keys.append(_fuzzy_key(entry.normalized_label))
                self._label_concepts.append([])
            if entry.concept_uri not in self._label_concepts[index]:
                self._label_concepts[index].append(entry.concept_uri)
            concept = concept_index[entry.concept_uri]
            pairs.append((concept, index))
            if entry.is_preferred:
                preferred_label_of[concept] = index
        pairs.sort()
        self._pair_concepts = np.array([concept for concept, _ in pairs], dtype=np.int64)
        self._pair_labels = np.array([label for _, label in pairs], dtype=np.int64)
        covered = np.unique(self._pair_concepts)
        if len(covered) != len(self.concept_uris):
            # Every concept has its preferred label, so this means labels and concepts disagree.
            raise ValueError("some taxonomy concepts have no label: reload the taxonomy")
        self._concept_starts = np.searchsorted(self._pair_concepts, np.arange(len(self.concept_uris)))
        self._preferred_label_of = preferred_label_of
        # Labels with their words sorted, once, so token_sort_ratio is a plain (fast) ratio per query.
        self._sorted_keys = [_sorted_tokens(key) for key in self._fuzzy_keys]
        self._label_vectors: np.ndarray | None = None

    @classmethod
    def from_session(cls, session: Session, **options: Any) -> SkillResolver:
        """Read every concept and label once; raises ValueError when no taxonomy is loaded."""
        preferred, rows = read_taxonomy_labels(session)
        if not preferred:
            raise ValueError(
                "the skills taxonomy is empty: materialize the skills_taxonomy asset "
                "(or load a taxonomy) first"
            )
        return cls([TaxonomyLabelEntry(*row) for row in rows], preferred, **options)

    def __len__(self) -> int:
        return len(self.concept_uris)

    def is_label(self, text: str) -> bool:
        """Whether `text` is, after normalization, a preferred or alternative label."""
        normalized = normalize_label(text)
        return normalized in self._exact or normalized in self._alternative

    def resolve(self, mention: str) -> list[Resolution]:
        """Resolve one mention to one Resolution per skill it names (empty for a blank mention).

        Order: the whole mention as a label; its parts, if every part is a label ("Python
        and SQL"); the whole by fuzzy match (so "health and safety regulation" is not torn
        apart); each part through all stages; the whole by semantic similarity.
        """
        text = mention.strip()
        if not normalize_label(text):
            return []
        whole = self._match_exact(text)
        if whole is not None:
            return [whole]
        parts = split_mention(text, self.is_label)
        if len(parts) > 1:
            exact_parts = [self._match_exact(part) for part in parts]
            if all(part is not None for part in exact_parts):
                return [part for part in exact_parts if part is not None]
        fuzzy = self._match_fuzzy(text)
        if fuzzy is not None:
            return [fuzzy]
        if len(parts) > 1:
            return [self._resolve_part(part) for part in parts]
        return [self._match_semantic(text) or Resolution(text, None, None, 0.0, "unmatched")]

    def _resolve_part(self, text: str) -> Resolution:
        return (
            self._match_exact(text)
            or self._match_fuzzy(text)
            or self._match_semantic(text)
            or Resolution(text, None, None, 0.0, "unmatched")
        )

    def _match_exact(self, text: str) -> Resolution | None:
        normalized = normalize_label(text)
        for lookup, stage, confidence in (
            (self._exact, "exact", EXACT_CONFIDENCE),
            (self._alternative, "alt_label", ALT_LABEL_CONFIDENCE),
        ):
            uris = lookup.get(normalized)
            if uris:
                return Resolution(text, uris[0], self.preferred_labels[uris[0]], confidence, stage)
        return None

    def _match_fuzzy(self, text: str) -> Resolution | None:
        key = _fuzzy_key(normalize_label(text))
        if not key or not self._fuzzy_keys:
            return None
        scores = self._label_scores(key, cutoff=self.fuzzy_threshold)
        index = int(np.argmax(scores))
        score = float(scores[index])
        if score < self.fuzzy_threshold:
            return None
        uri = self._label_concepts[index][0]
        return Resolution(text, uri, self.preferred_labels[uri], round(score / 100.0, 4), "fuzzy")

    def _label_scores(self, key: str, cutoff: float = 0.0) -> np.ndarray:
        """Similarity (0-100) of `key` to every distinct label; scores below `cutoff` may be left at 0."""
        if self.scorer in ("token_sort_ratio", "token_set_sort_mean"):
            # mean >= cutoff needs token_sort >= 2 * cutoff - 100, as token_set is at most 100.
            sort_cutoff = cutoff if self.scorer == "token_sort_ratio" else max(0.0, 2 * cutoff - 100)
            sort_scores = process.cdist(
                [_sorted_tokens(key)],
                self._sorted_keys,
                scorer=fuzz.ratio,
                processor=None,
                score_cutoff=sort_cutoff,
                dtype=np.float32,
            )[0]
            if self.scorer == "token_sort_ratio":
                return sort_scores
            candidates = np.flatnonzero(sort_scores >= sort_cutoff) if sort_cutoff > 0 else None
            set_scores = np.zeros_like(sort_scores)
            choices = self._fuzzy_keys if candidates is None else [self._fuzzy_keys[i] for i in candidates]
            if choices:
                scored = process.cdist(
                    [key], choices, scorer=fuzz.token_set_ratio, processor=None, dtype=np.float32
                )[0]
                if candidates is None:
                    set_scores = scored
                else:
                    set_scores[candidates] = scored
            return (sort_scores + set_scores) / np.float32(2.0)
        return process.cdist(
            [key],
            self._fuzzy_keys,
            scorer=_RAPIDFUZZ_SCORERS[self.scorer],
            processor=None,
            score_cutoff=cutoff,
            dtype=np.float32,
        )[0]

    def _match_semantic(self, text: str) -> Resolution | None:
        if self.embeddings is None:
            return None
        similarities = self._semantic_scores(text)
        index = int(np.argmax(similarities))
        score = float(similarities[index])
        if score < self.semantic_threshold:
            return None
        uri = self._label_concepts[index][0]
        return Resolution(text, uri, self.preferred_labels[uri], round(score, 4), "semantic")

    def _semantic_scores(self, text: str) -> np.ndarray:
        """Cosine similarity of `text` to every distinct label (label vectors embedded once)."""
        assert self.embeddings is not None
        if self._label_vectors is None:
            self._label_vectors = self._embed_labels(self.embeddings)
        query = _unit_rows(np.asarray(self.embeddings.embed([text]), np.float32))[0]
        return self._label_vectors @ query

    def _embed_labels(self, embeddings: EmbeddingBackend) -> np.ndarray:
        """Unit vectors of every distinct label, read from `vector_cache_dir` when computed before.

        Embedding ESCO's ~100k labels takes minutes, so they are cached per backend, model
        and exact label list (a changed taxonomy gets a new file).
        """
        cache_file = None
        if self.vector_cache_dir is not None:
            digest = hashlib.sha256("\n".join(self._label_texts).encode("utf-8")).hexdigest()[:20]
            model = re.sub(r"[^\w.-]+", "_", embeddings.model)
            cache_file = Path(self.vector_cache_dir) / f"{embeddings.name}-{model}-{digest}.npy"
            if cache_file.is_file():
                cached = np.load(cache_file)
                if cached.shape[0] == len(self._label_texts):
                    return cached
        vectors = _unit_rows(np.asarray(embeddings.embed(self._label_texts), np.float32))
        if cache_file is not None:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(partial, vectors)
            partial.replace(cache_file)
        return vectors

    def rank(self, query: str, limit: int | None = None) -> list[tuple[str, float]]:
        """All concepts (or the first `limit`), best first, as (concept URI, score).

        Order: concepts whose preferred label equals the query (score 1.0), then those
        with such an alternative label (0.95), then the rest by their best label's
        fuzzy score (0..1) or, with embeddings, the mean of fuzzy score and cosine
        similarity; ties go to the concept whose preferred label scores higher. A
        fuzzy score may exceed 0.95, so scores are not monotonic across that boundary.
        """
        normalized = normalize_label(query)
        if not normalized:
            return []
        label_scores = self._label_scores(_fuzzy_key(normalized)) / np.float32(100.0)
        if self.embeddings is not None:
            # The mean, not the max: each signal alone promotes its own kind of wrong label
            # (a shared word, a merely related meaning); on the ESCO benchmark the mean ranked
            # best (MRR 0.72 vs 0.64 for the max and 0.71 for cosine alone, validation splits).
            label_scores = (label_scores + self._semantic_scores(query)) / np.float32(2.0)
        concept_scores = np.maximum.reduceat(label_scores[self._pair_labels], self._concept_starts)
        preferred_scores = label_scores[self._preferred_label_of]
        tier = np.zeros(len(self.concept_uris), dtype=np.int8)
        for uri in self._alternative.get(normalized, []):
            tier[self._concept_index[uri]] = 1
        for uri in self._exact.get(normalized, []):
            tier[self._concept_index[uri]] = 2
        order = np.lexsort((-preferred_scores, -concept_scores, -tier))
        if limit is not None:
            order = order[:limit]
        confidence = {2: EXACT_CONFIDENCE, 1: ALT_LABEL_CONFIDENCE}
        return [
            (self.concept_uris[i], confidence.get(int(tier[i]), float(concept_scores[i])))
            for i in order.tolist()
        ]


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)
