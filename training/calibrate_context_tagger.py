"""Choose the context tagger's decoding biases and write them to its card (`"decoding"`).

    python -m training.calibrate_context_tagger [--data-dir D] [--model-dir DIR] [--cache DIR]

The trained head's CRFs can be pushed towards or away from tagging: a constant added to the "O"
emission of every token of one kind (positive: fewer, surer mentions; negative: more). Training
does not choose it (the CRF's likelihood is not span F1). Two choices, each on data it is not
reported on:

1. The bias of every posting, per kind, on SkillSpan dev (the split the epoch is selected on), by
   the trainer's criterion (mean of strict and loose span F1, kinds together).
2. The sparse rule: a posting where the tagger finds fewer than `below` mentions (decoded with the bias of 1.)
   is decoded again with another bias per kind. SkillSpan postings have many mentions each and
   keep theirs; Sayfullina's one-sentence snippets of one soft skill, often a lone adjective
   ("independent"), are where the SkillSpan-trained head under-tags. Chosen on **Sayfullina
   train** (3,705 snippets): the best mean of strict and loose F1 (kinds together) among the rules
   that keep SkillSpan dev's (the same figure) within `SKILLSPAN_SLACK` of no rule, and Sayfullina
   train's strict F1 within `STRICT_SLACK`: a strong bias widens mentions over most of a snippet,
   which loose F1 rewards and strict F1 shows (those rules are recorded as alternatives). "Always"
   (`below` infinite) is in the grid: a single bias for every posting, the simpler alternative,
   wins only if it keeps SkillSpan dev too.

Sayfullina dev is scored once, with the chosen decoding, for the card; it never chooses. Every
grid point's SkillSpan dev and Sayfullina train scores go to the card too, so the trade of the
alternatives (a single bias for everything, the best rule for Sayfullina alone) can be read.
MiniLM's vectors are cached as by the trainer (`train_context_tagger.build_corpus`).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from plugins.postings.skills.context_tagger import CONTEXT_MODEL_NAME, TAGS, ContextTagger
from plugins.postings.skills.embeddings import MiniLMEmbeddings
from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention
from plugins.postings.skills.skill_metrics import SPAN_MODES, span_scores
from plugins.postings.skills.skill_tagger import MODEL_DIR, mentions_of_tags
from training.span_corpus import load_conll, load_skillspan
from training.train_skill_tagger import default_data_dir, selection_score

BASE_GRID = (-1.0, -0.5, 0.0, 0.5, 1.0)
SPARSE_GRID = (-3.0, -2.5, -2.0, -1.5, -1.0, -0.75, -0.5, -0.25, 0.0)
BELOW_GRID = (1, 2, 3, 4, 5, 6, 8, math.inf)
SKILLSPAN_SLACK = 0.002
STRICT_SLACK = 0.002
BATCH = 256


def corpus_emissions(tagger: ContextTagger, corpus: Any) -> list[np.ndarray]:
    """The head's emissions of every sentence of a corpus (`train_context_tagger.Corpus`), unbiased."""
    layers = tagger.head.layers
    words = [[token.text for token in tokens] for _, tokens in corpus.sentences]
    result: list[np.ndarray] = []
    for begin in range(0, len(words), 64):
        states = [s[: layers + 1].astype(np.float32) for s in corpus.states[begin : begin + 64]]
        result += tagger.head.emissions_batch(states, words[begin : begin + 64])
    return result


def mentions_at(
    tagger: ContextTagger, corpus: Any, emissions: list[np.ndarray], kind_index: int, bias: float
) -> dict[str, list[Mention]]:
    """Each document's mentions of one kind, decoded with `bias` on the O emission."""
    kind = MENTION_KINDS[kind_index]
    found: dict[str, list[Mention]] = {document.doc_id: [] for document in corpus.documents}
    for begin in range(0, len(emissions), BATCH):
        all_tags, all_marginals = tagger.head.decode_batch(emissions[begin : begin + BATCH], kind_index, bias)
        for (number, tokens), tags, marginals in zip(
            corpus.sentences[begin : begin + BATCH], all_tags, all_marginals, strict=True
        ):
            document = corpus.documents[number]
            found[document.doc_id] += mentions_of_tags(
                document.text,
                tokens,
                tags,
                lambda i, tags=tags, m=marginals: m[i, TAGS.index(tags[i])],
                kind,
                "description",
            )
    return found


