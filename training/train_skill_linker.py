"""Train the skill linker's reranking models (plugins/postings/skills/concept_reranker.py); write the
shipped artefact.

    python -m training.train_skill_linker [--data-dir D] [--out PATH] [--cache DIR]
        [--phrases chunks|tagger|both] [--adapter-sentences N] [--reuse-models PATH]

Data: SkillSkape train only (sentences with their ESCO skills). Three kinds of example:
- "sentence": the sentence is the query; its candidates are labelled by the gold skills;
- "mention"/"bare_mention": pseudo-mentions, the sentence's phrases (`sentence_chunks`): each
  gold skill goes to the phrase nearest to it in meaning, and that phrase's candidates are
  labelled by the skills it got (phrases that got none teach what "nothing here" looks like);
  "mention" sees the sentence as context, "bare_mention" does not. `--phrases tagger` takes the
  skill tagger's mentions instead of the clause chunks (`both`: the two together).
The query adapter (`concept_reranker.QueryAdapter`) is trained first, listwise over the candidates
of pseudo-mentions from other SkillSkape train sentences (early stopping on SkillSkape dev); its
cosine is then a feature like the others.
Platt scaling of each model: on SkillSkape dev. Selection (which feature groups, per kind of query)
and the "unmatched" threshold (most spans resolved with at most 10% wrong): on the Decorte TECH
and HOUSE validation splits. Deterministic: a fixed seed picks the training sentences for pseudo-mentions.

Then the acceptance model (`concept_reranker.AcceptanceModel`, on SkillSkape dev pseudo-mentions):
whether a query's best candidate is right, from the ranking's shape; the threshold is set on its
output. `--reuse-models PATH` keeps PATH's rerankers and fits only that and the threshold.

`--models logistic,ranker` adds the listwise one-hidden-layer ranker (`concept_reranker.RankerModel`)
to the grid. Not in the default grid: on the "mention" queries of SkillSkape dev it beats the
logistic model (MRR / first place 0.804 / 68.3% against 0.775 / 64.4%), but on the validation
splits its span-given MRR is lower (TECH 0.724 against 0.765 with all features), so it is not
selected (docs/benchmarks.md).
`--adapter-from` reuses a model's query adapter and `--grid paired` fits only the two feature
sets chosen before, to make a run shorter.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appdb.database import dispose, session_scope
from plugins.postings.skills.concept_reranker import (
    ACCEPTANCE_FEATURES,
    DEFAULT_MODEL_PATH,
    FEATURES,
    QUERY_KINDS,
    AcceptanceModel,
    LinkerModel,
    LogisticModel,
    QueryAdapter,
    RankerData,
    Reranker,
    acceptance_features,
    fit_logistic,
    fit_platt,
    fit_ranker,
    load_linker_model,
)
from plugins.postings.skills.embeddings import MiniLMEmbeddings, RememberingEmbeddings
from plugins.postings.skills.skill_extraction import sentence_mentions
from plugins.postings.skills.skill_resolver import SkillResolver
from plugins.postings.store.taxonomy import load_taxonomy
from training import linking_evaluation as evaluation
from training.linking_data import (
    ESCO_FILE,
    SKILLSKAPE_FILES,
    DecorteSplit,
    data_dir,
    gold_concepts,
    gold_index,
    read_decorte_splits,
    read_reuse_levels,
    read_skillskape,
    sentence_chunks,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SEED = 17
MENTION_SENTENCES = 2000  # training sentences cut into pseudo-mentions (embedding them all takes long)
PLATT_SENTENCES = 600  # dev sentences for Platt scaling of the mention models
L2_GRID = (1e-3,)  # 1e-4 to 1e-2 selected alike in a first run; 1e-1 was worse
# The non-linear listwise ranker (`concept_reranker.RankerModel`): hidden units, the weight of the
# pointwise logistic term beside the listwise one, L2 penalty, full-batch Adam steps.
RANKER_UNITS = 16
RANKER_POINTWISE = 1.0
RANKER_L2 = 1e-4
RANKER_STEPS = 300
MAX_WRONG = 0.10
THRESHOLD_RULE = f"lowest confidence with at most {MAX_WRONG:.0%} of validation spans wrong"
PRIOR_COLUMN = FEATURES.index("log_prior")
# SkillSkape's sentences were written for occupations' own skills: of ESCO's 440 transversal skills
# (work in teams, meet commitments, show determination...) it names one. For them the prior's count
# is missing, not zero, and a zero put each below every concept SkillSkape names (the prior is the
# rerankers' heaviest feature). They get the median count instead.
UNCOVERED_REUSE_LEVEL = "transversal"
EXACT_COLUMN, ALT_LABEL_COLUMN = FEATURES.index("exact"), FEATURES.index("alt_label")
# The query adapter learns from other training sentences than the rerankers (so its cosine is no
# better on the rerankers' examples than on new text), stops early on SkillSkape dev.
ADAPTER_SENTENCES = 3000
ADAPTER_RANK = 32
ADAPTER_TEMPERATURE = 0.05
ADAPTER_EPOCHS = 8
ADAPTER_LEARNING_RATE = 2e-3
ADAPTER_WEIGHT_DECAY = 1e-4
WORD_COLUMNS = tuple(
    FEATURES.index(name) for name in ("stem_jaccard", "stem_cover", "head_match", "label_words")
)
ADAPTER_COLUMNS = tuple(FEATURES.index(name) for name in ("cos_adapted", "cos_adapted_gap"))


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


PHRASE_SOURCES = ("chunks", "tagger", "both")


def phrases(sentence: str, source: str = "chunks") -> list[str]:
    """A training sentence's candidate mentions: its clause chunks (`sentence_chunks`), the skill
    tagger's mentions (the extractor the product runs), or both."""
    found = sentence_chunks(sentence) if source in ("chunks", "both") else []
    if source in ("tagger", "both"):
        found += sentence_mentions(sentence)
    return list(dict.fromkeys(phrase for phrase in found if phrase.strip()))


