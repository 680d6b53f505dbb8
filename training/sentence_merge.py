"""How the linker's sentence-level sources are merged, measured on independent job-ad sentences.

    python -m training.sentence_merge [--data-dir D] [--cache DIR] [--model PATH] [--sentences N]

Issue 43: end to end on Decorte TECH validation the linker scores well below its span-given figure
(0.593 against 0.747 MRR), and even with the gold spans as the mentions it stays at 0.643, so part
of the loss is in `SkillResolver.link_sentence`, which merges three sources of candidates (the
sentence as a query, every n-gram of it that is a taxonomy label, the extractor's mentions) by
keeping each concept's best probability. This script measures merge rules on sentences that know no
benchmark answer, to choose one before the benchmark is run:

- **Sentences**: SkillSpan **dev** sentences (never read by the linker's trainer; the context tagger
  read them to choose its epoch), those that are the text of a Decorte validation sentence dropped
  (their text only is read, for that). Each skill or knowledge span that is an ESCO label stays as
  written (gold: its concepts); every other span (at most `MOST_SPANS`) is replaced by an alternative
  label of a concept sampled from ESCO, which is hidden from the taxonomy with its re-spellings while
  the sentence is scored (gold: that concept), as the trainer hides its `esco_alt` mentions. So about
  the share of SkillSpan's spans that are labels (13 %) can be found by their label, the rest only
  through their meaning, as in a posting.
- **Mentions**: the shipped tagger's mentions of the sentence (as the benchmark's end-to-end row), and
  the spans themselves (as its gold-spans row).
- **Figures**: MRR and RP@k over sentences, ranking at most `RANK_DEPTH` concepts.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from plugins.postings.skills.concept_reranker import DEFAULT_MODEL_PATH, load_linker_model
from plugins.postings.skills.embeddings import MiniLMEmbeddings, RememberingEmbeddings
from plugins.postings.skills.skill_extraction import sentence_mentions
from plugins.postings.skills.skill_resolver import SkillResolver
from plugins.postings.store.taxonomy import normalize_label
from training.independent_data import (
    ESCO_FILE,
    benchmark_sentence_keys,
    label_lookup,
    match_label,
    random_alt_label,
    read_esco,
    read_skillspan_train,
    sample_concepts,
)
from training.linking_data import data_dir
from training.linking_evaluation import RANK_DEPTH, ranking_metrics
from training.train_skill_linker import build_resolver, hidden_labels, respellings

SKILLSPAN_DEV_FILE = Path("skillspan") / "dev.json"
SEED = 43
MOST_SPANS = 4


@dataclass
class Query:
    """One source's candidates for a sentence: concept indices and probabilities, best first."""

    source: str  # "sentence", "ngram" or "mention"
    text: str
    concepts: np.ndarray
    probabilities: np.ndarray
    tiers: np.ndarray
    confidence: float  # the acceptance model's confidence in the best candidate


@dataclass
class Scored:
    sentence: str
    gold: set[int]
    sentence_query: Query
    ngrams: list[Query] = field(default_factory=list)
    tagged: list[Query] = field(default_factory=list)
    spans: list[Query] = field(default_factory=list)


def framed_sentences(root: Path, count: int) -> list[tuple[str, list[str], set[str], list[str]]]:
    """(sentence, its spans as now written, gold URIs, labels to hide) for `count` SkillSpan dev
    sentences with at least one span."""
    concepts = read_esco(root / ESCO_FILE)
    lookup = label_lookup(concepts)
    sentences, _ = read_skillspan_train(root / SKILLSPAN_DEV_FILE, benchmark_sentence_keys(root))
    with_spans = [s for s in sentences if any(span in s.text for span in s.spans)]
    rng = random.Random(SEED)
    pool = sample_concepts(concepts, len(concepts), SEED)
    framed = []
    for sentence in rng.sample(with_spans, min(count, len(with_spans))):
        text, written, gold, hidden = sentence.text, [], set(), []
        for span in list(dict.fromkeys(s for s in sentence.spans if s in sentence.text))[:MOST_SPANS]:
            matched = match_label(span, lookup)
            if matched is not None:
                written.append(span)
                gold |= matched[1]
                continue
            concept, alt = random_alt_label(rng, pool)
            if span not in text:
                continue
            text = text.replace(span, alt, 1)
            written.append(alt)
            gold.add(concept.uri)
            hidden.append(normalize_label(alt))
        if gold:
            framed.append((text, written, gold, hidden))
    return framed


