"""Train the context tagger's head on SkillSpan train, select it on SkillSpan dev, write the model.

    python -m training.train_context_tagger [--data-dir D] [--out DIR] [--cache DIR]
        [--settings 3,3+clusters] [--epochs N] [--threads N] [--seeds 0,1,2]

Needs torch (a development dependency: `pip install -e '.[train]'`); the shipped model is read
with NumPy alone (`plugins/postings/skills/context_tagger.py`).

1. Every sentence of SkillSpan train and dev (the tagger's own tokens and sentences) is read once
   by MiniLM (`MiniLMEmbeddings.word_states`, all layers); the word vectors are kept as float16
   in --cache (default ~/.cache/posting-enrichment/context_tagger), so a second run skips this.
2. For each setting (`--settings`: how many of MiniLM's six layers the tagger runs, which sets its
   CPU cost, and whether word cluster ids are embedded too), the head (layer mix, projection,
   BiLSTM, two CRFs) is trained on train with Adam for --epochs epochs; after each epoch the
   NumPy head tags dev, and the epoch and setting with the best mean of strict and loose span F1
   (kinds together, as the CRF tagger's trainer) is kept.
   With several `--seeds` (one setting), one head per seed is trained so (each kept in
   --cache/heads, so seeds can be trained in separate processes side by side and a later run
   reads them), and the ensemble of the first k heads (k = 1 .. all, chosen on dev by the same
   criterion; `ContextHead` averages the members' emissions and CRFs) is written. The shipped
   model: `--seeds 0,1,2`.
3. The chosen head (or ensemble) is written as `skill_context_tagger.npz` (float16) with its card
   `skill_context_tagger.json`: data, encoder, architecture, hyper-parameters, every trial's dev
   scores, training time. Dev is read for selection only, never trained on.
4. Then `python -m training.calibrate_context_tagger` chooses the decoding biases and writes them
   into the card (`"decoding"`); a card without them decodes unbiased.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from plugins.postings.skills.context_tagger import (
    CONTEXT_MODEL_NAME,
    SURFACE_FEATURES,
    TAGS,
    ContextHead,
    ContextTagger,
    cluster_ids,
    ensemble_weights,
    surface_features,
)
from plugins.postings.skills.embeddings import MiniLMEmbeddings
from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention, Token
from plugins.postings.skills.skill_tagger import CLUSTERS_FILE, MODEL_DIR, WordClusters, sentences
from training.span_corpus import GoldDocument, load_skillspan, score_mentions
from training.train_skill_tagger import (
    ATTRIBUTION,
    CLUSTER_SIZES,
    DATA_SOURCE,
    default_data_dir,
    selection_score,
    token_labels,
)

HIDDEN = 384
SEED = 0
DEFAULTS = {"projection": 256, "lstm": 128, "dropout": 0.3, "lr": 2e-3, "batch": 16, "epochs": 12}
TRAIN_PIECE_WORDS = 64
DEFAULT_SETTINGS = "3"
DEFAULT_SEEDS = "0"
ENSEMBLE_CARD_KEYS = ("seeds", "members", "member_epochs", "member_dev", "by_size", "combination")
CLUSTER_WIDTH = 16
COMMAND = "python -m training.train_context_tagger --data-dir ../shared/data"


@dataclass
class Corpus:
    """Sentences of a split: tokens, words' states (all layers, float16), BIO label ids per kind."""

    documents: list[GoldDocument]
    sentences: list[tuple[int, list[Token]]]  # (document index, tokens)
    states: list[np.ndarray]  # (7, words, 384) float16 each
    labels: list[np.ndarray]  # (words, 2) int64 each