def pseudo_mentions(
    resolver: SkillResolver, sentence: str, gold: set[int], source: str = "chunks"
) -> list[tuple[str, set[int]]]:
    """The sentence's phrases, each with the gold concepts nearest to it (see the module docstring)."""
    chunks = phrases(sentence, source)
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


@dataclass
class AdapterExample:
    """One pseudo-mention for the adapter: its vector, the labels of its candidate concepts (as
    positions in `owner` order), and which candidates are gold."""

    query: np.ndarray
    labels: np.ndarray  # label ids
    owner: np.ndarray  # candidate position of each label
    gold: np.ndarray  # 0/1 per candidate


def adapter_examples(
    resolver: SkillResolver, sentences: list[tuple[str, frozenset[str]]], source: str = "chunks"
) -> list[AdapterExample]:
    """Pseudo-mentions that got a gold skill, with their candidate concepts (nearest labels and gold)."""
    index = gold_index(resolver.preferred_labels)
    assert resolver.embeddings is not None
    resolver.embeddings.embed([chunk for sentence, _ in sentences for chunk in phrases(sentence, source)])
    label_index = resolver.label_index()
    examples = []
    for sentence, labels in sentences:
        own = concept_ids(resolver, labels, index)
        for chunk, gold in pseudo_mentions(resolver, sentence, own, source):
            if not gold:
                continue
            query = resolver._embed_queries([chunk])[0]
            found, _ = label_index.search(query, 64)
            concepts = np.unique(
                np.concatenate([resolver._concepts_of_labels(found[0][found[0] >= 0]), list(gold)])
            )
            starts, ends = resolver._concept_starts[concepts], resolver._concept_ends[concepts]
            owner = np.repeat(np.arange(len(concepts)), ends - starts)
            label_ids = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends, strict=True)])
            examples.append(
                AdapterExample(
                    query,
                    resolver._pair_labels[label_ids],
                    owner,
                    np.isin(concepts, list(gold)).astype(np.float64),
                )
            )
    return examples


