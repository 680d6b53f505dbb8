"""Train the linker's concept projection (issue 62): a linear map over frozen MiniLM vectors, learned
contrastively so a skill mention (or a sentence naming a skill) lands near the labels of its ESCO concept.

    python -m training.train_linking_projection [--data-dir D] [--cache DIR] [--out NPZ]
        [--sources esco_alt,esco_description,job_ad,skillspan,onet] [--hard-negatives N]
        [--epochs N] [--temperature T] [--l2 L]

The map, `v -> unit(v @ W)`, is applied to label and query vectors alike (`ConceptProjection`), so
the encoder still runs once a posting and a taxonomy's cached label vectors are re-projected with one
matrix product. `W` starts as the identity; the loss is InfoNCE: each anchor against its concept's
mean label vector (the anchor's own label and its re-spellings left out, so it must be found through
the concept's other labels) beside the other anchors' concepts in the batch and `--hard-negatives`
concepts of its own: the concepts raw MiniLM ranks nearest that are wrong ("today's wrong
candidates") and ESCO siblings under the same broader skill. An L2 penalty keeps `W` near the
identity (the sentence-level queries are projected too).

Anchors (`--sources`), all independent of any benchmark (no SkillSkape, no Decorte label):
- esco_alt: ESCO v1.1.1 labels (preferred and alternative) of a concept, up to `LABELS_PER_CONCEPT`;
- esco_description: a concept's first description sentence (the concept's whole mean as target);
- job_ad: one of its alternative labels set into a SkillSpan train sentence in place of a span;
- skillspan: SkillSpan train spans that are an ESCO label, and their sentences;
- onet: O*NET 29.2 technology examples that are an ESCO label.

Kept apart, so the reranker trained after it (`train_skill_linker --projection`) is fitted and
selected on features the projection did not memorise: every concept of the reranker's ESCO pairs
(its sampled alternative-label and description concepts and the several-skill sentences' concepts)
and every held-out group (`held_out_part`: the reranker's selection and threshold pairs) is left out
here. The held-out ESCO concepts also choose the epoch (MRR of a label against all concepts).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import random
import sys
import time
import zipfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from plugins.postings.skills.concept_reranker import DEFAULT_MODEL_PATH, ConceptProjection
from plugins.postings.skills.embeddings import MiniLMEmbeddings, RememberingEmbeddings
from plugins.postings.skills.word_stems import content_stems
from plugins.postings.store.taxonomy import normalize_label
from training.independent_data import (
    ESCO_FILE,
    ESCO_RELATIONS_ZIP,
    ONET_TECHNOLOGY_FILE,
    SKILLSPAN_TRAIN_FILE,
    ad_frames,
    benchmark_sentence_keys,
    description_pairs,
    esco_alt_pairs,
    first_sentence,
    label_lookup,
    match_label,
    multi_skill_pairs,
    read_esco,
    read_onet_examples,
    read_skillspan_train,
)
from training.linking_data import data_dir
from training.train_skill_linker import (
    ESCO_ALT_CONCEPTS,
    MULTI_SKILL_SENTENCES,
    PROJECT_ROOT,
    SEED,
    build_resolver,
    description_concepts,
    held_out_part,
    respellings,
)

SOURCES = ("esco_alt", "esco_description", "job_ad", "skillspan", "onet")
LABELS_PER_CONCEPT = 6
SENTENCES = 2500  # concepts whose description and job-ad sentence are embedded (CPU: MiniLM)
BROADER_FILE = "broaderRelationsSkillPillar.csv"
DEFAULT_OUT = DEFAULT_MODEL_PATH.with_name("skill_linker.projection.npz")


@dataclass
class Anchors:
    """Anchor vectors with their concept (index), the target vector (the concept's mean without the
    anchor's own labels), hard-negative concepts and where each came from."""

    vectors: np.ndarray
    targets: np.ndarray
    concepts: np.ndarray
    negatives: np.ndarray
    sources: list[str]


def unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def siblings(relations_zip: Path) -> dict[str, list[str]]:
    """Skill URI -> the other skills under the same broader skill (ESCO's skill hierarchy)."""
    children: dict[str, list[str]] = defaultdict(list)
    with zipfile.ZipFile(relations_zip) as archive, archive.open(BROADER_FILE) as raw:
        for row in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8")):
            children[row["broaderUri"]].append(row["conceptUri"])
    found: dict[str, list[str]] = defaultdict(list)
    for group in children.values():
        for uri in group:
            found[uri] += [other for other in group if other != uri]
    return found


class Builder:
    """Collects anchors against the resolver's labels (raw MiniLM vectors, read from the cache)."""

    def __init__(self, resolver, raw_labels: np.ndarray) -> None:  # noqa: ANN001 - SkillResolver
        self.resolver = resolver
        self.raw = raw_labels
        self.copies = respellings(resolver)
        sums = np.add.reduceat(raw_labels[resolver._pair_labels], resolver._concept_starts, axis=0)
        self.centroids = unit(sums)
        self.rows: list[tuple[np.ndarray, np.ndarray, int, str]] = []

    def labels_of(self, concept: int) -> np.ndarray:
        r = self.resolver
        return r._pair_labels[r._concept_starts[concept] : r._concept_ends[concept]]

    def target_without(self, concept: int, label: str | None) -> np.ndarray | None:
        """The concept's mean label vector without `label` and its re-spellings (None: nothing left)."""
        labels = self.labels_of(concept)
        if label is not None:
            stems = tuple(sorted(set(content_stems(label))))
            gone = {self.resolver._label_ids.get(label), *self.copies.get(stems, [])}
            labels = np.array([i for i in labels.tolist() if i not in gone], np.int64)
        if not len(labels):
            return None
        return unit(self.raw[labels].sum(axis=0))

    def add(self, vector: np.ndarray, concept: int, hidden: str | None, source: str) -> None:
        target = self.centroids[concept] if hidden is None else self.target_without(concept, hidden)
        if target is not None:
            self.rows.append((vector, target, concept, source))

    def anchors(self, sibling_map: dict[str, list[str]], hard: int, seed: int) -> Anchors:
        vectors = np.stack([r[0] for r in self.rows]).astype(np.float32)
        concepts = np.array([r[2] for r in self.rows], np.int64)
        negatives = np.zeros((len(self.rows), hard), np.int64)
        rng = random.Random(seed)
        uris = self.resolver.concept_uris
        index = self.resolver._concept_index
        nearest_count = max(hard - hard // 2, 1)
        for start in range(0, len(vectors), 2048):
            scores = vectors[start : start + 2048] @ self.centroids.T
            top = np.argpartition(-scores, 16, axis=1)[:, :16]
            for row, candidates in enumerate(top):
                position = start + row
                gold = concepts[position]
                ranked = candidates[np.argsort(-scores[row, candidates])]
                wrong = [int(c) for c in ranked if c != gold][:nearest_count]
                kin = [index[u] for u in sibling_map.get(uris[gold], []) if u in index]
                rng.shuffle(kin)
                picked = (
                    (wrong + kin)[:hard]
                    if kin
                    else wrong
                    + [int(c) for c in ranked if c != gold][nearest_count : nearest_count + hard - len(wrong)]
                )
                while len(picked) < hard:
                    picked.append(rng.randrange(len(uris)))
                negatives[position] = picked[:hard]
        return Anchors(
            vectors,
            np.stack([r[1] for r in self.rows]).astype(np.float32),
            concepts,
            negatives,
            [r[3] for r in self.rows],
        )


def reranker_concepts(concepts, lookup, skillspan, alt_concepts: int) -> set[str]:  # noqa: ANN001
    """Every gold concept of the reranker's ESCO-sampled pairs (train_skill_linker's recipe)."""
    pairs = (
        esco_alt_pairs(concepts, lookup, ad_frames(skillspan), alt_concepts, SEED)
        + description_pairs(concepts, description_concepts(alt_concepts), SEED)
        + multi_skill_pairs(concepts, skillspan, MULTI_SKILL_SENTENCES, SEED)
    )
    return {uri for pair in pairs for uri in pair.gold}


def build_anchors(args: argparse.Namespace) -> tuple[Anchors, Anchors, dict[str, object], object]:
    root = data_dir(args.data_dir)
    embeddings = RememberingEmbeddings(
        MiniLMEmbeddings(), args.cache / "linking-projection-queries-minilm.npz"
    )
    resolver = build_resolver(root / ESCO_FILE, args.cache, embeddings)
    assert resolver.embeddings is not None
    raw = resolver._embed_labels(resolver.embeddings)
    concepts = read_esco(root / ESCO_FILE)
    lookup = label_lookup(concepts)
    skillspan, _ = read_skillspan_train(root / SKILLSPAN_TRAIN_FILE, benchmark_sentence_keys(root))
    onet = read_onet_examples(root / ONET_TECHNOLOGY_FILE)
    kept_apart = reranker_concepts(concepts, lookup, skillspan, args.esco_alt_concepts)
    index = resolver._concept_index
    rng = random.Random(SEED + 62)
    frames = ad_frames(skillspan)
    train, held = Builder(resolver, raw), Builder(resolver, raw)
    texts: list[tuple[str, int, str | None, str, bool]] = []  # text to embed, concept, hidden, source, held
    label_ids = resolver._label_ids
    for concept in concepts:
        if concept.uri not in index or concept.uri in kept_apart:
            continue
        held_out = held_out_part(f"esco:{concept.uri}") is not None
        builder = held if held_out else train
        c = index[concept.uri]
        labels = list(
            dict.fromkeys(normalize_label(x) for x in (concept.preferred_label, *concept.alt_labels))
        )
        labels = [x for x in labels if x in label_ids]
        rng.shuffle(labels)
        if "esco_alt" in args.sources or held_out:
            for label in labels[:LABELS_PER_CONCEPT]:
                builder.add(raw[label_ids[label]], c, label, "esco_alt")
        if held_out:
            continue
        sentence = first_sentence(concept.description)
        if len(texts) >= 2 * args.sentences:  # descriptions and job-ad sentences: embedding costs CPU
            continue
        if "esco_description" in args.sources and sentence:
            texts.append((sentence, c, None, "esco_description", False))
        alts = [
            a for a in concept.alt_labels if normalize_label(a) != normalize_label(concept.preferred_label)
        ]
        if "job_ad" in args.sources and alts and frames:
            alt = rng.choice(alts)
            frame, span = rng.choice(frames)
            texts.append((frame.replace(span, alt, 1), c, normalize_label(alt), "job_ad", False))
    for sentence in skillspan:
        if "skillspan" not in args.sources or held_out_part(sentence.posting) is not None:
            continue
        golds: set[int] = set()
        for span in dict.fromkeys(sentence.spans):
            matched = match_label(span, lookup)
            if not matched or matched[0] not in label_ids:
                continue
            label, uris = matched
            for uri in uris:
                if uri in index:
                    train.add(raw[label_ids[label]], index[uri], label, "skillspan")
                    golds.add(index[uri])
        for gold in sorted(golds):
            texts.append((sentence.text, gold, None, "skillspan", False))
    if "onet" in args.sources:
        for example in sorted(onet):
            label = normalize_label(example)
            if label not in label_ids or held_out_part(f"onet:{label}") is not None:
                continue
            for uri in lookup.get(label, ()):
                if uri in index:
                    train.add(raw[label_ids[label]], index[uri], label, "onet")
    distinct = list(dict.fromkeys(t[0] for t in texts))
    print(f"{len(distinct)} sentences to embed (cached ones are read)", flush=True)
    started = time.perf_counter()
    embeddings.embed(distinct)
    embeddings.save()
    vectors = dict(zip(distinct, unit(np.asarray(embeddings.embed(distinct), np.float32)), strict=True))
    print(f"  embedded in {time.perf_counter() - started:.0f} s", flush=True)
    for text, c, hidden, source, _ in texts:
        train.add(vectors[text], c, hidden, source)
    sibling_map = siblings(root / ESCO_RELATIONS_ZIP)
    facts = {
        "concepts_kept_apart_for_the_reranker": len(kept_apart),
        "train_concepts": sorted({resolver.concept_uris[r[2]] for r in train.rows}),
    }
    return (
        train.anchors(sibling_map, args.hard_negatives, SEED),
        held.anchors(sibling_map, args.hard_negatives, SEED),
        facts,
        train,
    )


def held_out_mrr(matrix: np.ndarray, held: Anchors, centroids_raw: np.ndarray) -> float:
    """MRR of held-out labels (own label hidden from the gold concept) against every concept's mean."""
    projected = unit(centroids_raw @ matrix)
    queries = unit(held.vectors @ matrix)
    targets = unit(held.targets @ matrix)
    ranks = []
    for start in range(0, len(queries), 2048):
        scores = queries[start : start + 2048] @ projected.T
        gold = held.concepts[start : start + 2048]
        own = np.einsum("ij,ij->i", queries[start : start + 2048], targets[start : start + 2048])
        scores[np.arange(len(gold)), gold] = own  # the gold concept without the anchor's own labels
        ranks.append(1 + (scores > own[:, None]).sum(axis=1))
    return float(np.mean(1.0 / np.concatenate(ranks)))


def fit(
    train: Anchors, held: Anchors, centroids_raw: np.ndarray, args: argparse.Namespace
) -> tuple[np.ndarray, list[dict[str, float]]]:
    import torch  # the `train` extra

    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    dimension = train.vectors.shape[1]
    delta = torch.zeros(dimension, dimension, requires_grad=True)
    eye = torch.eye(dimension)
    optimizer = torch.optim.Adam([delta], lr=args.learning_rate)
    anchors = torch.from_numpy(train.vectors)
    targets = torch.from_numpy(train.targets)
    concepts = torch.from_numpy(train.concepts)
    negatives = torch.from_numpy(unit(centroids_raw)[train.negatives])  # rows x hard x dimension
    best = (held_out_mrr(np.eye(dimension, dtype=np.float32), held, centroids_raw), 0, np.eye(dimension))
    history = [{"epoch": 0, "held_out_mrr": round(best[0], 4)}]
    print(f"epoch 0 (identity): held-out MRR {best[0]:.4f}", flush=True)
    generator = torch.Generator().manual_seed(SEED)
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(anchors), generator=generator)
        total = 0.0
        for start in range(0, len(order), args.batch):
            batch = order[start : start + args.batch]
            weight = eye + delta
            a = torch.nn.functional.normalize(anchors[batch] @ weight, dim=-1)
            t = torch.nn.functional.normalize(targets[batch] @ weight, dim=-1)
            n = torch.nn.functional.normalize(negatives[batch] @ weight, dim=-1)
            in_batch = a @ t.T  # batch x batch
            same = concepts[batch][:, None] == concepts[batch][None, :]
            in_batch = in_batch.masked_fill(same & ~torch.eye(len(batch), dtype=torch.bool), -1e4)
            hard = torch.einsum("bd,bkd->bk", a, n)
            logits = torch.cat([in_batch, hard], dim=1) / args.temperature
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))
            loss = loss + args.l2 * (delta**2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(batch)
        matrix = (eye + delta).detach().numpy().astype(np.float32)
        mrr = held_out_mrr(matrix, held, centroids_raw)
        history.append({"epoch": epoch, "loss": round(total / len(order), 4), "held_out_mrr": round(mrr, 4)})
        print(f"epoch {epoch}: loss {total / len(order):.4f}, held-out MRR {mrr:.4f}", flush=True)
        if mrr > best[0]:
            best = (mrr, epoch, matrix)
    return np.asarray(best[2], np.float32), history


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m training.train_linking_projection", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--data-dir", help="the shared data folder (default $PIPELINE_SHARED_DATA or ../shared/data)"
    )
    parser.add_argument("--cache", type=Path, default=PROJECT_ROOT / "data" / "embedding_cache")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="the projection .npz (a card .json beside it)"
    )
    parser.add_argument(
        "--sources",
        type=lambda text: [s.strip() for s in text.split(",") if s.strip()],
        default=list(SOURCES),
        help=f"anchor sources, from {', '.join(SOURCES)} (default all)",
    )
    parser.add_argument(
        "--hard-negatives", type=int, default=4, help="per anchor: nearest wrong concepts, siblings"
    )
    parser.add_argument(
        "--sentences",
        type=int,
        default=SENTENCES,
        help=f"ESCO concepts whose description and job-ad sentence are embedded (default {SENTENCES})",
    )
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--l2", type=float, default=1e-3, help="penalty on W minus the identity")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--esco-alt-concepts", type=int, default=ESCO_ALT_CONCEPTS)
    args = parser.parse_args(argv)
    unknown = [s for s in args.sources if s not in SOURCES]
    if unknown:
        parser.error(f"unknown sources {', '.join(unknown)}: choose from {', '.join(SOURCES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.process_time()
    train, held, facts, builder = build_anchors(args)
    counts = {source: train.sources.count(source) for source in SOURCES if source in train.sources}
    print(f"{len(train.sources)} training anchors {counts}; {len(held.sources)} held-out labels", flush=True)
    centroids_raw = builder.centroids  # type: ignore[attr-defined]
    matrix, history = fit(train, held, centroids_raw, args)
    best = max(history, key=lambda h: h["held_out_mrr"])
    projection = ConceptProjection(matrix, args.out.name)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    projection.save(args.out.parent)
    card = {
        "name": "skill linker concept projection",
        "what": "v -> unit(v @ W) over all-MiniLM-L6-v2 unit vectors, labels and queries alike",
        "benchmark_exposure": {"decorte_labels": False, "skillskape": False},
        "sources": {source: counts.get(source, 0) for source in args.sources},
        "licenses": {
            "esco": "ESCO v1.1.1 (c) European Union, free reuse with acknowledgement (Decision 2011/833/EU)",
            "skillspan": "SkillSpan (Zhang et al. 2022) train split, CC BY 4.0",
            "onet": "O*NET 29.2 Database, CC BY 4.0 (U.S. Department of Labor)",
            "all-MiniLM-L6-v2": "Apache 2.0",
        },
        "kept_apart": "every concept of the reranker's ESCO pairs and every held-out group "
        f"({facts['concepts_kept_apart_for_the_reranker']} concepts of the reranker's pairs)",
        "selection": "epoch with the best MRR of held-out ESCO concepts' labels (own label hidden) "
        "against every concept's mean label vector",
        "chosen_epoch": best["epoch"],
        "history": history,
        "hyper_parameters": {
            k: getattr(args, k)
            for k in ("hard_negatives", "epochs", "batch", "temperature", "l2", "learning_rate", "sources")
        },
        "trained_concepts": facts["train_concepts"],
        "cpu_seconds": round(time.process_time() - started, 1),
        "command": "python -m training.train_linking_projection " + " ".join(sys.argv[1:]),
    }
    args.out.with_suffix(".json").write_text(json.dumps(card, indent=1) + "\n", encoding="utf-8")
    print(f"written: {args.out} (epoch {best['epoch']}, held-out MRR {best['held_out_mrr']})")
    print(f"CPU seconds (this process): {card['cpu_seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