class Decodings:
    """A corpus's mentions at every bias of the grids, per kind (kinds decode apart), kept as the gold
    token spans they cover (`score_mentions`' matching, done once per decoding rather than per rule)."""

    def __init__(self, tagger: ContextTagger, corpus: Any) -> None:
        self.corpus = corpus
        emissions = corpus_emissions(tagger, corpus)
        self.gold: dict[str, set[tuple[Any, int, int]]] = {kind: set() for kind in (*MENTION_KINDS, "any")}
        for document in corpus.documents:
            for kind in MENTION_KINDS:
                for first, end in document.gold[kind]:
                    self.gold[kind].add((document.doc_id, first, end))
                    self.gold["any"].add((document.doc_id, first, end))
        self.at: dict[tuple[int, float], dict[str, list[tuple[int, int]]]] = {}
        unmatched = 0
        for kind_index in range(len(MENTION_KINDS)):
            for bias in sorted(set(BASE_GRID) | set(SPARSE_GRID)):
                spans: dict[str, list[tuple[int, int]]] = {}
                by_id = {document.doc_id: document for document in corpus.documents}
                for doc_id, found in mentions_at(tagger, corpus, emissions, kind_index, bias).items():
                    spans[doc_id] = []
                    for mention in found:
                        span = by_id[doc_id].gold_token_span(mention.start, mention.end)
                        if span is None:  # matches nothing: a span of its own
                            unmatched += 1
                            span = (-2 * unmatched, -2 * unmatched + 1)
                        spans[doc_id].append(span)
                self.at[(kind_index, bias)] = spans

    def scores(
        self, base: tuple[float, float], below: float = 0, sparse: tuple[float, float] = (0.0, 0.0)
    ) -> dict[str, Any]:
        """Strict and loose P/R/F1 per kind and kinds together ("any"), as `score_mentions`, with
        `base` biases, and `sparse` ones where fewer than `below` mentions were found at `base`."""
        guessed: dict[str, set[tuple[Any, int, int]]] = {kind: set() for kind in self.gold}
        for document in self.corpus.documents:
            doc_id = document.doc_id
            biases = base
            if sum(len(self.at[(k, b)][doc_id]) for k, b in enumerate(base)) < below:
                biases = sparse
            for kind_index, bias in enumerate(biases):
                for first, end in self.at[(kind_index, bias)][doc_id]:
                    guessed[MENTION_KINDS[kind_index]].add((doc_id, first, end))
                    guessed["any"].add((doc_id, first, end))
        self.last_guessed = guessed["any"]
        return {
            kind: {mode: span_scores(self.gold[kind], guessed[kind], mode).__dict__ for mode in SPAN_MODES}
            for kind in self.gold
        }

    def mean_tokens(self, *args: Any) -> float:
        """Mean length in gold tokens of the mentions (kinds together) a decoding gives."""
        self.scores(*args)
        spans = [end - first for _, first, end in self.last_guessed if first >= 0]
        return round(sum(spans) / max(len(spans), 1), 2)

    def gold_mean_tokens(self) -> float:
        spans = [end - first for _, first, end in self.gold["any"]]
        return round(sum(spans) / max(len(spans), 1), 2)


def brief(scores: dict[str, Any]) -> dict[str, float]:
    return {
        f"{kind}_{mode}": round(scores[kind][mode]["f1"], 4)
        for kind in ("skill", "knowledge", "any")
        for mode in ("strict", "loose")
    }