def _adapter_step(
    adapter: QueryAdapter, example: AdapterExample, vectors: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray]:
    """Listwise loss of one example (softmax over its candidates, each scored by its best label) and
    its gradients with respect to U and V."""
    q = example.query.astype(np.float64)
    up, down = adapter.up.astype(np.float64), adapter.down.astype(np.float64)
    projected = down.T @ q
    z = q + up @ projected
    norm = np.linalg.norm(z)
    a = z / norm
    label_vectors = vectors[example.labels].astype(np.float64)
    label_scores = label_vectors @ a / ADAPTER_TEMPERATURE
    count = len(example.gold)
    best = np.full(count, -np.inf)
    np.maximum.at(best, example.owner, label_scores)
    winner = np.zeros(count, np.int64)  # which label gives each candidate its score
    is_best = label_scores == best[example.owner]
    winner[example.owner[is_best]] = np.flatnonzero(is_best)
    shifted = best - best.max()
    p_all = np.exp(shifted) / np.exp(shifted).sum()
    positive = np.exp(shifted) * example.gold
    p_gold = positive / positive.sum()
    loss = -np.log(positive.sum() / np.exp(shifted).sum())
    d_score = p_all - p_gold  # per candidate
    d_a = (d_score @ label_vectors[winner]) / ADAPTER_TEMPERATURE
    d_z = (d_a - a * (a @ d_a)) / norm
    return float(loss), np.outer(d_z, projected), np.outer(q, up.T @ d_z)


def adapter_loss(adapter: QueryAdapter, examples: list[AdapterExample], vectors: np.ndarray) -> float:
    return float(np.mean([_adapter_step(adapter, e, vectors)[0] for e in examples]))


def train_adapter(
    train: list[AdapterExample], dev: list[AdapterExample], vectors: np.ndarray
) -> tuple[QueryAdapter, list[dict[str, float]]]:
    """U and V by Adam on the listwise loss, one example per step; the epoch with the best dev loss kept."""
    rng = np.random.default_rng(SEED)
    dimension = vectors.shape[1]
    params = [np.zeros((dimension, ADAPTER_RANK)), rng.normal(0, 0.05, (dimension, ADAPTER_RANK))]
    moments = [[np.zeros_like(p), np.zeros_like(p)] for p in params]
    step = 0
    best = QueryAdapter(params[0].astype(np.float32), params[1].astype(np.float32))
    best_loss = adapter_loss(best, dev, vectors)
    history = [{"epoch": 0, "dev_loss": round(best_loss, 4)}]
    batch = 32
    for epoch in range(1, ADAPTER_EPOCHS + 1):
        order = rng.permutation(len(train))
        losses = []
        for start in range(0, len(order), batch):
            adapter = QueryAdapter(params[0], params[1])
            grads = [np.zeros_like(p) for p in params]
            for i in order[start : start + batch]:
                loss, grad_up, grad_down = _adapter_step(adapter, train[i], vectors)
                losses.append(loss)
                grads[0] += grad_up
                grads[1] += grad_down
            step += 1
            for param, grad, moment in zip(params, grads, moments, strict=True):
                grad = grad / batch + ADAPTER_WEIGHT_DECAY * param
                moment[0] = 0.9 * moment[0] + 0.1 * grad
                moment[1] = 0.999 * moment[1] + 0.001 * grad**2
                corrected = moment[0] / (1 - 0.9**step), moment[1] / (1 - 0.999**step)
                param -= ADAPTER_LEARNING_RATE * corrected[0] / (np.sqrt(corrected[1]) + 1e-8)
        candidate = QueryAdapter(params[0].astype(np.float32), params[1].astype(np.float32))
        dev_loss = adapter_loss(candidate, dev, vectors)
        history.append(
            {"epoch": epoch, "train_loss": round(float(np.mean(losses)), 4), "dev_loss": round(dev_loss, 4)}
        )
        print(
            f"  adapter epoch {epoch}: train loss {np.mean(losses):.4f}, dev loss {dev_loss:.4f}", flush=True
        )
        if dev_loss < best_loss:
            best, best_loss = candidate, dev_loss
    return best, history


def concept_ids(resolver: SkillResolver, labels: frozenset[str], index: Any) -> set[int]:
    uris, _ = gold_concepts(labels, index)
    return {resolver._concept_index[uri] for uri in uris}


