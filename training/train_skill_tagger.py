"""Train the skill tagger's CRFs on SkillSpan train, select them on SkillSpan dev, write the model.

    python -m training.train_skill_tagger [--data-dir D] [--taxonomy ESCO_CSV] [--out DIR]
        [--build-clusters | --no-clusters]

Reads `skillspan/train.json` (training) and `skillspan/dev.json` (model selection only) from the
shared data folder (--data-dir, else $PIPELINE_SHARED_DATA, else ../shared/data). For every
setting of a small grid (L1 and L2 penalties, context window) both CRFs are trained on train and
scored on dev; the setting with the best mean of strict and loose F1 (skills and knowledge
together, kind ignored) is written to plugins/postings/skills/models/ with a JSON card: data, features,
grid, dev scores, attribution. CRFsuite's L-BFGS is deterministic, so the same data gives the
same files. With --taxonomy, the taxonomy's label matches become features too (then the tagger
needs the same taxonomy at run time).

Word clusters (`skill_tagger.WordClusters`) are read from the model folder's
`skill_tagger.clusters.tsv`; --build-clusters builds that table first (`build_word_clusters`,
about a minute; it needs the MiniLM package that `make` installs), --no-clusters trains without.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pycrfsuite

from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention, Token, tokenize
from plugins.postings.skills.skill_tagger import (
    CLUSTERS_FILE,
    MODEL_DIR,
    MODEL_NAME,
    SkillTagger,
    WordClusters,
    is_punctuation,
    sentences,
    taxonomy_tags,
    token_features,
)
from plugins.postings.skills.taxonomy_matcher import TaxonomyMatcher
from training.linking_data import ESCO_FILE, SKILLSKAPE_FILES
from training.span_corpus import GoldDocument, load_skillspan, score_mentions

SHARED_DATA_ENV = "PIPELINE_SHARED_DATA"
DATA_SOURCE = "SkillSpan train.json / dev.json (kris927b/SkillSpan @ 2ccf3de5, data/json/)"
ATTRIBUTION = (
    "Trained on SkillSpan (Zhang, Jensen, Sonniks and Plank, 'SkillSpan: Hard and Soft Skill Extraction "
    "from English Job Postings', NAACL 2022), dataset licensed CC BY 4.0; the model is a derived work "
    "under the same license."
)
# A small grid, stated in the card: L1 and L2 penalties, and how many neighbours each side are features.
GRID = [
    {"c1": c1, "c2": c2, "window": window} for window in (1, 2) for c1 in (0.05, 0.2) for c2 in (0.01, 0.1)
]
MAX_ITERATIONS = 150
# Word clusters: k-means over MiniLM vectors of single words, coarse and fine (chosen on SkillSpan
# dev against 64 / 256 / 1024 and bigram variants: these two, with neighbours' coarse ones).
CLUSTER_SIZES = (256, 1024)
CLUSTER_SEED = 0
CLUSTER_ITERATIONS = 25
CLUSTER_FEATURES = "; coarse and fine word cluster of the token, coarse of two neighbours each side"


def cluster_vocabulary(data_dir: Path, train_docs: list[GoldDocument], model_words: list[str]) -> list[str]:
    """The words to cluster: those seen twice in SkillSpan train (`train_docs`), ESCO's skills
    (labels and descriptions) and SkillSkape train, and the embedding model's own whole words (broad
    English, so that words of new postings have a cluster too). No SkillSpan dev text: it selects
    the model."""
    counts: Counter[str] = Counter()

    def add(text: str) -> None:
        counts.update(t.text.lower() for t in tokenize(text) if any(c.isalpha() for c in t.text))

    for document in train_docs:
        add(document.text)
    with (data_dir / ESCO_FILE).open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            add(f"{row['preferredLabel']}\n{row['altLabels']}\n{row['description']}")
    with (data_dir / SKILLSKAPE_FILES["train"]).open(encoding="utf-8", newline="") as handle:
        for row in csv.reader(handle):
            add(row[1] if len(row) > 1 else "")
    corpus = {word for word, count in counts.items() if count >= 2}
    whole_words = {w for w in model_words if w.isalpha() and not w.startswith("##") and len(w) > 1}
    return sorted(corpus | whole_words)


def spherical_kmeans(vectors: np.ndarray, k: int, seed: int = CLUSTER_SEED) -> np.ndarray:
    """Cluster id of each unit vector: k-means on cosine, `CLUSTER_ITERATIONS` rounds from a seeded start."""
    rng = np.random.default_rng(seed)
    centroids = vectors[rng.choice(len(vectors), k, replace=False)].copy()
    for _ in range(CLUSTER_ITERATIONS):
        assigned = np.argmax(vectors @ centroids.T, axis=1)
        for cluster in range(k):
            members = vectors[assigned == cluster]
            if len(members):
                mean = members.mean(axis=0)
                centroids[cluster] = mean / np.linalg.norm(mean)
    return np.argmax(vectors @ centroids.T, axis=1)


def build_word_clusters(data_dir: Path, train_docs: list[GoldDocument]) -> WordClusters:
    """MiniLM vector of each vocabulary word on its own, then coarse and fine k-means (`CLUSTER_SIZES`)."""
    from plugins.postings.skills.embeddings import MiniLMEmbeddings

    model = MiniLMEmbeddings()
    words = cluster_vocabulary(data_dir, train_docs, model.vocabulary)
    vectors = np.asarray(model.embed(words), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    coarse, fine = (spherical_kmeans(vectors, k) for k in CLUSTER_SIZES)
    return WordClusters(
        {word: (int(c), int(f)) for word, c, f in zip(words, coarse.tolist(), fine.tolist(), strict=True)}
    )


def default_data_dir(arg: str | None) -> Path:
    """--data-dir, else $PIPELINE_SHARED_DATA, else ../shared/data beside the project."""
    if arg:
        path = Path(arg)
    elif os.environ.get(SHARED_DATA_ENV):
        path = Path(os.environ[SHARED_DATA_ENV])
    else:
        path = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    if not (path / "skillspan" / "train.json").is_file():
        raise FileNotFoundError(
            f"no skillspan/train.json under {path}: pass --data-dir or set {SHARED_DATA_ENV}"
        )
    return path


def token_labels(document: GoldDocument) -> tuple[list[Token], dict[str, list[str]]]:
    """The tagger's tokens of a document and their BIO labels per kind.

    A tagger token lies inside one gold token (gold tokens are separated by spaces); it is
    labelled B when it is the first tagger token of a gold span, I inside one, else O;
    punctuation at the edge of a span is labelled O.
    """
    tokens = tokenize(document.text)
    gold_index = [document.gold_token_span(token.start, token.end)[0] for token in tokens]  # type: ignore[index]
    labels: dict[str, list[str]] = {}
    for kind in MENTION_KINDS:
        span_of = {}
        for first, end in document.gold[kind]:
            for gold_token in range(first, end):
                span_of[gold_token] = first
        spans: list[int | None] = [span_of.get(index) for index in gold_index]
        # Punctuation at a span's edge was glued to a gold word ("Boot;"): not part of the mention.
        for index in [*range(len(tokens)), *reversed(range(len(tokens)))]:
            if spans[index] is not None and is_punctuation(tokens[index].text):
                before = spans[index - 1] if index > 0 else None
                after = spans[index + 1] if index + 1 < len(tokens) else None
                if before != spans[index] or after != spans[index]:
                    spans[index] = None
        tags, previous_span = [], None
        for span in spans:
            tags.append("O" if span is None else "I" if span == previous_span else "B")
            previous_span = span
        labels[kind] = tags
    return tokens, labels


def sequences(
    documents: list[GoldDocument],
    window: int,
    matcher: TaxonomyMatcher | None,
    clusters: WordClusters | None = None,
) -> list[tuple[list[list[str]], dict[str, list[str]]]]:
    """(features, BIO labels per kind) of every sentence, over the tagger's own tokens (`token_labels`)."""
    result = []
    for document in documents:
        tokens, labels = token_labels(document)
        tax = taxonomy_tags(document.text, tokens, matcher) if matcher is not None else None
        for first, end in sentences(tokens, document.text):
            features = token_features(
                tokens[first:end], window, tax[first:end] if tax is not None else None, clusters
            )
            result.append((features, {kind: labels[kind][first:end] for kind in MENTION_KINDS}))
    return result