def scored_query(
    resolver: SkillResolver, source: str, text: str, context: str | None, kind: str, hidden: frozenset[int]
) -> Query:
    texts = [text] if context is None else [text, context]
    vectors = resolver._embed_queries(texts)
    signals, concepts, tiers = resolver.candidate_signals(
        text, vectors[0], None if context is None else vectors[1], hidden
    )
    assert resolver.linker is not None
    features = signals.features()
    probabilities = resolver.linker.model(kind).probabilities(features)
    order = np.argsort(-probabilities, kind="stable")
    concepts, probabilities, tiers = concepts[order], probabilities[order], tiers[order]
    confidence = resolver.top_confidence(probabilities, tiers, features[order[0]]) if len(concepts) else 0.0
    return Query(source, text, concepts, probabilities, tiers, confidence)


def score_sentences(resolver: SkillResolver, framed: list, copies: dict) -> list[Scored]:
    scored = []
    for text, written, gold_uris, hidden_texts in framed:
        hidden = hidden_labels(resolver, hidden_texts, copies)
        gold = {resolver._concept_index[u] for u in gold_uris if u in resolver._concept_index}
        item = Scored(text, gold, scored_query(resolver, "sentence", text, None, "sentence", hidden))
        for ngram in resolver.label_ngrams(text):
            if resolver._label_ids.get(ngram) in hidden:
                continue
            item.ngrams.append(scored_query(resolver, "ngram", ngram, text, "mention", hidden))
        for mention in dict.fromkeys(m.strip() for m in sentence_mentions(text) if m.strip()):
            item.tagged.append(scored_query(resolver, "mention", mention, text, "mention", hidden))
        for span in dict.fromkeys(written):
            item.spans.append(scored_query(resolver, "mention", span, text, "mention", hidden))
        scored.append(item)
    return scored


def _words(text: str) -> list[str]:
    return normalize_label(text).split()


def _inside(short: str, long: str) -> bool:
    """Whether the words of `short` occur, in order and together, in `long` (and it is shorter)."""
    a, b = _words(short), _words(long)
    return len(a) < len(b) and any(b[i : i + len(a)] == a for i in range(len(b) - len(a) + 1))


Merge = Callable[[Scored, list[Query]], dict[int, float]]


def merge_max(item: Scored, mentions: list[Query], ngrams: Sequence[Query] | None = None) -> dict[int, float]:
    """Today's rule: every source's candidates, each concept at its best probability."""
    best: dict[int, float] = {}
    for query in [item.sentence_query, *(item.ngrams if ngrams is None else ngrams), *mentions]:
        for concept, probability in zip(query.concepts.tolist(), query.probabilities.tolist(), strict=True):
            if probability > best.get(concept, -1.0):
                best[concept] = probability
    return best


def maximal_ngrams(item: Scored, mentions: list[Query]) -> list[Query]:
    """The label n-grams that are inside no longer label n-gram and no mention."""
    longer = [q.text for q in item.ngrams] + [q.text for q in mentions]
    return [q for q in item.ngrams if not any(_inside(q.text, other) for other in longer)]


def merge_maximal(item: Scored, mentions: list[Query]) -> dict[int, float]:
    return merge_max(item, mentions, maximal_ngrams(item, mentions))


def merge_no_ngrams(item: Scored, mentions: list[Query]) -> dict[int, float]:
    return merge_max(item, mentions, [])


def merge_noisy_or(item: Scored, mentions: list[Query]) -> dict[int, float]:
    """A concept several sources find gains: 1 - prod(1 - p)."""
    miss: dict[int, float] = {}
    for query in [item.sentence_query, *item.ngrams, *mentions]:
        for concept, probability in zip(query.concepts.tolist(), query.probabilities.tolist(), strict=True):
            miss[concept] = miss.get(concept, 1.0) * (1.0 - probability)
    return {concept: 1.0 - value for concept, value in miss.items()}


def merge_confidence(item: Scored, mentions: list[Query]) -> dict[int, float]:
    """Each query's probabilities times its acceptance confidence (a query sure of nothing counts less);
    the sentence query as it is."""
    best = {
        c: p
        for c, p in zip(
            item.sentence_query.concepts.tolist(), item.sentence_query.probabilities.tolist(), strict=True
        )
    }
    for query in [*item.ngrams, *mentions]:
        for concept, probability in zip(query.concepts.tolist(), query.probabilities.tolist(), strict=True):
            value = probability * query.confidence
            if value > best.get(concept, -1.0):
                best[concept] = value
    return best


def merge_maximal_noisy_or(item: Scored, mentions: list[Query]) -> dict[int, float]:
    kept = maximal_ngrams(item, mentions)
    miss: dict[int, float] = {}
    for query in [item.sentence_query, *kept, *mentions]:
        for concept, probability in zip(query.concepts.tolist(), query.probabilities.tolist(), strict=True):
            miss[concept] = miss.get(concept, 1.0) * (1.0 - probability)
    return {concept: 1.0 - value for concept, value in miss.items()}