def make_examples(
    resolver: SkillResolver,
    sentences: list[tuple[str, frozenset[str]]],
    mention_sentences: int,
    counted: bool,
    source: str = "chunks",
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
    embeddings.embed([chunk for sentence, _ in sample for chunk in phrases(sentence, source)])
    for sentence, labels in sample:
        own = concept_ids(resolver, labels, index)
        for chunk, gold in pseudo_mentions(resolver, sentence, own, source):
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


def fill_uncovered_prior(
    prior: dict[str, int], reuse_levels: dict[str, str]
) -> tuple[dict[str, int], dict[str, Any]]:
    """The prior with the median count for concepts of `UNCOVERED_REUSE_LEVEL` that SkillSkape
    does not name; and what was filled (for the card)."""
    median = int(np.median(list(prior.values()))) if prior else 0
    at_level = [label for label, level in reuse_levels.items() if level == UNCOVERED_REUSE_LEVEL]
    missing = sorted(label for label in at_level if label not in prior)
    filled = {
        "what": f"ESCO {UNCOVERED_REUSE_LEVEL} skills SkillSkape does not name get the median count "
        f"(SkillSkape covers occupations' own skills: {len(at_level) - len(missing)} of "
        f"{len(at_level)} {UNCOVERED_REUSE_LEVEL} ones)",
        "concepts": len(missing),
        "count": median,
    }
    return {**prior, **dict.fromkeys(missing, median)}, filled


def stack(examples: list[Example]) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([e.features for e in examples]), np.concatenate([e.labels for e in examples])


def ranker_data(examples: list[Example]) -> RankerData:
    return RankerData.of([e.features for e in examples], [e.labels for e in examples])


@dataclass(frozen=True)
class Variant:
    """One point of the selection grid: the L2 penalty, whether the prior is a feature, and whether
    mention models learn from every phrase or only from phrases that got a gold skill."""

    l2: float
    use_prior: bool
    every_phrase: bool
    word_features: bool = True
    adapter_features: bool = True
    model: str = "logistic"  # or "ranker": `RankerModel`, listwise and pointwise, one hidden layer

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "l2": self.l2,
            "use_prior": self.use_prior,
            "every_phrase": self.every_phrase,
            "word_features": self.word_features,
            "adapter_features": self.adapter_features,
        }

    def columns(self) -> list[int]:
        left_out = {PRIOR_COLUMN} if not self.use_prior else set()
        left_out |= set(WORD_COLUMNS) if not self.word_features else set()
        left_out |= set(ADAPTER_COLUMNS) if not self.adapter_features else set()
        return [i for i in range(len(FEATURES)) if i not in left_out]


def fit_models(
    train: dict[str, list[Example]], dev: dict[str, list[Example]], variant: Variant
) -> dict[str, Reranker]:
    """One model per query kind, Platt-scaled on dev; a left-out feature gets weight 0. The ranker
    also stops early at its lowest SkillSkape dev loss."""
    models: dict[str, Reranker] = {}
    for kind in QUERY_KINDS:

        def kept(examples: list[Example], kind: str = kind) -> list[Example]:
            phrases_only = kind != "sentence" and not variant.every_phrase
            return [e for e in examples if not phrases_only or e.labels.any()]

        columns = variant.columns()
        if variant.model == "ranker":
            ranker, _ = fit_ranker(
                ranker_data(kept(train[kind])),
                ranker_data(kept(dev[kind])),
                units=RANKER_UNITS,
                pointwise=RANKER_POINTWISE,
                l2=RANKER_L2,
                steps=RANKER_STEPS,
                seed=SEED,
                columns=columns,
            )
            dev_features, dev_labels = stack(kept(dev[kind]))
            platt = fit_platt(ranker.logits(dev_features), dev_labels)
            models[kind] = dataclasses.replace(ranker, platt=platt)
            continue
        features, labels = stack(kept(train[kind]))
        fitted = fit_logistic(features[:, columns], labels, l2=variant.l2)
        mean, scale, weights = np.zeros(len(FEATURES)), np.ones(len(FEATURES)), np.zeros(len(FEATURES))
        mean[columns], scale[columns], weights[columns] = fitted.mean, fitted.scale, fitted.weights
        model = LogisticModel(mean, scale, weights, fitted.bias)
        dev_features, dev_labels = stack(kept(dev[kind]))
        platt = fit_platt(model.logits(dev_features), dev_labels)
        models[kind] = LogisticModel(mean, scale, weights, fitted.bias, platt)
    return models