def build_corpus(documents: list[GoldDocument], encoder: MiniLMEmbeddings, cache: Path | None) -> Corpus:
    sentence_list: list[tuple[int, list[Token]]] = []
    labels: list[np.ndarray] = []
    for number, document in enumerate(documents):
        tokens, tags = token_labels(document)
        for first, end in sentences(tokens, document.text):
            sentence_list.append((number, tokens[first:end]))
            labels.append(
                np.array([[TAGS.index(tags[kind][i]) for kind in MENTION_KINDS] for i in range(first, end)])
            )
    words = [[token.text for token in tokens] for _, tokens in sentence_list]
    key = hashlib.sha256(json.dumps(words).encode()).hexdigest()[:16]
    path = cache / f"states-{key}.npy" if cache is not None else None
    if path is not None and path.is_file():
        flat = np.load(path)
    else:
        started = time.perf_counter()
        states = encoder.word_states(words, all_layers=True)
        flat = np.concatenate(states, axis=1).astype(np.float16)
        print(f"  {len(words)} sentences read by MiniLM in {time.perf_counter() - started:.0f}s", flush=True)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, flat)
    offsets = np.cumsum([0, *[len(w) for w in words]])
    split = [flat[:, offsets[i] : offsets[i + 1]] for i in range(len(words))]
    return Corpus(documents, sentence_list, split, labels)


def split_long(corpus: Corpus, most: int = TRAIN_PIECE_WORDS) -> Corpus:
    """Training sentences longer than `most` words cut into pieces (their states were read whole, so each
    piece keeps its context; the LSTM and the CRF see shorter sequences, and batches pad less)."""
    result = Corpus(corpus.documents, [], [], [])
    for (number, tokens), states, labels in zip(corpus.sentences, corpus.states, corpus.labels, strict=True):
        for begin in range(0, len(tokens), most):
            result.sentences.append((number, tokens[begin : begin + most]))
            result.states.append(states[:, begin : begin + most])
            result.labels.append(labels[begin : begin + most])
    return result


# ---- the head in torch (the same computation as context_tagger.ContextHead) ----


def make_head(layers: int, projection: int, lstm: int, dropout: float, clusters: bool = False) -> Any:
    import torch
    from torch import nn

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mix_weights = nn.Parameter(torch.zeros(layers + 1))
            self.mix_gamma = nn.Parameter(torch.ones(1))
            extra = 2 * CLUSTER_WIDTH if clusters else 0
            if clusters:
                self.cluster_coarse = nn.Embedding(CLUSTER_SIZES[0] + 1, CLUSTER_WIDTH)
                self.cluster_fine = nn.Embedding(CLUSTER_SIZES[1] + 1, CLUSTER_WIDTH)
            self.proj = nn.Linear(HIDDEN + len(SURFACE_FEATURES) + extra, projection)
            self.lstm = nn.LSTM(projection, lstm, batch_first=True, bidirectional=True)
            self.out = nn.Linear(2 * lstm, len(MENTION_KINDS) * len(TAGS))
            self.transitions = nn.Parameter(torch.zeros(len(MENTION_KINDS), len(TAGS), len(TAGS)))
            self.start = nn.Parameter(torch.zeros(len(MENTION_KINDS), len(TAGS)))
            self.end = nn.Parameter(torch.zeros(len(MENTION_KINDS), len(TAGS)))
            self.dropout = nn.Dropout(dropout)

        def emissions(self, states: Any, surface: Any, lengths: Any, ids: Any = None) -> Any:
            """states (batch, layers + 1, time, 384) -> (batch, time, kinds, tags)."""
            mix = torch.softmax(self.mix_weights, 0) * self.mix_gamma
            mixed = torch.einsum("l,blth->bth", mix, states)
            parts = [self.dropout(mixed), surface]
            if clusters:
                parts += [self.cluster_coarse(ids[..., 0]), self.cluster_fine(ids[..., 1])]
            x = torch.relu(self.proj(torch.cat(parts, dim=-1)))
            packed = nn.utils.rnn.pack_padded_sequence(
                self.dropout(x), lengths, batch_first=True, enforce_sorted=False
            )
            hidden, _ = self.lstm(packed)
            hidden, _ = nn.utils.rnn.pad_packed_sequence(hidden, batch_first=True, total_length=x.shape[1])
            out = self.out(self.dropout(hidden))
            return out.view(out.shape[0], out.shape[1], len(MENTION_KINDS), len(TAGS))

        def loss(self, emissions: Any, tags: Any, mask: Any) -> Any:
            """Mean CRF negative log-likelihood over sentences and kinds; tags (batch, time, kinds)."""
            batch, length = mask.shape
            kinds = torch.arange(len(MENTION_KINDS))
            # gold path score
            first = tags[:, 0]  # (batch, kinds)
            score = self.start[kinds, first] + emissions[:, 0].gather(-1, first[..., None]).squeeze(-1)
            for step in range(1, length):
                on = mask[:, step, None]
                move = self.transitions[kinds, tags[:, step - 1], tags[:, step]]
                emit = emissions[:, step].gather(-1, tags[:, step, :, None]).squeeze(-1)
                score = score + on * (move + emit)
            last_index = mask.sum(1).long() - 1
            last = tags[torch.arange(batch), last_index]
            score = score + self.end[kinds, last]
            # partition function
            alpha = self.start + emissions[:, 0]  # (batch, kinds, tags)
            for step in range(1, length):
                nxt = (
                    torch.logsumexp(alpha[..., :, None] + self.transitions[None], dim=-2) + emissions[:, step]
                )
                on = mask[:, step, None, None]
                alpha = torch.where(on > 0, nxt, alpha)
            partition = torch.logsumexp(alpha + self.end[None], dim=-1)
            return (partition - score).sum() / batch

    return Head()