def calibrate(
    tagger: ContextTagger,
    skillspan_dev: Any,
    sayfullina_train: Any,
    sayfullina_dev: Any | None = None,
    full: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The card's "decoding": the chosen biases, how they were chosen, the alternatives and the best
    rule of each `below`; every grid point's scores are appended to `full` when given."""
    started = time.process_time()
    dev = Decodings(tagger, skillspan_dev)
    base_grid = []
    best_base: tuple[float, tuple[float, float]] | None = None
    for skill_bias in BASE_GRID:
        for knowledge_bias in BASE_GRID:
            scores = dev.scores((skill_bias, knowledge_bias))
            selected = selection_score(scores)
            base_grid.append({"o_bias": [skill_bias, knowledge_bias], "skillspan_dev": brief(scores)})
            # Ties go to the smaller bias (0 first): a bias must earn its place.
            key = (selected, -abs(skill_bias) - abs(knowledge_bias))
            if best_base is None or key > (best_base[0], -sum(map(abs, best_base[1]))):
                best_base = (selected, (skill_bias, knowledge_bias))
    assert best_base is not None
    base_score, base = best_base

    train = Decodings(tagger, sayfullina_train)
    no_rule_train = train.scores(base)
    rules = []
    for below in BELOW_GRID:
        for skill_bias in SPARSE_GRID:
            for knowledge_bias in SPARSE_GRID:
                sparse = (skill_bias, knowledge_bias)
                dev_scores = dev.scores(base, below, sparse)
                train_scores = train.scores(base, below, sparse)
                rules.append(
                    {
                        "below": "always" if below == math.inf else below,
                        "o_bias": list(sparse),
                        "skillspan_dev_selection": round(selection_score(dev_scores), 4),
                        "skillspan_dev": brief(dev_scores),
                        "sayfullina_train_selection": round(selection_score(train_scores), 4),
                        "sayfullina_train_any_loose": round(train_scores["any"]["loose"]["f1"], 4),
                        "sayfullina_train_any_strict": round(train_scores["any"]["strict"]["f1"], 4),
                        "_key": (below, sparse),
                    }
                )
    keeps_skillspan = [
        r for r in rules if r["skillspan_dev_selection"] >= round(base_score, 4) - SKILLSPAN_SLACK
    ]
    # Loose F1 rewards a span that covers most of a snippet (its one gold span is 1.7 words on
    # average): a strong bias widens mentions, strict F1 falls while loose climbs. So the chosen rule
    # must keep Sayfullina train's strict F1 too: more soft skills found, boundaries no worse.
    no_rule_strict = round(no_rule_train["any"]["strict"]["f1"], 4)
    allowed = [
        r for r in keeps_skillspan if r["sayfullina_train_any_strict"] >= no_rule_strict - STRICT_SLACK
    ]

    def best(candidates: list[dict[str, Any]], figure: str) -> dict[str, Any]:
        # Ties: the smaller bias, then the smaller `below` (the rule that touches the fewest postings).
        return max(candidates, key=lambda r: (r[figure], -sum(map(abs, r["o_bias"])), -r["_key"][0]))

    chosen: dict[str, Any] | None = best(allowed, "sayfullina_train_selection")
    assert chosen is not None
    alternatives = {
        # Loose F1 alone rewards spans that cover a whole snippet (one gold span each): not chosen by.
        "by_sayfullina_train_loose_alone": best(keeps_skillspan, "sayfullina_train_any_loose"),
        "strict_not_held": best(keeps_skillspan, "sayfullina_train_selection"),
        "one_bias_for_every_posting": best(
            [r for r in allowed if r["below"] == "always"], "sayfullina_train_selection"
        ),
        "best_for_sayfullina_train_ignoring_skillspan": best(rules, "sayfullina_train_selection"),
    }
    if chosen["sayfullina_train_selection"] <= round(selection_score(no_rule_train), 4):
        chosen = None  # no rule beats none
    record: dict[str, Any] = {
        "o_bias": dict(zip(MENTION_KINDS, base, strict=True)),
        "o_bias_selection": f"grid {list(BASE_GRID)} per kind: best mean of strict and loose span F1 on "
        "SkillSpan dev (kinds together), ties to the smaller bias",
        "sparse_selection": f"below in {['always' if b == math.inf else b for b in BELOW_GRID]}, bias per "
        f"kind in {list(SPARSE_GRID)}: best mean of strict and loose span F1 (kinds together) on "
        "Sayfullina train among the rules keeping SkillSpan dev's (the same figure) within "
        f"{SKILLSPAN_SLACK} and Sayfullina train's strict F1 within {STRICT_SLACK} of no rule",
        "skillspan_dev_no_rule": brief(dev.scores(base)),
        "sayfullina_train_no_rule": {
            "selection": round(selection_score(no_rule_train), 4),
            "any_strict": round(no_rule_train["any"]["strict"]["f1"], 4),
            "any_loose": round(no_rule_train["any"]["loose"]["f1"], 4),
        },
    }
    if chosen is not None:
        below = chosen["below"]
        record["sparse"] = {
            "below": 10**6 if below == "always" else below,
            "o_bias": dict(zip(MENTION_KINDS, chosen["o_bias"], strict=True)),
        }
    held = Decodings(tagger, sayfullina_dev) if sayfullina_dev is not None else None
    for name, rule in (("chosen", chosen), *alternatives.items()):
        if rule is None:
            continue
        entry = {k: v for k, v in rule.items() if k != "_key"}
        entry["sayfullina_train_mean_mention_tokens"] = train.mean_tokens(base, *rule["_key"])
        if held is not None:  # reported, never chosen on
            scores = held.scores(base, *rule["_key"])
            entry["sayfullina_dev"] = {
                mode: {m: round(scores["any"][mode][m], 4) for m in ("precision", "recall", "f1")}
                for mode in ("strict", "loose")
            }
        record[f"sparse_{name}"] = entry
    record["sayfullina_train_gold_mean_tokens"] = train.gold_mean_tokens()
    if held is not None:
        scores = held.scores(base)
        record["sayfullina_dev_no_rule"] = {
            mode: {m: round(scores["any"][mode][m], 4) for m in ("precision", "recall", "f1")}
            for mode in ("strict", "loose")
        }
    record["base_grid"] = [
        {
            "o_bias": entry["o_bias"],
            "skillspan_dev_any_strict_loose": [
                entry["skillspan_dev"]["any_strict"],
                entry["skillspan_dev"]["any_loose"],
            ],
        }
        for entry in base_grid
    ]
    record["sparse_best_per_below"] = [
        {
            k: v
            for k, v in best(
                [r for r in allowed if r["below"] == below], "sayfullina_train_selection"
            ).items()
            if k not in ("_key", "skillspan_dev")
        }
        for below in dict.fromkeys(r["below"] for r in rules)
        if any(r["below"] == below for r in allowed)
    ]
    if full is not None:
        full.extend({k: v for k, v in rule.items() if k != "_key"} for rule in rules)
    record["cpu_seconds"] = round(time.process_time() - started, 1)
    return record


def write_decoding(model_dir: Path, record: dict[str, Any]) -> None:
    """Put the chosen biases (and how they were chosen) into the model's card, under "decoding"."""
    card_path = Path(model_dir) / f"{CONTEXT_MODEL_NAME}.json"
    card = json.loads(card_path.read_text(encoding="utf-8"))
    card["decoding"] = record
    card_path.write_text(json.dumps(card, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    from training.train_context_tagger import build_corpus, default_cache

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--dry-run", action="store_true", help="print the choice, leave the card alone")
    parser.add_argument("--record", type=Path, help="also write the record with every grid point here")
    args = parser.parse_args(argv)
    data_dir = default_data_dir(args.data_dir)
    encoder = MiniLMEmbeddings()
    tagger = ContextTagger.from_dir(args.model_dir, encoder=encoder)  # biases: given per decoding here
    sayfullina = data_dir / "sayfullina_softskills"
    documents = [
        load_skillspan(data_dir / "skillspan" / "dev.json"),
        load_conll(sayfullina / "sayfullina_train.conll", "skill", "sayfullina-"),
        load_conll(sayfullina / "sayfullina_dev.conll", "skill", "sayfullina-"),
    ]
    corpora = [build_corpus(split, encoder, args.cache) for split in documents]
    full: list[dict[str, Any]] = []
    record = calibrate(tagger, *corpora, full=full)
    if not args.dry_run:
        write_decoding(args.model_dir, record)
    if args.record:
        args.record.write_text(json.dumps({**record, "sparse_grid": full}, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in record.items() if not k.endswith(("_grid", "_below"))}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
