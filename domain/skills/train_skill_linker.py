"""Train the skill linker's reranking models (domain/skills/concept_reranker.py); write the shipped artefact.

    python -m domain.skills.train_skill_linker [--data-dir D] [--out PATH] [--cache DIR]

Data: SkillSkape train only (sentences with their ESCO skills). Three kinds of example:
- "sentence": the sentence is the query; its candidates are labelled by the gold skills;
- "mention"/"bare_mention": pseudo-mentions, the sentence's phrases (`sentence_chunks`): each
  gold skill goes to the phrase nearest to it in meaning, and that phrase's candidates are
  labelled by the skills it got (phrases that got none teach what "nothing here" looks like);
  "mention" sees the sentence as context, "bare_mention" does not.
Platt scaling of each model: on SkillSkape dev. Selection (the L2 penalty) and the "unmatched"
threshold (most spans resolved with at most 10% wrong): on the Decorte TECH and HOUSE validation
splits. Deterministic: a fixed seed picks the training sentences for pseudo-mentions.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appdb.database import dispose, session_scope
from appdb.taxonomy import load_taxonomy
from domain.skills import linking_evaluation as evaluation
from domain.skills.concept_reranker import (
    DEFAULT_MODEL_PATH,
    FEATURES,
    QUERY_KINDS,
    LinkerModel,
    LogisticModel,
    fit_logistic,
    fit_platt,
)
from domain.skills.embeddings import MiniLMEmbeddings, RememberingEmbeddings
from domain.skills.linking_data import (
    ESCO_FILE,
    SKILLSKAPE_FILES,
    DecorteSplit,
    data_dir,
    gold_concepts,
    gold_index,
    read_decorte_splits,
    read_skillskape,
    sentence_chunks,
)
from domain.skills.skill_resolver import SkillResolver

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SEED = 17
MENTION_SENTENCES = 2000  # training sentences cut into pseudo-mentions (embedding them all takes long)
PLATT_SENTENCES = 600  # dev sentences for Platt scaling of the mention models
L2_GRID = (1e-3,)  # 1e-4 to 1e-2 selected alike in a first run; 1e-1 was worse
MAX_WRONG = 0.10
PRIOR_COLUMN = FEATURES.index("log_prior")


@dataclass
class Example:
    """One query's candidates: features and 0/1 labels (is this candidate a gold concept?)."""

    features: np.ndarray
    labels: np.ndarray