def train(
    train_sequences: list[tuple[list[list[str]], dict[str, list[str]]]],
    params: dict[str, Any],
    out_dir: Path,
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for kind in MENTION_KINDS:
        trainer = pycrfsuite.Trainer(verbose=False)
        for features, labels in train_sequences:
            trainer.append(features, labels[kind])
        trainer.set_params(
            {
                "c1": params["c1"],
                "c2": params["c2"],
                "max_iterations": MAX_ITERATIONS,
                "feature.possible_transitions": True,
            }
        )
        trainer.train(str(out_dir / f"{MODEL_NAME}.{kind}.crfsuite"))


def write_card(out_dir: Path, card: dict[str, Any]) -> None:
    (out_dir / f"{MODEL_NAME}.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")


def dev_scores(model_dir: Path, dev: list[GoldDocument], matcher: TaxonomyMatcher | None) -> dict[str, Any]:
    tagger = SkillTagger(model_dir, matcher)
    predicted: dict[str, list[Mention]] = {document.doc_id: tagger.tag(document.text) for document in dev}
    return score_mentions(dev, predicted)


def selection_score(scores: dict[str, Any]) -> float:
    """What the grid maximizes: mean of strict and loose F1, skills and knowledge together."""
    return (scores["any"]["strict"]["f1"] + scores["any"]["loose"]["f1"]) / 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--taxonomy", help="skills CSV (ESCO format) whose label matches become features")
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help=f"model folder (default {MODEL_DIR})")
    parser.add_argument("--only", type=int, help="train only this grid setting (its index), no selection")
    clustering = parser.add_mutually_exclusive_group()
    clustering.add_argument(
        "--build-clusters", action="store_true", help=f"build {CLUSTERS_FILE} first (needs MiniLM)"
    )
    clustering.add_argument("--no-clusters", action="store_true", help="train without word clusters")
    args = parser.parse_args(argv)

    data_dir = default_data_dir(args.data_dir)
    train_docs = load_skillspan(data_dir / "skillspan" / "train.json")
    dev_docs = load_skillspan(data_dir / "skillspan" / "dev.json")
    matcher = TaxonomyMatcher.from_csv(args.taxonomy) if args.taxonomy else None
    data_hash = hashlib.sha256((data_dir / "skillspan" / "train.json").read_bytes()).hexdigest()
    grid = [GRID[args.only]] if args.only is not None else GRID
    clusters = None
    if args.build_clusters:
        started = time.perf_counter()
        clusters = build_word_clusters(data_dir, train_docs)
        args.out.mkdir(parents=True, exist_ok=True)
        clusters.write(args.out / CLUSTERS_FILE)
        print(f"{len(clusters.table)} words clustered ({time.perf_counter() - started:.0f}s)", flush=True)
    elif not args.no_clusters:
        if not (args.out / CLUSTERS_FILE).is_file():
            parser.error(f"no {args.out / CLUSTERS_FILE}: pass --build-clusters (or --no-clusters)")
        clusters = WordClusters.read(args.out / CLUSTERS_FILE)
    print(
        f"{len(train_docs)} training postings, {len(dev_docs)} dev postings; {len(grid)} settings", flush=True
    )

    features_cache: dict[int, Any] = {}
    trials: list[dict[str, Any]] = []
    best: tuple[float, int] | None = None
    scratch = args.out / "_trial"
    for number, params in enumerate(grid):
        if params["window"] not in features_cache:
            features_cache[params["window"]] = sequences(train_docs, params["window"], matcher, clusters)
        started = time.perf_counter()
        train(features_cache[params["window"]], params, scratch)
        seconds = time.perf_counter() - started
        if clusters is not None:
            clusters.write(scratch / CLUSTERS_FILE)
        write_card(scratch, _card(params, matcher, args.taxonomy, data_hash, {}, [], seconds, clusters))
        scores = dev_scores(scratch, dev_docs, matcher)
        trials.append({"params": params, "train_seconds": round(seconds, 1), "dev": _brief(scores)})
        print(f"{params}: {trials[-1]['dev']} ({seconds:.0f}s)", flush=True)
        if best is None or selection_score(scores) > best[0]:
            best = (selection_score(scores), number)
            for path in scratch.iterdir():
                path.replace(args.out / path.name.replace("_trial", ""))
            chosen_scores, chosen_seconds = scores, seconds
    for path in scratch.iterdir():
        path.unlink()
    scratch.rmdir()
    assert best is not None
    params = grid[best[1]]
    write_card(
        args.out,
        _card(params, matcher, args.taxonomy, data_hash, chosen_scores, trials, chosen_seconds, clusters),
    )
    sizes = {path.name: path.stat().st_size for path in args.out.glob(f"{MODEL_NAME}*")}
    print(f"chose {params}; wrote {sizes}")
    return 0