def export(head: Any) -> dict[str, np.ndarray]:
    """The head's weights under the names `ContextHead` reads."""
    state = {
        name: value.detach().cpu().numpy().astype(np.float32) for name, value in head.state_dict().items()
    }
    weights = {
        "mix.weights": state.pop("mix_weights"),
        "mix.gamma": state.pop("mix_gamma"),
        "crf.transitions": state.pop("transitions"),
        "crf.start": state.pop("start"),
        "crf.end": state.pop("end"),
    }
    if "cluster_coarse.weight" in state:
        weights["cluster.coarse"] = state.pop("cluster_coarse.weight")
        weights["cluster.fine"] = state.pop("cluster_fine.weight")
    weights.update(state)
    return weights


def tag_corpus(tagger: ContextTagger, corpus: Corpus, layers: int) -> dict[str, list[Mention]]:
    """Each document's mentions, its sentences tagged side by side (as `ContextTagger.tag_posting`)."""
    by_document: dict[int, list[int]] = {}
    for index, (number, _) in enumerate(corpus.sentences):
        by_document.setdefault(number, []).append(index)
    predicted: dict[str, list[Mention]] = {document.doc_id: [] for document in corpus.documents}
    for number, indices in by_document.items():
        document = corpus.documents[number]
        predicted[document.doc_id] += tagger.tag_sentences(
            document.text,
            [corpus.sentences[i][1] for i in indices],
            [corpus.states[i][: layers + 1].astype(np.float32) for i in indices],
        )
    return predicted


