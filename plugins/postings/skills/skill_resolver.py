"""Resolve free-text skill mentions to concepts of the loaded skills taxonomy.

With an embedding backend and the learned linker (`plugins/postings/skills/concept_reranker.py`, on by
default with MiniLM), a mention is linked in three steps: candidate concepts are gathered from
the nearest labels of the mention and of its sentence (a usearch index, `concept_index.py`) and
from exact label matches; the reranker scores each (meaning, spelling, label type, context);
the best is the answer when its calibrated confidence reaches the model's threshold, else
"unmatched". Stage "exact"/"alt_label" says the mention was that concept's label, "learned"
that the reranker chose it. `link_sentence` ranks concepts for a whole sentence (the sentence
itself, its n-grams that are labels, and any extracted mentions).

Without them (no embeddings, or a backend the linker was not trained for) the rule-based
stages run, cheapest and surest first: exact match on a preferred label, exact match on an
alternative label, fuzzy string match (rapidfuzz) above `fuzzy_threshold`, cosine
similarity of embeddings above `semantic_threshold` (only with an embedding backend),
else "unmatched".

Either way a mention naming several skills ("Python and SQL") is split only when the whole
is not a label itself ("health and safety", "CI/CD" stay whole), and a mention that is no label
but wraps one in words that name no skill ("strong communication skills", "knowledge of SQL") is
resolved as that label (`label_core`), under the mention as written.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from rapidfuzz import fuzz, process
from sqlalchemy.orm import Session

from domain.core.progress import progress_task
from plugins.postings.skills.concept_index import LabelVectorIndex
from plugins.postings.skills.concept_reranker import CandidateSignals, ConceptProjection, LinkerModel
from plugins.postings.skills.embeddings import EmbeddingBackend
from plugins.postings.skills.word_stems import content_stems
from plugins.postings.store.taxonomy import normalize_label, read_taxonomy_labels

EXACT_CONFIDENCE = 1.0
ALT_LABEL_CONFIDENCE = 0.95
EMBEDDING_BACKENDS = ("none", "ollama", "minilm")
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
CANDIDATES_KEPT = 3  # the linker's best concepts kept on a Resolution, for review
# Candidates per query: concepts of the nearest labels of the mention and of its sentence.
MENTION_NEIGHBOURS = 64
CONTEXT_NEIGHBOURS = 32
QUERY_MEMO_SIZE = 20_000  # query vectors kept (a sentence is embedded once for all its mentions)
MAX_NGRAM_WORDS = 6  # link_sentence looks up every n-gram of up to this many words as a label
# link_sentence weighs a label n-gram's candidates by this (a mention's and the sentence's weigh 1):
# an n-gram that is a label ("design", "data") is scored as an exact mention and its concept
# outranked the skills the sentence names. Chosen on independent job-ad sentences
# (training/sentence_merge.py, docs/skill-linking.md), not on the benchmark.
NGRAM_WEIGHT = 0.25

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
class Candidate:
    """One of the learned linker's best concepts for a mention, with the reranker's probability."""

    concept_uri: str
    concept_label: str
    probability: float


@dataclass(frozen=True)
class Resolution:
    """One resolved part of a mention; `concept_uri` is None when the stage is "unmatched".

    candidates: the learned linker's best `CANDIDATES_KEPT` concepts, best first (empty without the
    linker). Kept for an unmatched mention too: a reviewer picks from them (on Decorte TECH
    validation, 33 of the 40 spans left unmatched have their gold concept among the three).
    """

    mention: str
    concept_uri: str | None
    concept_label: str | None
    confidence: float
    stage: str
    candidates: tuple[Candidate, ...] = ()


# Separators between several skills in one mention. "&" only with spaces around it
# ("R&D" stays whole); "/" is handled separately below.
_SEPARATOR = re.compile(r"\s*(?:[,;|/]|(?<=\s)&(?=\s)|\band\b|\bor\b|\bas well as\b)\s*", re.IGNORECASE)
# Words around a skill that name none ("strong communication skills", "knowledge of SQL"): a mention
# that is no label, but is one without them, is resolved as that label (`SkillResolver.label_core`).
_GENERIC_LEAD = re.compile(
    r"^(?:(?:strong|good|excellent|solid|proven|sound|deep|basic|advanced|extensive|practical|hands-on)\s+)*"
    r"(?:(?:knowledge|understanding|experience|expertise|proficiency|familiarity|skills?)\s+(?:of|in|with)\s+)?",
    re.IGNORECASE,
)
_GENERIC_TAIL = re.compile(r"\s+(?:skills?|abilities|knowledge|experience|expertise)$", re.IGNORECASE)
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


def likely_queries(mention: str) -> list[str]:
    """The texts the linker may embed for `mention`, guessed without the taxonomy (to encode them
    together ahead of it): the mention, its core without words that name no skill ("strong
    communication skills" -> "communication"), and the parts of either when it names several skills.
    The resolver may still embed a text this misses (parts that form a label together)."""
    text = mention.strip()
    core = _GENERIC_TAIL.sub("", _GENERIC_LEAD.sub("", text.strip(" .,;:!?"))).strip()
    queries = [text, core]
    for whole in (text, core):
        parts = split_mention(whole)
        if len(parts) > 1:
            queries += parts
    return [query for query in dict.fromkeys(queries) if normalize_label(query)]


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
        linker: LinkerModel | None = None,
        link_threshold: float | None = None,
    ) -> None:
        if scorer not in FUZZY_SCORERS:
            raise ValueError(f"scorer must be one of {', '.join(FUZZY_SCORERS)}, not {scorer!r}")
        self.fuzzy_threshold = fuzzy_threshold
        self.semantic_threshold = semantic_threshold
        self.embeddings = embeddings
        self.vector_cache_dir = vector_cache_dir
        self.scorer = scorer
        if linker is not None and embeddings is None:
            raise ValueError("the learned linker needs an embedding backend")
        self.linker = linker
        # The linker's learned map over the encoder's vectors (labels and queries alike), if it has one;
        # set before the label index is first built (it is built over projected vectors).
        self.projection: ConceptProjection | None = linker.projection if linker is not None else None
        self.link_threshold = (
            link_threshold if link_threshold is not None else (linker.threshold if linker else 1.0)
        )
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
        self._projected_label_vectors: np.ndarray | None = None
        self._label_ids = label_index  # normalized label -> label id
        self._concept_ends = np.append(self._concept_starts[1:], len(self._pair_labels))
        by_label = np.argsort(self._pair_labels, kind="stable")
        self._label_pair_concepts = self._pair_concepts[by_label]
        self._label_starts = np.searchsorted(
            self._pair_labels[by_label], np.arange(len(self._label_texts) + 1)
        )
        self._index: LabelVectorIndex | None = None
        self._concept_vectors: np.ndarray | None = None  # unit mean of each concept's label vectors
        self._query_vectors: dict[str, np.ndarray] = {}
        self._prior = np.zeros(len(self.concept_uris), dtype=np.float32)
        self._label_stems: dict[int, frozenset[str]] = {}  # label id -> its content stems, on first use
        self._label_words = np.array([len(text.split()) for text in self._label_texts], dtype=np.float32)
        self._prior_for: int | None = None

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

    def label_core(self, text: str) -> str:
        """`text`, or the label it wraps in words that name no skill when only that is a label.

        "communication skills" -> "communication", "proven project management skills" -> "project
        management", "knowledge of SQL" -> "SQL"; "communication skills" stays whole in a taxonomy
        that has it as a label. The linker left such mentions unmatched: the wrapping words spread
        its confidence over the concepts named like them.
        """
        if self.is_label(text):
            return text
        core = _GENERIC_TAIL.sub("", _GENERIC_LEAD.sub("", text.strip(" .,;:!?"))).strip()
        return core if core and self.is_label(core) else text

    def resolve(self, mention: str, context: str | None = None) -> list[Resolution]:
        """Resolve one mention to one Resolution per skill it names (empty for a blank mention).

        context: the sentence the mention comes from; the learned linker weighs it (without
        the linker it is not used).

        Rule-based order: the whole mention as a label; its parts, if every part is a label
        ("Python and SQL"); the whole by fuzzy match (so "health and safety regulation" is not
        torn apart); each part through all stages; the whole by semantic similarity. With the
        linker: the parts when every part is a label, else the whole, else (when the whole
        stays below the threshold) each part.
        """
        text = mention.strip()
        if not normalize_label(text):
            return []
        core = self.label_core(text)
        if core != text:
            return [replace(part, mention=text) for part in self.resolve(core, context)]
        if self.linker is not None:
            return self._resolve_linked(text, context)
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

    # --- the learned linker -------------------------------------------------------------

    def _rank_linked(self, query: str, limit: int | None, context: str | None) -> list[tuple[str, float]]:
        concepts, probabilities, _ = self.link(query, context)
        ranked = [
            (self.concept_uris[c], round(float(p), 6))
            for c, p in zip(concepts.tolist(), probabilities.tolist(), strict=True)
        ]
        if limit is not None and len(ranked) >= limit:
            return ranked[:limit]
        # A full ranking reads every label anyway: the rest by exact cosine, best label first.
        assert self._label_vectors is not None
        cosine = self._label_vectors @ self._embed_queries([query])[0]
        concept_scores = np.maximum.reduceat(cosine[self._pair_labels], self._concept_starts)
        concept_scores[concepts] = np.inf
        rest = np.argsort(-concept_scores, kind="stable")[len(concepts) :]
        ranked += [(self.concept_uris[c], 0.0) for c in rest.tolist()]
        return ranked if limit is None else ranked[:limit]

    def _resolve_linked(self, text: str, context: str | None) -> list[Resolution]:
        parts = split_mention(text, self.is_label)
        if len(parts) > 1 and not self.is_label(text) and all(self.is_label(part) for part in parts):
            return [self._best_linked(part, context) for part in parts]
        whole = self._best_linked(text, context)
        if whole.concept_uri is not None or len(parts) < 2:
            return [whole]
        return [self._best_linked(part, context) for part in parts]

    def _best_linked(self, text: str, context: str | None) -> Resolution:
        concepts, probabilities, tiers, features = self.link_scored(text, context)
        confidence = self.top_confidence(probabilities, tiers, features[0] if len(features) else None)
        candidates = tuple(
            Candidate(self.concept_uris[c], self.preferred_labels[self.concept_uris[c]], round(float(p), 4))
            for c, p in zip(
                concepts[:CANDIDATES_KEPT].tolist(), probabilities[:CANDIDATES_KEPT].tolist(), strict=True
            )
        )
        # A mention that is the top concept's own label is never left unmatched (as in the rule-based
        # stages): on a small taxonomy the ESCO-calibrated confidence can sit below the threshold.
        if not len(concepts) or (confidence < self.link_threshold and not tiers[0]):
            return Resolution(text, None, None, 0.0, "unmatched", candidates)
        uri = self.concept_uris[concepts[0]]
        stage = {2: "exact", 1: "alt_label"}.get(int(tiers[0]), "learned")
        return Resolution(text, uri, self.preferred_labels[uri], round(confidence, 4), stage, candidates)

    def top_confidence(
        self, probabilities: np.ndarray, tiers: np.ndarray, top: np.ndarray | None = None
    ) -> float:
        """How sure the linker is of the best candidate of a `link()` ranking: what the threshold is
        set on and what a Resolution carries (the linker's acceptance model, see concept_reranker).
        top: the best candidate's reranker features (`link_scored`), for an acceptance model that
        reads them."""
        assert self.linker is not None
        return self.linker.top_confidence(probabilities, tiers, top)

    def link(
        self, text: str, context: str | None = None, kind: str | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Candidate concepts (indices) for `text`, best first, with probabilities and label tiers.

        kind: which reranking model scores them: "mention" (with a context), "bare_mention"
        (without) or "sentence" (the text is a whole sentence); by default from `context`.
        """
        concepts, probabilities, tiers, _ = self.link_scored(text, context, kind)
        return concepts, probabilities, tiers

    def confidence_of(self, text: str, context: str | None = None) -> tuple[np.ndarray, float]:
        """The candidates of a mention best first, and the confidence `resolve` weighs its best one by."""
        concepts, probabilities, tiers, features = self.link_scored(text, context)
        top = features[0] if len(features) else None
        return concepts, self.top_confidence(probabilities, tiers, top) if len(concepts) else 0.0

    def link_scored(
        self, text: str, context: str | None = None, kind: str | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`link`, and the candidates' reranker features in the same order (one row each)."""
        if self.linker is None:
            raise ValueError("no linker model: build the resolver with linker=load_linker_model()")
        kind = kind or ("mention" if context and context.strip() != text.strip() else "bare_mention")
        texts = [text] if kind != "mention" else [text, context or text]
        vectors = self._embed_queries(texts)
        signals, concepts, tiers = self.candidate_signals(
            text, vectors[0], vectors[-1] if kind == "mention" else None
        )
        features = signals.features()
        probabilities = self.linker.model(kind).probabilities(features)
        order = np.argsort(-probabilities, kind="stable")
        return concepts[order], probabilities[order], tiers[order], features[order]

    def candidate_signals(
        self,
        text: str,
        query: np.ndarray,
        context: np.ndarray | None,
        hidden_labels: frozenset[int] = frozenset(),
    ) -> tuple[CandidateSignals, np.ndarray, np.ndarray]:
        """The candidate concepts of one query, their reranking signals and label tiers.

        Candidates: the concepts of the `MENTION_NEIGHBOURS` labels nearest the query, of the
        `CONTEXT_NEIGHBOURS` nearest the context, and those the query names exactly. Without a
        context, the context signals repeat the query's (the models are trained that way).

        hidden_labels: label ids treated as absent from the taxonomy (training only: an ESCO
        alternative label used as a mention must not find itself, nor its re-spellings; see
        training/train_skill_linker). A concept whose preferred label is hidden gets, as
        `cos_preferred`, its best remaining label's cosine.
        """
        index = self.label_index()
        queries = np.stack([query] if context is None else [query, context])
        depth = MENTION_NEIGHBOURS + len(hidden_labels)
        label_ids, _ = index.search(queries, depth)
        if hidden_labels:
            hidden = np.fromiter(hidden_labels, np.int64)
            label_ids = [row[~np.isin(row, hidden)][:MENTION_NEIGHBOURS] for row in label_ids]
        found = [label_ids[0][label_ids[0] >= 0]]
        if context is not None:
            found.append(label_ids[1][:CONTEXT_NEIGHBOURS][label_ids[1][:CONTEXT_NEIGHBOURS] >= 0])
        normalized = normalize_label(text)
        tier_of: dict[int, int] = {}
        if self._label_ids.get(normalized) not in hidden_labels:
            for uri in self._alternative.get(normalized, []):
                tier_of[self._concept_index[uri]] = 1
            for uri in self._exact.get(normalized, []):
                tier_of[self._concept_index[uri]] = 2
        concepts = np.unique(
            np.concatenate(
                [*(self._concepts_of_labels(ids) for ids in found), np.fromiter(tier_of, np.int64)]
            )
        )
        # Every label of every candidate, as (candidate position, label id) pairs.
        starts, ends = self._concept_starts[concepts], self._concept_ends[concepts]
        owner = np.repeat(np.arange(len(concepts)), ends - starts)
        labels = self._pair_labels[_ranges(starts, ends)]
        centroids_of_hidden: dict[int, np.ndarray] = {}
        if hidden_labels:
            keep = ~np.isin(labels, np.fromiter(hidden_labels, np.int64))
            changed = np.unique(owner[~keep])
            owner, labels = owner[keep], labels[keep]
            assert self._label_vectors is not None
            for position in changed.tolist():  # each such concept's meaning without the hidden label
                own = labels[owner == position]
                centroids_of_hidden[position] = _unit_rows(self._label_vectors[own].sum(axis=0)[None])[0]
            if len(np.unique(owner)) != len(concepts):  # a concept left with no label: not a candidate
                kept = np.unique(owner)
                concepts = concepts[kept]
                owner = np.searchsorted(kept, owner)
                centroids_of_hidden = {
                    int(np.searchsorted(kept, p)): v for p, v in centroids_of_hidden.items() if p in kept
                }
        vectors = self._label_vectors
        assert vectors is not None
        cos_mention = _group_max(vectors[labels] @ query, owner, len(concepts))
        cos_context = (
            cos_mention if context is None else _group_max(vectors[labels] @ context, owner, len(concepts))
        )
        key = _fuzzy_key(normalized)
        fuzzy = np.zeros(len(concepts), np.float32)
        if key:
            label_scores = _token_set_sort_mean(
                key, [self._fuzzy_keys[i] for i in labels], [self._sorted_keys[i] for i in labels]
            )
            fuzzy = _group_max(label_scores / np.float32(100.0), owner, len(concepts))
        tiers = np.array([tier_of.get(int(c), 0) for c in concepts], dtype=np.int8)
        stem_jaccard, stem_cover, head_match = self._word_overlap(normalized, labels, owner, len(concepts))
        adapter = self.linker.adapter if self.linker is not None else None
        if self.projection is not None and self.projection.use == "feature":
            projected = self._projected_labels()[labels] @ self.projection.apply(query[None])[0]
            cos_adapted = _group_max(projected, owner, len(concepts))
        elif adapter is not None:
            cos_adapted = _group_max(vectors[labels] @ adapter.apply(query), owner, len(concepts))
        else:
            cos_adapted = cos_mention
        prior = self._concept_prior()[concepts]
        assert self._concept_vectors is not None
        centroids = self._concept_vectors[concepts]
        for position, centroid in centroids_of_hidden.items():
            centroids[position] = centroid
        preferred = self._preferred_label_of[concepts]
        cos_preferred = vectors[preferred] @ query
        if hidden_labels:
            gone = np.isin(preferred, np.fromiter(hidden_labels, np.int64))
            cos_preferred = np.where(gone, cos_mention, cos_preferred)
        signals = CandidateSignals(
            cos_mention=cos_mention,
            cos_preferred=cos_preferred,
            cos_context=cos_context,
            cos_concept=centroids @ query,
            cos_concept_context=centroids @ (query if context is None else context),
            fuzzy=fuzzy,
            tier=tiers,
            prior=prior,
            stem_jaccard=stem_jaccard,
            stem_cover=stem_cover,
            head_match=head_match,
            label_words=self._label_words[self._preferred_label_of[concepts]],
            cos_adapted=cos_adapted,
        )
        return signals, concepts, tiers

    def _word_overlap(
        self, normalized: str, labels: np.ndarray, owner: np.ndarray, count: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per candidate, over its labels: best stem Jaccard, best share of the mention's stems
        covered, and whether the mention's head (last content word) is in a label."""
        jaccard = np.zeros(count, np.float32)
        cover = np.zeros(count, np.float32)
        head = np.zeros(count, np.float32)
        stems = content_stems(normalized)
        if not stems:
            return jaccard, cover, head
        mine, last = frozenset(stems), stems[-1]
        label_stems = self._label_stems
        for position, label in zip(owner.tolist(), labels.tolist(), strict=True):
            theirs = label_stems.get(label)
            if theirs is None:
                theirs = label_stems[label] = frozenset(content_stems(self._fuzzy_keys[label]))
            shared = len(mine & theirs)
            if shared:
                jaccard[position] = max(jaccard[position], shared / len(mine | theirs))
                cover[position] = max(cover[position], shared / len(mine))
                if last in theirs:
                    head[position] = 1.0
        return jaccard, cover, head

    def link_sentence(self, sentence: str, mentions: Sequence[str] = ()) -> list[tuple[str, float]]:
        """Concepts a sentence names, best first, as (concept URI, confidence).

        Sources, each scored by the linker: the sentence as a query; `mentions`, the skills an
        extractor found in it; and every n-gram of the sentence that is a taxonomy label (up to
        `MAX_NGRAM_WORDS` words) and no mention, its probabilities weighed by `NGRAM_WEIGHT`. A
        concept found by several keeps its best score. Scores below the threshold are kept (this
        is a ranking).
        """
        if not normalize_label(sentence):
            return []
        best: dict[int, float] = {}

        def keep(concepts: np.ndarray, probabilities: np.ndarray) -> None:
            for concept, probability in zip(concepts.tolist(), probabilities.tolist(), strict=True):
                if probability > best.get(concept, -1.0):
                    best[concept] = probability

        keep(*self.link(sentence, kind="sentence")[:2])
        said = list(dict.fromkeys(m.strip() for m in mentions if m.strip()))
        for query in said:
            keep(*self.link(query, sentence, kind="mention")[:2])
        named = {normalize_label(m) for m in said}
        for query in self.label_ngrams(sentence):
            if query not in named:
                concepts, probabilities, _ = self.link(query, sentence, kind="mention")
                keep(concepts, NGRAM_WEIGHT * probabilities)
        ranked = sorted(best.items(), key=lambda item: -item[1])
        return [(self.concept_uris[concept], probability) for concept, probability in ranked]

    def label_ngrams(self, sentence: str) -> list[str]:
        """The n-grams of `sentence` (up to `MAX_NGRAM_WORDS` words) that are labels, longest first."""
        words = sentence.split()
        found: list[str] = []
        for size in range(min(MAX_NGRAM_WORDS, len(words)), 0, -1):
            for start in range(len(words) - size + 1):
                ngram = " ".join(words[start : start + size])
                if self.is_label(ngram):
                    found.append(normalize_label(ngram))
        return list(dict.fromkeys(found))

    def label_index(self) -> LabelVectorIndex:
        """The nearest-neighbour index over label vectors, built (or read from the cache) on first use."""
        if self._index is None:
            assert self.embeddings is not None
            if self._label_vectors is None:
                self._label_vectors = self._embed_labels(self.embeddings)
            if self._projects_space():
                assert self.projection is not None
                self._label_vectors = self.projection.apply(self._label_vectors)
            self._index = LabelVectorIndex(self._label_vectors, cache_dir=self.vector_cache_dir)
            sums = np.add.reduceat(self._label_vectors[self._pair_labels], self._concept_starts, axis=0)
            self._concept_vectors = _unit_rows(sums)
        return self._index

    def _concept_prior(self) -> np.ndarray:
        """The linker's prior count of each concept (0 without a linker), matched by preferred label
        (`LinkerModel.prior_count`)."""
        key = id(self.linker)
        if self._prior_for != key:
            if self.linker is None:
                self._prior = np.zeros(len(self.concept_uris), dtype=np.float32)
            else:
                prior_count, labels = self.linker.prior_count, self.preferred_labels
                self._prior = np.array(
                    [prior_count(uri, labels[uri]) for uri in self.concept_uris], np.float32
                )
            self._prior_for = key
        return self._prior

    def _concepts_of_labels(self, label_ids: np.ndarray) -> np.ndarray:
        if not len(label_ids):
            return np.zeros(0, np.int64)
        starts, ends = self._label_starts[label_ids], self._label_starts[label_ids + 1]
        return self._label_pair_concepts[_ranges(starts, ends)]

    def _embed_queries(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of `texts`; each distinct text embedded once while it stays in a bounded memo."""
        assert self.embeddings is not None
        distinct = list(dict.fromkeys(texts))
        found = {text: self._query_vectors[text] for text in distinct if text in self._query_vectors}
        missing = [text for text in distinct if text not in found]
        if missing:
            if len(self._query_vectors) + len(missing) > QUERY_MEMO_SIZE:
                self._query_vectors.clear()  # the texts found above are kept in `found` for this call
            query_array = getattr(self.embeddings, "query_array", None)  # MiniLM: encoded once a posting
            vectors = (
                _unit_rows(query_array(missing))
                if query_array
                else embedding_matrix(self.embeddings, missing)
            )
            fresh = dict(zip(missing, vectors, strict=True))
            self._query_vectors.update(fresh)
            found.update(fresh)
        stacked = np.stack([found[text] for text in texts])
        return self.projection.apply(stacked) if self._projects_space() else stacked  # type: ignore[union-attr]

    def _projects_space(self) -> bool:
        return self.projection is not None and self.projection.use == "space"

    def _projected_labels(self) -> np.ndarray:
        """Every label vector through the projection, once (the "feature" use: `cos_adapted`)."""
        if self._projected_label_vectors is None:
            assert self.projection is not None and self._label_vectors is not None
            self._projected_label_vectors = self.projection.apply(self._label_vectors)
        return self._projected_label_vectors

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
        if self._projects_space():  # the label vectors are projected: compare like with like
            self.label_index()
            query = self._embed_queries([text])[0]
        else:
            if self._label_vectors is None:
                self._label_vectors = self._embed_labels(self.embeddings)
            query = embedding_matrix(self.embeddings, [text])[0]
        assert self._label_vectors is not None
        return self._label_vectors @ query

    def _embed_labels(self, embeddings: EmbeddingBackend) -> np.ndarray:
        """Unit vectors of every distinct label, read from `vector_cache_dir` when computed before.

        Embedding ESCO's ~98,000 distinct labels takes minutes, so they are kept per backend, model,
        encoder version and exact label list (the digest of the texts embedded: a changed taxonomy
        gets a new file, an unchanged one reloaded under a new content hash finds its vectors).
        """
        cache_file = None
        if self.vector_cache_dir is not None:
            digest = hashlib.sha256("\n".join(self._label_texts).encode("utf-8")).hexdigest()[:20]
            model = re.sub(r"[^\w.-]+", "_", embeddings.model)
            version = re.sub(r"[^\w.-]+", "_", getattr(embeddings, "encoder_version", ""))
            name = "-".join(part for part in (embeddings.name, model, version, digest) if part)
            cache_file = Path(self.vector_cache_dir) / f"{name}.npy"
            if cache_file.is_file():
                cached = np.load(cache_file)
                if cached.shape[0] == len(self._label_texts):
                    return cached
        vectors = embed_labels(embeddings, self._label_texts, cache_file)
        if cache_file is not None:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(f".{os.getpid()}.tmp.npy")
            np.save(partial, vectors)
            partial.replace(cache_file)
        return vectors

    def rank(
        self, query: str, limit: int | None = None, context: str | None = None
    ) -> list[tuple[str, float]]:
        """All concepts (or the first `limit`), best first, as (concept URI, score).

        With the linker: its candidates by confidence, then (when more are asked for) every
        other concept by cosine similarity to the query, with score 0.0. Without it, the
        order is: concepts whose preferred label equals the query (score 1.0), then those
        with such an alternative label (0.95), then the rest by their best label's
        fuzzy score (0..1) or, with embeddings, the mean of fuzzy score and cosine
        similarity; ties go to the concept whose preferred label scores higher. A
        fuzzy score may exceed 0.95, so scores are not monotonic across that boundary.
        """
        query = self.label_core(query)
        normalized = normalize_label(query)
        if not normalized:
            return []
        if self.linker is not None:
            return self._rank_linked(query, limit, context)
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


TIMED_LABELS = 512  # embedded first, and timed, to say up front what the whole taxonomy costs
LABEL_CHUNK = 4_096  # labels embedded between two progress updates
NOTE_FROM_SECONDS = 20.0  # a first embedding estimated to take this long says so up front


def embedding_matrix(embeddings: EmbeddingBackend, texts: Sequence[str]) -> np.ndarray:
    """Unit vectors of `texts` as one float32 matrix (MiniLM's `embed_array` skips the lists of floats)."""
    embed_array = getattr(embeddings, "embed_array", None)
    matrix = embed_array(texts) if embed_array else np.asarray(embeddings.embed(list(texts)), np.float32)
    return _unit_rows(np.asarray(matrix, np.float32).reshape(len(texts), -1))


def embed_labels(embeddings: EmbeddingBackend, texts: Sequence[str], kept_in: Path | None) -> np.ndarray:
    """Unit vectors of a taxonomy's labels, with progress (`domain.core.progress`) when there are many:
    the first `TIMED_LABELS` are timed to say what the rest will cost, then the rest in chunks.
    Taxonomy order mixes short and long labels, so the first chunk's rate holds for the rest."""
    if len(texts) <= TIMED_LABELS:
        return embedding_matrix(embeddings, texts)
    started = time.monotonic()
    parts = [embedding_matrix(embeddings, texts[:TIMED_LABELS])]
    estimate = (time.monotonic() - started) * len(texts) / TIMED_LABELS
    kept = f"kept in {kept_in.parent}" if kept_in is not None else "not kept: no cache directory"
    note = (  # a small taxonomy (the demo's, a few seconds) needs no warning, only its counts
        f"embedding {len(texts):,} labels with {embeddings.model}, about {rough_duration(estimate)} "
        f"on this machine now, once per taxonomy version ({kept})"
        if estimate >= NOTE_FROM_SECONDS
        else ""
    )
    with progress_task("label vectors", len(texts), "labels", note, started=started) as task:
        task.advance(TIMED_LABELS)
        for start in range(TIMED_LABELS, len(texts), LABEL_CHUNK):
            parts.append(embedding_matrix(embeddings, texts[start : start + LABEL_CHUNK]))
            task.advance(len(parts[-1]))
    return np.concatenate(parts)


def rough_duration(seconds: float) -> str:
    """`40 s`, `6 min`, `1.5 h`: an estimate, said as one."""
    if seconds < 10:
        return f"{max(1, round(seconds))} s"
    if seconds < 90:
        return f"{round(seconds / 10) * 10} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """starts[0]..ends[0]-1, starts[1]..ends[1]-1, ... in one array, without a Python loop."""
    lengths = ends - starts
    offsets = np.repeat(starts - np.cumsum(np.r_[0, lengths[:-1]]), lengths)
    return np.arange(int(lengths.sum())) + offsets


def _group_max(values: np.ndarray, groups: np.ndarray, count: int) -> np.ndarray:
    """The maximum of `values` per group (groups numbered 0..count-1, each non-empty)."""
    out = np.full(count, -np.inf, dtype=np.float32)
    np.maximum.at(out, groups, values.astype(np.float32))
    return out


def _token_set_sort_mean(key: str, keys: list[str], sorted_keys: list[str]) -> np.ndarray:
    """The default fuzzy scorer (0-100) of `key` against a few labels."""
    set_scores = process.cdist([key], keys, scorer=fuzz.token_set_ratio, processor=None, dtype=np.float32)[0]
    sort_scores = process.cdist(
        [_sorted_tokens(key)], sorted_keys, scorer=fuzz.ratio, processor=None, dtype=np.float32
    )[0]
    return (set_scores + sort_scores) / np.float32(2.0)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)
