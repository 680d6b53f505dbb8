"""A model as referee of the linker's unsure answers, on the Decorte et al. TECH and HOUSE validation spans.

Measures what PIPELINE_LINK_STYLE=linker+llm does to resolution (task (c) of
`benchmarks.linking_quality`): right / wrong / unmatched per span at the shipped threshold, the
linker alone ("before"), with the referee ("after"), and with a perfect referee asked the same
questions (the gold concept when it is among the candidates, else "none": the bound of this
design). The spans of one sentence are one call, as the mentions of one posting are in the
pipeline; the prompt, the choice of entities asked and how the answers are applied are the
product's (`plugins/postings/skills/link_referee.py`).

    python -m benchmarks.linking_referee [--referee-model M] [--ask-below 0.8] [--limit N] [--out DIR]

The model runs on the configured backend (Settings.from_env(): the embedded model by default,
Ollama when OLLAMA_HOST is set, an OpenAI-compatible server when PIPELINE_LLM_BACKEND says so).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from benchmarks.linking_quality import add_linker_arguments, build_resolver
from benchmarks.report import run_and_report, shared_data_dir
from domain.language.templates import render_templates
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_llm_resource
from plugins.postings.skills import link_referee
from plugins.postings.skills.embeddings import MiniLMEmbeddings, RememberingEmbeddings
from plugins.postings.use_cases.skill_entities import resolution_entity
from training.linking_data import ESCO_FILE, read_decorte_splits
from training.linking_evaluation import GoldMapper, span_outcome

NAME = "linking_referee"
OPTIONS = {"temperature": 0.0, "max_tokens": 120}


def outcome(entities: list[dict[str, Any]], gold: set[str]) -> str:
    """A span's outcome from its entities, counted as `linking_quality` counts resolution (c)."""
    return span_outcome([entity["concept_uri"] for entity in entities], gold)


def oracle_choice(entity: dict[str, Any], gold: set[str]) -> str:
    """A perfect referee's answer: the letter of a gold candidate, else "none"."""
    for letter, candidate in zip(link_referee.LETTERS, entity.get("candidates") or [], strict=False):
        if candidate["concept_uri"] in gold:
            return letter
    return link_referee.NO_CONCEPT


def completion_referee(generate: Callable[[str], str]) -> Callable[[str], str]:
    """listing -> answer: the few-shot prompt exactly as the chain's referee step renders it."""

    def ask(listing: str) -> str:
        prompt, _, _ = render_templates(
            link_referee.REFEREE_PROMPT, "", {}, {"resolve": {"listing": listing}}
        )
        return generate(prompt)

    return ask


def run_split(
    split: Any, resolver: Any, ask: Callable[[str], str], limit: int | None, ask_below: float
) -> dict[str, Any]:
    """Right / wrong / unmatched before and after the referee; `ask(listing) -> answer` asks it about
    one sentence's unsure entities (the first `limit` sentences with a gold concept)."""
    gold = GoldMapper(resolver)
    queries: dict[str, list[tuple[Any, set[str]]]] = {}
    for query in split.span_queries:
        uris = gold(query.gold_labels)
        if uris:
            queries.setdefault(query.sentence, []).append((query, uris))
    sentences = {
        sentence: [
            ([resolution_entity(r, q.span, "skill") for r in resolver.resolve(q.span, q.sentence)], uris)
            for q, uris in spans
        ]
        for sentence, spans in list(queries.items())[:limit]
    }
    before, after, oracle, transitions = Counter(), Counter(), Counter(), Counter()
    counts = link_referee.RefereeCounts()
    calls, seconds, unreadable_calls = 0, 0.0, 0
    for sentence, spans in sentences.items():
        entities = [entity for span_entities, _ in spans for entity in span_entities]
        asked = link_referee.asked_entities(entities, ask_below)
        choices: list[Any] = []
        if asked:
            listing = link_referee.referee_listing(entities, asked, [sentence] * len(entities))
            started = time.perf_counter()
            text = ask(listing)
            seconds += time.perf_counter() - started
            calls += 1
            try:
                choices = list(json.loads(text)["choices"])
            except (ValueError, KeyError, TypeError):
                unreadable_calls += 1
        refereed, posting_counts = link_referee.apply_choices(entities, asked, choices)
        # the best any referee could do with the same questions: the gold concept when it is among
        # the candidates, else "none"
        golds = [uris for span_entities, uris in spans for _ in span_entities]
        best, _ = link_referee.apply_choices(
            entities, asked, [oracle_choice(entities[i], golds[i]) for i in asked]
        )
        counts.add(posting_counts)
        position = 0
        for span_entities, uris in spans:
            part = slice(position, position + len(span_entities))
            was, now = outcome(span_entities, uris), outcome(refereed[part], uris)
            oracle[outcome(best[part], uris)] += 1
            position += len(span_entities)
            before[was] += 1
            after[now] += 1
            transitions[f"{was} -> {now}"] += was != now
    spans = sum(before.values())
    shares = max(spans, 1)
    return {
        "spans": spans,
        "sentences_asked": calls,
        "seconds_per_call": round(seconds / calls, 2) if calls else None,
        "unreadable_calls": unreadable_calls,
        "referee": asdict(counts),
        "before": {k: round(100 * before[k] / shares, 1) for k in ("right", "wrong", "unmatched")},
        "after": {k: round(100 * after[k] / shares, 1) for k in ("right", "wrong", "unmatched")},
        "perfect_referee": {k: round(100 * oracle[k] / shares, 1) for k in ("right", "wrong", "unmatched")},
        "changes": {k: v for k, v in sorted(transitions.items()) if v},
    }