def train_setting(
    train: Corpus,
    dev: Corpus,
    setting: str,
    clusters: WordClusters,
    params: dict[str, Any],
    log: list[dict[str, Any]],
    seed: int = SEED,
) -> tuple[float, dict[str, np.ndarray], dict[str, Any], int]:
    """Train one setting ("3": MiniLM's first 3 layers; "3+clusters": and word cluster embeddings)
    from `seed` (torch's initial weights and dropout, the batches' order); returns the best epoch's
    (selection score, weights, dev scores, epoch)."""
    import torch

    layers, with_clusters = int(setting.split("+")[0]), setting.endswith("+clusters")
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    head = make_head(layers, params["projection"], params["lstm"], params["dropout"], with_clusters)
    optimizer = torch.optim.Adam(head.parameters(), lr=params["lr"])
    surfaces = [surface_features([t.text for t in tokens]) for _, tokens in train.sentences]
    ids = [torch.from_numpy(cluster_ids([t.text for t in tokens], clusters)) for _, tokens in train.sentences]
    best: tuple[float, dict[str, np.ndarray], dict[str, Any], int] | None = None
    for epoch in range(1, params["epochs"] + 1):
        head.train()
        # Batches of sentences of similar length (little padding), in random order.
        order = sorted(range(len(train.states)), key=lambda i: train.states[i].shape[1] + rng.random() * 4)
        batches = [order[begin : begin + params["batch"]] for begin in range(0, len(order), params["batch"])]
        total = 0.0
        started = time.perf_counter()
        for number in rng.permutation(len(batches)):
            batch = batches[number]
            lengths = [train.states[i].shape[1] for i in batch]
            length = max(lengths)
            states = torch.zeros(len(batch), layers + 1, length, HIDDEN)
            surface = torch.zeros(len(batch), length, len(SURFACE_FEATURES))
            tags = torch.zeros(len(batch), length, len(MENTION_KINDS), dtype=torch.long)
            batch_ids = torch.zeros(len(batch), length, 2, dtype=torch.long)
            mask = torch.zeros(len(batch), length)
            for row, index in enumerate(batch):
                n = lengths[row]
                states[row, :, :n] = torch.from_numpy(train.states[index][: layers + 1].astype(np.float32))
                surface[row, :n] = torch.from_numpy(surfaces[index])
                batch_ids[row, :n] = ids[index]
                tags[row, :n] = torch.from_numpy(train.labels[index])
                mask[row, :n] = 1
            emissions = head.emissions(states, surface, torch.tensor(lengths), batch_ids)
            loss = head.loss(emissions, tags, mask)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 5.0)
            optimizer.step()
            total += float(loss.detach()) * len(batch)
        head.eval()
        weights = export(head)
        tagger = ContextTagger(
            ContextHead(weights, layers, clusters if with_clusters else None), encoder=None
        )
        scores = score_mentions(dev.documents, tag_corpus(tagger, dev, layers))
        selected = selection_score(scores)
        brief = brief_scores(scores)
        log.append(
            {
                "setting": setting,
                "seed": seed,
                "epoch": epoch,
                "loss": round(total / len(order), 3),
                "dev": brief,
            }
        )
        print(
            f"  {setting} seed {seed} epoch {epoch}: loss {total / len(order):.3f}, dev {brief} "
            f"({time.perf_counter() - started:.0f}s)",
            flush=True,
        )
        if best is None or selected > best[0]:
            best = (selected, weights, scores, epoch)
    assert best is not None
    return best


def train_member(
    train: Corpus,
    dev: Corpus,
    setting: str,
    clusters: WordClusters,
    params: dict[str, Any],
    seed: int,
    data_hash: str,
    cache: Path | None,
) -> dict[str, Any]:
    """One head trained from `seed` (`train_setting`), or the same head from `cache`/heads if a run
    with the same setting, hyper-parameters, seed and training data wrote it there."""
    key = json.dumps({"setting": setting, "params": params, "seed": seed, "train": data_hash}, sort_keys=True)
    stem = f"head-{setting}-seed{seed}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    path = cache / "heads" / stem if cache is not None else None
    if path is not None and path.with_suffix(".json").is_file():
        record = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        with np.load(path.with_suffix(".npz"), allow_pickle=False) as stored:
            record["weights"] = {name: np.asarray(value, np.float32) for name, value in stored.items()}
        print(f"  {setting} seed {seed}: epoch {record['epoch']} from {path}.npz", flush=True)
        return record
    log: list[dict[str, Any]] = []
    wall, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    score, weights, scores, epoch = train_setting(train, dev, setting, clusters, params, log, seed)
    after = resource.getrusage(resource.RUSAGE_SELF)
    seconds = {
        "seed": seed,
        "wall": round(time.perf_counter() - wall, 1),
        "cpu": round(after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime, 1),
    }
    record = {
        "seed": seed,
        "score": score,
        "scores": scores,
        "epoch": epoch,
        "trials": log,
        "seconds": seconds,
    }
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path.with_suffix(".npz"), **weights)
        path.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return {**record, "weights": weights}