def _brief(scores: dict[str, Any]) -> dict[str, float]:
    return {
        f"{kind}_{mode}_f1": round(scores[kind][mode]["f1"], 4)
        for kind in ("skill", "knowledge", "any")
        for mode in ("strict", "loose")
    }


def _card(
    params: dict[str, Any],
    matcher: TaxonomyMatcher | None,
    taxonomy: str | None,
    data_hash: str,
    scores: dict[str, Any],
    trials: list[dict[str, Any]],
    seconds: float,
    clusters: WordClusters | None = None,
) -> dict[str, Any]:
    return {
        "model": "two linear-chain CRFs (python-crfsuite, L-BFGS), BIO: one for skills, one for knowledge",
        "data": DATA_SOURCE,
        "train_sha256": data_hash,
        "selection": "grid below, best mean of strict and loose span F1 on dev (kinds together)",
        "features": {
            "window": params["window"],
            "taxonomy": matcher is not None,
            "taxonomy_source": Path(taxonomy).name if taxonomy else None,
            "word_clusters": clusters is not None,
            "list": "word, Snowball stem, shape of the token and of its neighbours within the window; prefix "
            "3, suffixes 2-4, length, title/upper/digit, first/last of sentence; word bigrams "
            + ("; taxonomy match BIO (by kind) of the token and its neighbours" if matcher else "")
            + (CLUSTER_FEATURES if clusters else ""),
        },
        "word_clusters": None
        if clusters is None
        else {
            "file": CLUSTERS_FILE,
            "words": len(clusters.table),
            "sizes": list(CLUSTER_SIZES),
            "method": "all-MiniLM-L6-v2 vector of each word alone, spherical k-means "
            f"(seed {CLUSTER_SEED}, {CLUSTER_ITERATIONS} rounds); words of SkillSpan train, ESCO v1.1.1 "
            "skills, SkillSkape train (each seen twice or more) and MiniLM's whole-word vocabulary",
        },
        "hyper_parameters": {**params, "max_iterations": MAX_ITERATIONS},
        "grid": GRID,
        "train_seconds": round(seconds, 1),
        "dev_scores": scores,
        "trials": trials,
        "license": "CC BY 4.0",
        "attribution": ATTRIBUTION,
    }


if __name__ == "__main__":
    raise SystemExit(main())