def build_resolver(esco: Path, cache_dir: Path, embeddings: RememberingEmbeddings) -> SkillResolver:
    """ESCO loaded into a scratch SQLite database and read back the way the product reads it."""
    with tempfile.TemporaryDirectory(prefix="skill-linker-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'taxonomy.db'}"
        try:
            with session_scope(url) as session:
                load_taxonomy(session, esco)
            with session_scope(url) as session:
                return SkillResolver.from_session(session, embeddings=embeddings, vector_cache_dir=cache_dir)
        finally:
            dispose(url)


def query_example(
    resolver: SkillResolver, text: str, context: str | None, gold: set[int], own: set[int]
) -> tuple[Example, bool]:
    """Features of `text`'s candidates and their labels; also whether a gold concept was among them.

    own: the concepts this training sentence itself counts in the prior; their prior is taken
    without it (leave one out), or the model would learn that the prior names the answer.
    """
    vectors = resolver._embed_queries([text] if context is None else [text, context])
    signals, concepts, _ = resolver.candidate_signals(
        text, vectors[0], None if context is None else vectors[1]
    )
    labels = np.isin(concepts, list(gold)).astype(np.float64)
    features = signals.features()
    if own:
        mine = np.isin(concepts, list(own))
        features[mine, PRIOR_COLUMN] = np.log1p(np.maximum(signals.prior[mine] - 1, 0))
    return Example(features, labels), bool(labels.any()) or not gold


def pseudo_mentions(resolver: SkillResolver, sentence: str, gold: set[int]) -> list[tuple[str, set[int]]]:
    """The sentence's phrases, each with the gold concepts nearest to it (see the module docstring)."""
    chunks = sentence_chunks(sentence)
    if not chunks:
        return []
    chunk_vectors = resolver._embed_queries(chunks)
    assigned: list[set[int]] = [set() for _ in chunks]
    vectors = resolver._label_vectors
    assert vectors is not None
    for concept in gold:
        labels = resolver._pair_labels[resolver._concept_starts[concept] : resolver._concept_ends[concept]]
        closeness = (chunk_vectors @ vectors[labels].T).max(axis=1)
        assigned[int(np.argmax(closeness))].add(concept)
    return list(zip(chunks, assigned, strict=True))


def concept_ids(resolver: SkillResolver, labels: frozenset[str], index: Any) -> set[int]:
    uris, _ = gold_concepts(labels, index)
    return {resolver._concept_index[uri] for uri in uris}


def make_examples(
    resolver: SkillResolver,
    sentences: list[tuple[str, frozenset[str]]],
    mention_sentences: int,
    counted: bool,
) -> dict[str, list[Example]]:
    """Examples of every query kind from SkillSkape sentences (a seeded sample for mentions).

    counted: the prior counts these sentences (training data), so each leaves itself out.
    """
    index = gold_index(resolver.preferred_labels)
    embeddings = resolver.embeddings
    assert embeddings is not None
    examples: dict[str, list[Example]] = {kind: [] for kind in QUERY_KINDS}
    embeddings.embed([sentence for sentence, _ in sentences])  # one batched pass
    recall = []
    for sentence, labels in sentences:
        gold = concept_ids(resolver, labels, index)
        example, covered = query_example(resolver, sentence, None, gold, gold if counted else set())
        examples["sentence"].append(example)
        recall.append(covered)
    sample = random.Random(SEED).sample(sentences, min(mention_sentences, len(sentences)))
    embeddings.embed([chunk for sentence, _ in sample for chunk in sentence_chunks(sentence)])
    for sentence, labels in sample:
        own = concept_ids(resolver, labels, index)
        for chunk, gold in pseudo_mentions(resolver, sentence, own):
            left_out = own if counted else set()
            examples["mention"].append(query_example(resolver, chunk, sentence, gold, left_out)[0])
            examples["bare_mention"].append(query_example(resolver, chunk, None, gold, left_out)[0])
    print(
        f"  {len(sentences)} sentences ({np.mean(recall):.1%} with a gold candidate), "
        f"{len(examples['mention'])} pseudo-mentions",
        flush=True,
    )
    return examples


def concept_prior(resolver: SkillResolver, sentences: list[tuple[str, frozenset[str]]]) -> dict[str, int]:
    """How many training sentences name each concept, by preferred label (unknown labels dropped)."""
    known = set(resolver.preferred_labels.values())
    counts: dict[str, int] = {}
    for _, labels in sentences:
        for label in labels & known:
            counts[label] = counts.get(label, 0) + 1
    return counts


def stack(examples: list[Example]) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([e.features for e in examples]), np.concatenate([e.labels for e in examples])


@dataclass(frozen=True)
class Variant:
    """One point of the selection grid: the L2 penalty, whether the prior is a feature, and whether
    mention models learn from every phrase or only from phrases that got a gold skill."""

    l2: float
    use_prior: bool
    every_phrase: bool

    def as_dict(self) -> dict[str, Any]:
        return {"l2": self.l2, "use_prior": self.use_prior, "every_phrase": self.every_phrase}


def fit_models(
    train: dict[str, list[Example]], dev: dict[str, list[Example]], variant: Variant
) -> dict[str, LogisticModel]:
    """One logistic model per query kind, Platt-scaled on dev; a left-out feature gets weight 0."""
    models = {}
    for kind in QUERY_KINDS:

        def kept(examples: list[Example], kind: str = kind) -> list[Example]:
            phrases_only = kind != "sentence" and not variant.every_phrase
            return [e for e in examples if not phrases_only or e.labels.any()]

        features, labels = stack(kept(train[kind]))
        columns = [i for i in range(len(FEATURES)) if variant.use_prior or i != PRIOR_COLUMN]
        fitted = fit_logistic(features[:, columns], labels, l2=variant.l2)
        mean, scale, weights = np.zeros(len(FEATURES)), np.ones(len(FEATURES)), np.zeros(len(FEATURES))
        mean[columns], scale[columns], weights[columns] = fitted.mean, fitted.scale, fitted.weights
        model = LogisticModel(mean, scale, weights, fitted.bias)
        dev_features, dev_labels = stack(kept(dev[kind]))
        platt = fit_platt(model.logits(dev_features), dev_labels)
        models[kind] = LogisticModel(mean, scale, weights, fitted.bias, platt)
    return models


def validation_scores(resolver: SkillResolver, splits: list[DecorteSplit]) -> dict[str, Any]:
    scores: dict[str, Any] = {}
    for split in splits:
        scores[split.name] = {
            "span_given": evaluation.span_given(resolver, split),
            "sentence_level_no_extractor": evaluation.sentence_level(
                resolver, split, evaluation.no_extractor
            ),
            "sentence_level_gold_spans": evaluation.sentence_level(resolver, split, None),
        }
    return scores


def selection_score(scores: dict[str, Any]) -> float:
    """Mean MRR over splits of span-given and no-extractor sentence-level linking."""
    values = [
        scores[split][task]["mrr"]
        for split in scores
        for task in ("span_given", "sentence_level_no_extractor")
    ]
    return float(np.mean(values))


def train(args: argparse.Namespace) -> LinkerModel:
    root = data_dir(args.data_dir)
    embeddings = RememberingEmbeddings(MiniLMEmbeddings(), args.cache / "skill-linker-queries-minilm.npz")
    started = time.perf_counter()
    resolver = build_resolver(root / ESCO_FILE, args.cache, embeddings)
    resolver.label_index()
    print(f"resolver and label index ready in {time.perf_counter() - started:.0f} s", flush=True)
    train_sentences = read_skillskape(root / SKILLSKAPE_FILES["train"])
    prior = concept_prior(resolver, train_sentences)
    resolver.linker = LinkerModel({}, 0.0, {}, prior)  # candidate signals read the prior from it
    print("training examples (SkillSkape train):", flush=True)
    train_examples = make_examples(resolver, train_sentences, args.mentions, counted=True)
    print("calibration examples (SkillSkape dev):", flush=True)
    dev_sentences = read_skillskape(root / SKILLSKAPE_FILES["dev"])
    dev_examples = make_examples(resolver, dev_sentences, PLATT_SENTENCES, counted=False)
    embeddings.save()
    splits = read_decorte_splits(root)
    best: tuple[float, Variant, dict[str, LogisticModel], dict[str, Any]] | None = None
    grid = [
        Variant(l2, use_prior, every)
        for l2 in L2_GRID
        for use_prior in (True, False)
        for every in (True, False)
    ]
    tried = []
    for variant in grid:
        models = fit_models(train_examples, dev_examples, variant)
        resolver.linker = LinkerModel(models, 0.0, {}, prior)
        scores = validation_scores(resolver, splits)
        score = selection_score(scores)
        tried.append({**variant.as_dict(), "selection_score": round(score, 4)})
        print(f"{variant}: selection score {score:.4f}", flush=True)
        if best is None or score > best[0]:
            best = (score, variant, models, scores)
    assert best is not None
    _, chosen, models, scores = best
    resolver.linker = LinkerModel(models, 0.0, {}, prior)
    answers = [answer for split in splits for answer in evaluation.top_answers(resolver, split)]
    threshold = evaluation.precision_threshold(answers, MAX_WRONG)
    embeddings.save()
    card = {
        "name": "skill linker reranker",
        "what": "logistic rerankers over candidate concepts (see domain/skills/concept_reranker.py)",
        "embedding_backend": embeddings.name,
        "embedding_model": embeddings.model,
        "training_data": {
            "train": "SkillSkape train.csv (Magron et al. 2024), license MIT",
            "calibration": "SkillSkape dev.csv (Platt scaling)",
            "selection": "Decorte et al. 2022 TECH and HOUSE validation splits (variant grid, threshold)",
            "taxonomy": "ESCO v1.1.1 skills, (c) European Union (reuse: Commission Decision 2011/833/EU)",
            "train_queries": {kind: len(train_examples[kind]) for kind in QUERY_KINDS},
        },
        "hyper_parameters": {
            **chosen.as_dict(),
            "grid": tried,
            "seed": SEED,
            "pseudo_mention_sentences": args.mentions,
            "threshold_rule": f"lowest confidence with at most {MAX_WRONG:.0%} of validation spans wrong",
        },
        "threshold_at_selection": evaluation.shares_at(answers, threshold),
        "validation_scores": scores,
        "command": "python -m domain.skills.train_skill_linker",
    }
    return LinkerModel(models, threshold, card, prior)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m domain.skills.train_skill_linker", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--data-dir", help="the shared data folder (default $PIPELINE_SHARED_DATA or ../shared/data)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_MODEL_PATH, help="where to write the model JSON")
    parser.add_argument(
        "--cache",
        type=Path,
        default=PROJECT_ROOT / "data" / "embedding_cache",
        help="label vectors, the label index and query vectors are kept here (default data/embedding_cache)",
    )
    parser.add_argument(
        "--mentions", type=int, default=MENTION_SENTENCES, help="sentences cut into pseudo-mentions"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        model = train(args)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(model.to_json() + "\n", encoding="utf-8")
    print(f"written: {args.out} (threshold {model.threshold:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