def fit_acceptance(
    models: dict[str, Reranker], dev_examples: dict[str, list[Example]]
) -> tuple[AcceptanceModel, dict[str, Any]]:
    """The acceptance model (`concept_reranker.AcceptanceModel`): is a pseudo-mention's best candidate
    a gold concept, from the shape of its ranking. SkillSkape dev only: the validation splits choose
    just the threshold on its output."""
    rows, labels = [], []
    for kind in ("mention", "bare_mention"):
        for example in dev_examples[kind]:
            if not len(example.labels):
                continue
            probabilities = models[kind].probabilities(example.features)
            order = np.argsort(-probabilities, kind="stable")
            tiers = 2 * example.features[order, EXACT_COLUMN] + example.features[order, ALT_LABEL_COLUMN]
            rows.append(acceptance_features(probabilities[order], tiers)[0])
            labels.append(float(example.labels[order[0]] > 0))
    scorer = fit_logistic(np.array(rows), np.array(labels), l2=L2_GRID[0])
    card = {
        "what": "logistic model of 'the best candidate is right' over the ranking's shape; its output is "
        "the confidence the threshold is set on",
        "features": list(ACCEPTANCE_FEATURES),
        "training_data": "SkillSkape dev pseudo-mentions (mention and bare_mention queries)",
        "queries": len(rows),
        "best_candidate_right": round(float(np.mean(labels)), 4),
    }
    return AcceptanceModel(scorer), card


def validation_scores(
    resolver: SkillResolver, splits: list[DecorteSplit], gold_spans: bool = True
) -> dict[str, Any]:
    """Validation figures; gold_spans=False leaves out the sentence-level run with gold spans (the
    selection score does not use it)."""
    scores: dict[str, Any] = {}
    for split in splits:
        scores[split.name] = {
            "span_given": evaluation.span_given(resolver, split),
            "sentence_level_no_extractor": evaluation.sentence_level(
                resolver, split, evaluation.no_extractor
            ),
        }
        if gold_spans:
            scores[split.name]["sentence_level_gold_spans"] = evaluation.sentence_level(resolver, split, None)
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
    prior, prior_filled = fill_uncovered_prior(
        concept_prior(resolver, train_sentences), read_reuse_levels(root / ESCO_FILE)
    )
    resolver.linker = LinkerModel({}, 0.0, {}, prior)  # candidate signals read the prior from it
    adapter, adapter_history = None, []
    if args.adapter_from:
        # The adapter of an earlier model (training it again from the same seed gives the same).
        adapter = load_linker_model(args.adapter_from).adapter
        adapter_history = [{"reused_from": str(args.adapter_from)}]
        resolver.linker = LinkerModel({}, 0.0, {}, prior, adapter)
    elif args.adapter_sentences:
        # Sentences the rerankers' pseudo-mentions do not come from (those are a seeded sample).
        sampled = set(random.Random(SEED).sample(train_sentences, min(args.mentions, len(train_sentences))))
        rest = [pair for pair in train_sentences if pair not in sampled]
        rest = random.Random(SEED + 1).sample(rest, min(args.adapter_sentences, len(rest)))
        dev_for_adapter = random.Random(SEED).sample(
            read_skillskape(root / SKILLSKAPE_FILES["dev"]), PLATT_SENTENCES
        )
        print(f"query adapter: {len(rest)} train sentences, {len(dev_for_adapter)} dev", flush=True)
        adapter_train = adapter_examples(resolver, rest, args.phrases)
        adapter_dev = adapter_examples(resolver, dev_for_adapter, args.phrases)
        embeddings.save()
        print(f"  {len(adapter_train)} train / {len(adapter_dev)} dev pseudo-mentions", flush=True)
        assert resolver._label_vectors is not None
        adapter, adapter_history = train_adapter(adapter_train, adapter_dev, resolver._label_vectors)
        resolver.linker = LinkerModel({}, 0.0, {}, prior, adapter)
    print("calibration examples (SkillSkape dev):", flush=True)
    dev_sentences = read_skillskape(root / SKILLSKAPE_FILES["dev"])
    dev_examples = make_examples(resolver, dev_sentences, PLATT_SENTENCES, False, args.phrases)
    embeddings.save()
    splits = read_decorte_splits(root)
    if args.reuse_models:  # the reused rerankers and adapter, and the card that describes them
        reused = load_linker_model(args.reuse_models)
        models, adapter = reused.models, reused.adapter
        card = {
            **reused.card,
            "hyper_parameters": {
                **reused.card.get("hyper_parameters", {}),
                "reused_from": str(args.reuse_models),
                "threshold_rule": THRESHOLD_RULE,
            },
            "command": "python -m training.train_skill_linker --reuse-models <the model before> "
            "(rerankers and adapter kept)",
        }
    else:
        print("training examples (SkillSkape train):", flush=True)
        train_examples = make_examples(resolver, train_sentences, args.mentions, True, args.phrases)
        embeddings.save()
        models, chosen, tried = select_models(
            resolver, train_examples, dev_examples, splits, prior, adapter, args.models, args.grid
        )
        if not (chosen["mention_models"]["adapter_features"] or chosen["sentence_model"]["adapter_features"]):
            adapter = None  # unused: not shipped
        card = new_card(args, embeddings, train_examples, chosen, tried, adapter, adapter_history)
    acceptance, acceptance_card = fit_acceptance(models, dev_examples)
    resolver.linker = LinkerModel(models, 0.0, {}, prior, adapter, acceptance)
    scores = validation_scores(resolver, splits)
    answers = [answer for split in splits for answer in evaluation.top_answers(resolver, split)]
    threshold = evaluation.precision_threshold(answers, MAX_WRONG)
    embeddings.save()
    card |= {
        "concept_prior_filled": prior_filled,
        "acceptance": acceptance_card,
        "threshold_at_selection": evaluation.shares_at(answers, threshold),
        "validation_scores": scores,
    }
    return LinkerModel(models, threshold, card, prior, adapter, acceptance)


