"""Choose the context tagger's decoding bias (one number per kind) on SkillSpan dev, write it to the card.

    python -m training.calibrate_context_tagger [--data-dir D] [--model-dir DIR] [--cache DIR]

The trained head's CRF can be biased towards or away from tagging: a constant added to the "O"
emission of every token of one kind (positive: fewer, surer mentions; negative: more). Training
does not choose it (the CRF's likelihood is not span F1); here every pair of biases on a coarse
grid (`BIAS_GRID`, per kind) decodes SkillSpan dev once and the pair with the best mean of strict
and loose F1, kinds together (the trainer's criterion), is kept. Two numbers chosen on 58
postings: a small choice, unlike the head's weights, and reported beside the unbiased scores.

`train_context_tagger` runs this after training, so its one command still rebuilds the model;
run alone, it re-chooses the bias of the model in --model-dir (its MiniLM vectors of dev are
cached as by the trainer). Sayfullina dev is scored with the chosen bias for the card, never used
to choose.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from plugins.postings.skills.context_tagger import CONTEXT_MODEL_NAME, ContextTagger
from plugins.postings.skills.embeddings import MiniLMEmbeddings
from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention
from plugins.postings.skills.skill_tagger import MODEL_DIR
from training.span_corpus import load_conll, load_skillspan, score_mentions
from training.train_skill_tagger import default_data_dir, selection_score

BIAS_GRID = (-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0)


def dev_emissions(tagger: ContextTagger, corpus: Any) -> list[np.ndarray]:
    """The head's emissions of every sentence of a corpus (`train_context_tagger.Corpus`), unbiased."""
    layers = tagger.head.layers
    words = [[token.text for token in tokens] for _, tokens in corpus.sentences]
    states = [s[: layers + 1].astype(np.float32) for s in corpus.states]
    result: list[np.ndarray] = []
    for begin in range(0, len(words), 64):
        result += tagger.head.emissions_batch(states[begin : begin + 64], words[begin : begin + 64])
    return result


def tag_with_bias(
    tagger: ContextTagger, corpus: Any, emissions: list[np.ndarray], bias: tuple[float, float]
) -> dict[str, list[Mention]]:
    """Every document's mentions when decoded with `bias` (skill, knowledge) on the O emission."""
    saved = tagger.head.o_bias
    tagger.head.o_bias = np.asarray(bias, np.float32)
    try:
        predicted: dict[str, list[Mention]] = {document.doc_id: [] for document in corpus.documents}
        by_document: dict[int, list[int]] = {}
        for row, (number, _) in enumerate(corpus.sentences):
            by_document.setdefault(number, []).append(row)
        for number, rows in by_document.items():
            document = corpus.documents[number]
            found, _ = tagger.decode_sentences(
                document.text,
                [corpus.sentences[r][1] for r in rows],
                [emissions[r] for r in rows],
                "description",
            )
            predicted[document.doc_id] += found
        return predicted
    finally:
        tagger.head.o_bias = saved


def brief(scores: dict[str, Any]) -> dict[str, float]:
    return {
        f"{kind}_{mode}": round(scores[kind][mode]["f1"], 4)
        for kind in ("skill", "knowledge", "any")
        for mode in ("strict", "loose")
    }


def calibrate(
    tagger: ContextTagger, dev: Any, sayfullina: Any | None = None
) -> tuple[tuple[float, float], dict[str, Any]]:
    """The chosen (skill, knowledge) bias and a record of the choice for the card."""
    started = time.process_time()
    emissions = dev_emissions(tagger, dev)
    # Kinds decode apart, so one decoding per bias value gives both kinds' mentions at that value.
    at_bias = {value: tag_with_bias(tagger, dev, emissions, (value, value)) for value in BIAS_GRID}
    grid: list[dict[str, Any]] = []
    best: tuple[float, tuple[float, float], dict[str, Any]] | None = None
    for skill_bias in BIAS_GRID:
        for knowledge_bias in BIAS_GRID:
            bias = (skill_bias, knowledge_bias)
            predicted = {
                doc_id: [m for m in at_bias[skill_bias][doc_id] if m.kind == "skill"]
                + [m for m in at_bias[knowledge_bias][doc_id] if m.kind == "knowledge"]
                for doc_id in at_bias[skill_bias]
            }
            scores = score_mentions(dev.documents, predicted)
            selected = selection_score(scores)
            grid.append({"bias": list(bias), "dev": brief(scores)})
            if best is None or selected > best[0] + 1e-9:
                best = (selected, bias, scores)
    assert best is not None
    _, chosen, scores = best
    unbiased = next(entry["dev"] for entry in grid if entry["bias"] == [0.0, 0.0])
    record: dict[str, Any] = {
        "o_bias": dict(zip(MENTION_KINDS, chosen, strict=True)),
        "selection": "grid of O-emission biases per kind "
        f"{list(BIAS_GRID)}: best mean of strict and loose span F1 on SkillSpan dev (kinds together)",
        "dev_scores_unbiased": unbiased,
        "dev_scores": scores,
        "grid": grid,
    }
    if sayfullina is not None:
        sayfullina_emissions = dev_emissions(tagger, sayfullina)
        record["sayfullina_dev_any_loose_f1"] = {
            str(list(bias)): round(
                score_mentions(
                    sayfullina.documents, tag_with_bias(tagger, sayfullina, sayfullina_emissions, bias)
                )["any"]["loose"]["f1"],
                4,
            )
            for bias in ((0.0, 0.0), chosen)
        }
    record["cpu_seconds"] = round(time.process_time() - started, 1)
    return chosen, record


def main(argv: list[str] | None = None) -> int:
    from training.train_context_tagger import build_corpus, default_cache

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--cache", type=Path, default=default_cache())
    args = parser.parse_args(argv)
    data_dir = default_data_dir(args.data_dir)
    encoder = MiniLMEmbeddings()
    tagger = ContextTagger.from_dir(args.model_dir, encoder=encoder)
    tagger.head.o_bias = np.zeros(len(MENTION_KINDS), np.float32)
    dev = build_corpus(load_skillspan(data_dir / "skillspan" / "dev.json"), encoder, args.cache)
    sayfullina = build_corpus(
        load_conll(data_dir / "sayfullina_softskills" / "sayfullina_dev.conll", "skill", "sayfullina-"),
        encoder,
        args.cache,
    )
    chosen, record = calibrate(tagger, dev, sayfullina)
    write_decoding(args.model_dir, record)
    print(json.dumps({k: v for k, v in record.items() if k not in ("grid", "dev_scores")}, indent=2))
    return 0


def write_decoding(model_dir: Path, record: dict[str, Any]) -> None:
    """Put the chosen bias (and how it was chosen) into the model's card, under "decoding"."""
    card_path = Path(model_dir) / f"{CONTEXT_MODEL_NAME}.json"
    card = json.loads(card_path.read_text(encoding="utf-8"))
    card["decoding"] = record
    card_path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