def merge_ngrams_scaled(item: Scored, mentions: list[Query], factor: float = 0.5) -> dict[int, float]:
    """As today, the label n-grams' probabilities times `factor`."""
    best = merge_max(item, mentions, [])
    for query in item.ngrams:
        for concept, probability in zip(query.concepts.tolist(), query.probabilities.tolist(), strict=True):
            if factor * probability > best.get(concept, -1.0):
                best[concept] = factor * probability
    return best


def merge_ngrams_last(item: Scored, mentions: list[Query]) -> dict[int, float]:
    """The sentence query's and the mentions' concepts first (best probability), then the concepts only
    a label n-gram found, by their probability (a recall fallback for labels the extractor missed)."""
    best = merge_max(item, mentions, [])
    for query in item.ngrams:
        for concept, probability in zip(query.concepts.tolist(), query.probabilities.tolist(), strict=True):
            if concept not in best or best[concept] < 0:
                best[concept] = max(best.get(concept, -2.0), probability - 1.0)
    return best


def merge_ngrams_last_maximal(item: Scored, mentions: list[Query]) -> dict[int, float]:
    kept = Scored(item.sentence, item.gold, item.sentence_query, maximal_ngrams(item, mentions))
    return merge_ngrams_last(kept, mentions)


def merge_weighted(item: Scored, mentions: list[Query], sentence: float, ngram: float) -> dict[int, float]:
    """Each source's probabilities times its weight (mentions 1), each concept at its best."""
    best: dict[int, float] = {}
    for weight, queries in ((sentence, [item.sentence_query]), (ngram, item.ngrams), (1.0, mentions)):
        for query in queries:
            for concept, p in zip(query.concepts.tolist(), query.probabilities.tolist(), strict=True):
                if weight * p > best.get(concept, -1.0):
                    best[concept] = weight * p
    return best


MERGES: dict[str, Merge] = {
    "max (shipped)": merge_max,
    "max, maximal n-grams only": merge_maximal,
    "max, no n-grams": merge_no_ngrams,
    "noisy-or": merge_noisy_or,
    "noisy-or, maximal n-grams only": merge_maximal_noisy_or,
    "max of p x query confidence": merge_confidence,
    "max, n-gram p x 0.5": merge_ngrams_scaled,
    "max, n-gram p x 0.25": lambda item, mentions: merge_ngrams_scaled(item, mentions, 0.25),
    **{
        f"sentence x {w_s:g}, n-grams x {w_n:g}": (
            lambda item, mentions, w_s=w_s, w_n=w_n: merge_weighted(item, mentions, w_s, w_n)
        )
        for w_s in (1.0, 0.5, 0.25)
        for w_n in (0.25, 0.1)
    },
    "n-gram-only concepts after the rest": merge_ngrams_last,
    "maximal n-gram-only concepts after the rest": merge_ngrams_last_maximal,
}


def evaluate(scored: list[Scored], merge: Merge, mentions_of: Callable[[Scored], list[Query]]) -> dict:
    rankings, relevant = [], []
    for item in scored:
        merged = merge(item, mentions_of(item))
        ranked = sorted(merged.items(), key=lambda kv: -kv[1])[:RANK_DEPTH]
        rankings.append([str(c) for c, _ in ranked])
        relevant.append({str(c) for c in item.gold})
    return ranking_metrics(rankings, relevant)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.sentence_merge", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data-dir")
    parser.add_argument("--cache", type=Path, required=True, help="the embedding cache (ESCO label vectors)")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_PATH)
    parser.add_argument("--sentences", type=int, default=600)
    args = parser.parse_args(argv)
    started = time.process_time()
    root = data_dir(args.data_dir)
    embeddings = RememberingEmbeddings(MiniLMEmbeddings(), args.cache / "sentence-merge-queries.npz")
    resolver = build_resolver(root / ESCO_FILE, args.cache, embeddings)
    resolver.linker = load_linker_model(args.model)
    resolver.label_index()
    framed = framed_sentences(root, args.sentences)
    copies = respellings(resolver)
    print(f"{len(framed)} sentences, {sum(len(f[1]) for f in framed)} spans", flush=True)
    scored = score_sentences(resolver, framed, copies)
    embeddings.save()
    print(f"scored; CPU s so far {time.process_time() - started:.0f}", flush=True)
    print("| merge | mentions | sentences | MRR | RP@1 | RP@5 | RP@10 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, merge in MERGES.items():
        for label, mentions_of in (
            ("tagger", lambda s: s.tagged),
            ("spans", lambda s: s.spans),
            ("none", lambda s: []),
        ):
            m = evaluate(scored, merge, mentions_of)
            print(
                f"| {name} | {label} | {m['queries']} | {m['mrr']:.3f} | {m['rp@1']:.1f} | "
                f"{m['rp@5']:.1f} | {m['rp@10']:.1f} |"
            )
    print(f"CPU seconds (this process): {time.process_time() - started:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