def choose_ensemble(
    members: list[dict[str, Any]], dev: Corpus, setting: str, clusters: WordClusters
) -> dict[str, Any]:
    """The ensembles of the first k heads (k = 1 .. all, in --seeds order) scored on dev; the best by the
    selection criterion is chosen. Weights are rounded to float16 first, as they are shipped."""
    layers, with_clusters = int(setting.split("+")[0]), setting.endswith("+clusters")
    by_size: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    for size in range(1, len(members) + 1):
        heads = [
            {name: value.astype(np.float16).astype(np.float32) for name, value in member["weights"].items()}
            for member in members[:size]
        ]
        head = ContextHead(ensemble_weights(heads), layers, clusters if with_clusters else None)
        scores = score_mentions(dev.documents, tag_corpus(ContextTagger(head, encoder=None), dev, layers))
        brief = brief_scores(scores)
        by_size.append({"members": size, "dev": brief})
        print(f"  ensemble of {size}: dev {brief}", flush=True)
        if best is None or selection_score(scores) > best["score"]:
            best = {"members": size, "score": selection_score(scores), "scores": scores}
    assert best is not None
    return {
        **best,
        "seeds": [member["seed"] for member in members[: best["members"]]],
        "member_epochs": [member["epoch"] for member in members],
        "member_dev": [brief_scores(member["scores"]) for member in members],
        "by_size": by_size,
        "combination": "the members' emission scores and CRF parameters averaged; one Viterbi per kind",
    }


def brief_scores(scores: dict[str, Any]) -> dict[str, float]:
    return {
        f"{kind}_{mode}": round(scores[kind][mode]["f1"], 4)
        for kind in ("skill", "knowledge", "any")
        for mode in ("strict", "loose")
    }