def referee_setup(args: argparse.Namespace) -> tuple[list[Any], Any, RememberingEmbeddings]:
    """The Decorte validation splits, the shipped linker over ESCO, and its query vectors (save them
    at the end: the next run reads them)."""
    root = shared_data_dir(args.data_dir)
    splits = read_decorte_splits(root)
    embeddings = RememberingEmbeddings(
        MiniLMEmbeddings(), args.embedding_cache / "linking-benchmark-queries.npz"
    )
    return splits, build_resolver(root / ESCO_FILE, "linker", args, embeddings), embeddings


def run(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    splits, resolver, embeddings = referee_setup(args)
    settings = Settings.from_env()
    llm = build_llm_resource(settings)
    llm.ensure_loaded(args.referee_model)

    def generate(prompt: str) -> str:
        return llm.generate(
            args.referee_model, prompt, "", dict(link_referee.REFEREE_SCHEMA), dict(OPTIONS)
        ).text

    results: dict[str, Any] = {
        "protocol": "Decorte et al. 2022 validation spans with an ESCO label; (c) at the shipped threshold, "
        "before and after the referee; one call per sentence",
        "backend": settings.llm_backend,
        "referee_model": args.referee_model,
        "ask_below": args.ask_below,
        "splits": {},
    }
    for split in splits:
        print(f"referee: {split.name}", flush=True)
        results["splits"][split.name] = run_split(
            split, resolver, completion_referee(generate), args.limit, args.ask_below
        )
    embeddings.save()
    return results, render_markdown(results)


def render_markdown(results: dict[str, Any]) -> str:
    lines = [
        "# The linking referee on the Decorte et al. validation spans",
        "",
        f"{results['protocol']}. Referee: {results['referee_model']} on the {results['backend']} backend; "
        f"entities asked below confidence {results['ask_below']}.",
        "",
        "| split | spans | right / wrong / unmatched, linker | with the referee | a perfect referee | "
        "calls | s/call | asked | kept | changed | made unmatched | unreadable |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in results["splits"].items():
        b, a, o, r = row["before"], row["after"], row["perfect_referee"], row["referee"]
        lines.append(
            f"| {name} | {row['spans']} | {b['right']} / {b['wrong']} / {b['unmatched']} % | "
            f"{a['right']} / {a['wrong']} / {a['unmatched']} % | "
            f"{o['right']} / {o['wrong']} / {o['unmatched']} % | {row['sentences_asked']} | "
            f"{row['seconds_per_call']} | {r['asked']} | {r['kept']} | {r['changed']} | {r['unmatched']} | "
            f"{r['unreadable']} |"
        )
    lines.append("")
    for name, row in results["splits"].items():
        changes = ", ".join(f"{k}: {v}" for k, v in row["changes"].items()) or "none"
        lines.append(f"- {name}, spans that changed outcome: {changes}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.linking_referee", description=__doc__.split("\n")[0]
    )
    add_linker_arguments(parser)
    parser.add_argument(
        "--referee-model", default="gemma3:270m", help="the model that referees (default gemma3:270m)"
    )
    parser.add_argument(
        "--ask-below", type=float, default=link_referee.ASK_BELOW, help="ask entities below this"
    )
    parser.add_argument("--limit", type=int, default=None, help="at most this many sentences per split")
    args = parser.parse_args(argv)
    args.prior_unknown = False
    return args


def main(argv: list[str] | None = None) -> int:
    return run_and_report(NAME, run, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