def new_card(
    args: argparse.Namespace,
    embeddings: RememberingEmbeddings,
    train_examples: dict[str, list[Example]],
    chosen: dict[str, Any],
    tried: list[dict[str, Any]],
    adapter: QueryAdapter | None,
    adapter_history: list[dict[str, Any]],
) -> dict[str, Any]:
    """The model card of freshly selected rerankers (the trainer adds what it measures after)."""
    return {
        "name": "skill linker reranker",
        "what": "logistic rerankers over candidate concepts (plugins/postings/skills/concept_reranker.py)",
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
            **chosen,
            "grid": tried,
            "seed": SEED,
            "pseudo_mention_sentences": args.mentions,
            "pseudo_mention_phrases": args.phrases,
            "threshold_rule": THRESHOLD_RULE,
        },
        "query_adapter": None
        if adapter is None
        else {
            "what": "q -> unit(q + U V^T q), U and V of rank "
            f"{ADAPTER_RANK}, trained listwise (softmax over candidates, temperature "
            f"{ADAPTER_TEMPERATURE}) on pseudo-mentions of {args.adapter_sentences} SkillSkape train "
            "sentences not used by the rerankers; epoch chosen by SkillSkape dev loss",
            "history": adapter_history,
        },
        "command": "python -m training.train_skill_linker",
    }