def default_cache() -> Path:
    """Where MiniLM's word vectors of the training and dev sentences are kept between runs."""
    return (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "posting-enrichment"
        / "context_tagger"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--out", type=Path, default=MODEL_DIR, help=f"model folder (default {MODEL_DIR})")
    parser.add_argument(
        "--cache",
        type=Path,
        default=default_cache(),
        help="where MiniLM's word vectors of the two splits are kept between runs",
    )
    parser.add_argument(
        "--settings",
        default=DEFAULT_SETTINGS,
        help="comma-separated: N (MiniLM's first N layers), N+clusters (and word cluster embeddings); "
        f"default {DEFAULT_SETTINGS}",
    )
    parser.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    parser.add_argument(
        "--seeds",
        default=DEFAULT_SEEDS,
        help="comma-separated: one head per seed, each trained apart and its epoch chosen on dev (kept "
        "in --cache, so a second run, or runs of one seed each side by side, skip them); with several, "
        f"the ensemble of the first k heads, k chosen on dev, is written; default {DEFAULT_SEEDS}",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: faster than 2 on a busy 2-core machine)",
    )
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    wall, cpu = time.perf_counter(), time.process_time()
    data_dir = default_data_dir(args.data_dir)
    train_docs = load_skillspan(data_dir / "skillspan" / "train.json")
    dev_docs = load_skillspan(data_dir / "skillspan" / "dev.json")
    data_hash = hashlib.sha256((data_dir / "skillspan" / "train.json").read_bytes()).hexdigest()
    encoder = MiniLMEmbeddings()
    print(f"{len(train_docs)} training postings, {len(dev_docs)} dev postings", flush=True)
    train = split_long(build_corpus(train_docs, encoder, args.cache))
    dev = build_corpus(dev_docs, encoder, args.cache)
    print(f"{len(train.states)} training sentences, {len(dev.states)} dev sentences", flush=True)

    params = {**DEFAULTS, "epochs": args.epochs}
    seeds = [int(value) for value in args.seeds.split(",") if value.strip()]
    settings = [value.strip() for value in args.settings.split(",") if value.strip()]
    if len(seeds) > 1 and len(settings) > 1:
        parser.error("an ensemble (several --seeds) is trained for one setting only")
    trials: list[dict[str, Any]] = []
    chosen: tuple[float, dict[str, np.ndarray], dict[str, Any], int, str] | None = None
    clusters = WordClusters.read(MODEL_DIR / CLUSTERS_FILE)
    members: list[dict[str, Any]] = []
    for setting in settings:
        for seed in seeds:
            member = train_member(train, dev, setting, clusters, params, seed, data_hash, args.cache)
            members.append(member)
            trials += member["trials"]
            if len(seeds) == 1 and (chosen is None or member["score"] > chosen[0]):
                chosen = (member["score"], member["weights"], member["scores"], member["epoch"], setting)
    ensemble: dict[str, Any] | None = None
    if len(seeds) > 1:
        setting = settings[0]
        ensemble = choose_ensemble(members, dev, setting, clusters)
        size = ensemble["members"]
        weights = (
            members[0]["weights"]
            if size == 1
            else ensemble_weights([member["weights"] for member in members[:size]])
        )
        chosen = (ensemble["score"], weights, ensemble["scores"], members[0]["epoch"], setting)
    assert chosen is not None
    _, weights, scores, epoch, setting = chosen
    layers, with_clusters = int(setting.split("+")[0]), setting.endswith("+clusters")
    args.out.mkdir(parents=True, exist_ok=True)
    if with_clusters and args.out.resolve() != MODEL_DIR.resolve():
        shutil.copy(MODEL_DIR / CLUSTERS_FILE, args.out / CLUSTERS_FILE)
    np.savez_compressed(
        args.out / f"{CONTEXT_MODEL_NAME}.npz",
        **{name: value.astype(np.float16) for name, value in weights.items()},
    )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    card = {
        "model": "BiLSTM head with two linear-chain CRFs (skill, knowledge; BIO) over MiniLM word vectors",
        "data": DATA_SOURCE,
        "train_sha256": data_hash,
        "encoder": {
            "model": "all-MiniLM-L6-v2 (plugins/postings/skills/embeddings.py, NumPy)",
            "layers": layers,
            "pooling": "mean of the word's WordPiece pieces; one sentence per pass",
        },
        "word_clusters": with_clusters,
        "architecture": {
            "input": "softmax-weighted mix of the embedding layer and the first `layers` layers (learned), "
            f"plus surface features {list(SURFACE_FEATURES)}",
            "projection": params["projection"],
            "lstm_per_direction": params["lstm"],
            "output": "emission scores for O/B/I of each kind; one CRF per kind (transitions, start, end)",
            "weights_dtype": "float16",
        },
        "hyper_parameters": {**params, "chosen_epoch": epoch, "seed": seeds[0], "optimizer": "Adam"},
        "ensemble": None if ensemble is None else {key: ensemble[key] for key in ENSEMBLE_CARD_KEYS},
        "selection": "each setting of --settings and each epoch: best mean of strict and loose span F1 on "
        "SkillSpan dev (kinds together); dev is never trained on",
        "dev_scores": scores,
        "trials": trials,
        "train_seconds": {
            "wall": round(time.perf_counter() - wall, 1),
            "cpu": round(usage.ru_utime + usage.ru_stime, 1),
            "cpu_process_time": round(time.process_time() - cpu, 1),
            "threads": args.threads,
            "members": [member["seconds"] for member in members],
        },
        "command": COMMAND
        + (f" --settings {args.settings}" if args.settings != DEFAULT_SETTINGS else "")
        + (f" --seeds {args.seeds}" if args.seeds != DEFAULT_SEEDS else ""),
        "license": "CC BY 4.0",
        "attribution": ATTRIBUTION,
    }
    (args.out / f"{CONTEXT_MODEL_NAME}.json").write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")
    size = (args.out / f"{CONTEXT_MODEL_NAME}.npz").stat().st_size
    print(f"chose {setting}, epoch {epoch}, {size} bytes; {card['train_seconds']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