def select_models(
    resolver: SkillResolver,
    train_examples: dict[str, list[Example]],
    dev_examples: dict[str, list[Example]],
    splits: list[DecorteSplit],
    prior: dict[str, int],
    adapter: QueryAdapter | None,
    kinds_of_model: list[str],
    grid_name: str,
) -> tuple[dict[str, Reranker], dict[str, Any], list[dict[str, Any]]]:
    """Fit every variant of the grid; the mention models and the sentence model chosen on validation.

    Returns the models, the chosen variants and every variant's validation figures (for the card)."""
    # The mention models: the variant with the best span-given MRR (TECH and HOUSE mean). Then, with
    # those in place (sentence-level linking also scores mentions and label n-grams with them), the
    # sentence model: the variant whose sentence model gives the best sentence-level MRR, end to end
    # (the skill tagger's mentions) and without an extractor.
    best_mention: tuple[float, Variant, dict[str, Reranker]] | None = None
    fitted: list[tuple[Variant, dict[str, Reranker]]] = []
    # The prior and every phrase were kept in every earlier selection (card of the previous model).
    grid = [
        Variant(l2, True, True, words, adapted, model)
        for model in kinds_of_model
        for l2 in L2_GRID
        for words in (False, True)
        for adapted in ((False, True) if adapter is not None else (False,))
        if grid_name == "full" or words == adapted  # "paired": the two feature sets chosen so far
    ]
    tried = []
    for variant in grid:
        models = fit_models(train_examples, dev_examples, variant)
        resolver.linker = LinkerModel(models, 0.0, {}, prior, adapter)
        scores = validation_scores(resolver, splits, gold_spans=False)
        score = selection_score(scores)
        mrr = {
            f"{split}_{task}_mrr": scores[split][task]["mrr"]
            for split in scores
            for task in ("span_given", "sentence_level_no_extractor")
        }
        tried.append({**variant.as_dict(), "selection_score": round(score, 4), **mrr})
        print(f"{variant}: selection score {score:.4f} {mrr}", flush=True)
        span_score = float(np.mean([scores[split]["span_given"]["mrr"] for split in scores]))
        fitted.append((variant, models))
        if best_mention is None or span_score > best_mention[0]:
            best_mention = (span_score, variant, models)
    assert best_mention is not None
    best_sentence: tuple[float, Variant, dict[str, Reranker]] | None = None
    for variant, models in fitted:
        combined = {**best_mention[2], "sentence": models["sentence"]}
        resolver.linker = LinkerModel(combined, 0.0, {}, prior, adapter)
        sentence_mrr = {
            f"{split.name}_{name}_mrr": evaluation.sentence_level(resolver, split, extract)["mrr"]
            for split in splits
            for name, extract in (("tagger", sentence_mentions), ("no_extractor", evaluation.no_extractor))
        }
        sentence_score = float(np.mean(list(sentence_mrr.values())))
        print(f"sentence model of {variant}: {sentence_score:.4f} {sentence_mrr}", flush=True)
        tried.append(
            {
                "sentence_model_of": variant.as_dict(),
                "sentence_score": round(sentence_score, 4),
                **sentence_mrr,
            }
        )
        if best_sentence is None or sentence_score > best_sentence[0]:
            best_sentence = (sentence_score, variant, combined)
    assert best_sentence is not None
    chosen = {"mention_models": best_mention[1].as_dict(), "sentence_model": best_sentence[1].as_dict()}
    return best_sentence[2], chosen, tried


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m training.train_skill_linker", description=__doc__.split("\n")[0]
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
    parser.add_argument(
        "--phrases",
        choices=PHRASE_SOURCES,
        default="chunks",
        help="where pseudo-mentions come from: clause chunks, the skill tagger's mentions, or both",
    )
    parser.add_argument(
        "--models",
        type=lambda text: [m.strip() for m in text.split(",") if m.strip()],
        default=["logistic"],
        help="reranker types in the grid: logistic (default), ranker (listwise, one hidden layer; "
        "lost to logistic on validation, see the module docstring)",
    )
    parser.add_argument(
        "--grid",
        choices=("full", "paired"),
        default="full",
        help="feature sets per type: all four (word, adapter features on/off) or the two chosen before "
        "(both on, both off)",
    )
    parser.add_argument(
        "--adapter-from",
        type=Path,
        default=None,
        help="reuse the query adapter of this model JSON instead of training one",
    )
    parser.add_argument(
        "--reuse-models",
        type=Path,
        default=None,
        help="keep this model JSON's rerankers and adapter (no grid): fit only the acceptance model "
        "and the threshold (under a minute with cached label vectors, instead of an hour)",
    )
    parser.add_argument(
        "--adapter-sentences",
        type=int,
        default=ADAPTER_SENTENCES,
        help="training sentences for the query adapter (0: no adapter)",
    )
    args = parser.parse_args(argv)
    if args.reuse_models:
        if args.adapter_from and args.adapter_from != args.reuse_models:
            parser.error("--reuse-models keeps that model's adapter: leave out --adapter-from")
        args.adapter_from = args.reuse_models  # the dev examples' adapter features need that adapter
    return args


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
