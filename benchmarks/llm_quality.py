"""One quality report for any backend: every LLM-dependent measure on one model, in one table.

    python -m benchmarks.llm_quality --backend ollama|openai|embedded --model NAME
        [--prompt-style auto|chat|completion|both] [--limit N] [--measures M1,M2] [--data-dir D] [--out DIR]

Measures (each on a small sample; the table says how many):
- `summary-demo`, `summary-skillspan`: summary faithfulness: posting_summary on the demo postings and on
  SkillSpan postings (the dev split, never test) rebuilt from their sentences; a summary is faithful
  when it passes the use case's checks and the faithfulness checker finds no unsupported fact in it.
- `judge`: judge discrimination: the LLM judge grades calibration cases (each calibration posting's
  faithful summary, one with an invented fact, one looping); flagged = any criterion below
  PIPELINE_REVIEW_BELOW. A judge that discriminates flags the bad ones and not the faithful ones.
- `verification`: skills verification: posting_skills' tagger+llm chain (candidates -> the model keeps,
  relabels or drops the unsure ones and adds missed ones -> the stored output) against the tagger alone
  on the same SkillSpan dev postings: span F1 of the stored output, kinds together.
- `referee`: the linking referee on the Decorte et al. TECH and HOUSE validation spans: right / wrong /
  unmatched with the referee, the linker alone, and a perfect referee asked the same questions.

Every call is made as the pipeline makes it (the use case's or step's prompt, schema and options), in
the prompt style asked: `completion` (the few-shot prompts written for a base model), `chat` (the chat
forms, the posting in a message of its own), `auto` (what the backend says of the model), or `both`
(completion and chat side by side). The backend is the deployment's server (OLLAMA_HOST,
PIPELINE_OPENAI_BASE_URL) or the embedded model. CPU seconds are this process's: they include the
embedded model's work, not a server's.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmarks.judge_discrimination import CachedGenerator, llm_judge, summarize, values_of
from benchmarks.linking_referee import referee_setup, run_split
from benchmarks.report import DEFAULT_RESULTS_DIR, shared_data_dir, write_report
from benchmarks.skillspan_postings import skillspan_pipeline_postings
from domain.language.chat_prompts import AUTO_STYLE, CHAT_STYLE, COMPLETION_STYLE
from domain.language.llm_types import ItemError, LLMError
from domain.language.output_parsing import parse_output
from domain.language.steps import LLMStep
from pipeline_defs.settings import PROJECT_ROOT, Settings
from pipeline_defs.wiring import build_llm_resource
from plugins.postings.commands.demo_command import DEMO_POSTINGS
from plugins.postings.quality.faithfulness import FaithfulnessChecker, default_checker
from plugins.postings.quality.judge_calibration import CalibrationCase, calibrate_judge, calibration_cases
from plugins.postings.skills.concept_reranker import DEFAULT_MODEL_PATH
from plugins.postings.skills.link_referee import ASK_BELOW
from plugins.postings.skills.mention_grounding import Mention
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH
from plugins.postings.use_cases.posting_skills import final_skills, find_candidates, verified_skills
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from plugins.postings.use_cases.shipped import entities_use_case
from resources.llm import LLMResource
from training.span_corpus import GoldDocument, load_skillspan, score_mentions

NAME = "llm_quality"
MEASURES = ("summary-demo", "summary-skillspan", "judge", "verification", "referee")
DEFAULT_LIMITS = {
    "summary-demo": 5,
    "summary-skillspan": 4,
    "judge": 6,  # calibration postings, three cases each
    "verification": 4,
    "referee": 6,  # sentences per split
}
"""Small: `--prompt-style both` on the embedded 270M model took 656 CPU s without the referee (2026-11-27),
about 11 minutes of two cores."""
SKILLSPAN_SPLIT = "dev"  # the validation split; the test split is never read
STYLE_CHOICES = (AUTO_STYLE, COMPLETION_STYLE, CHAT_STYLE, "both")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all threads: the embedded model's too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Row:
    """One line of the table: a measure in one style."""

    measure: str
    sample: str
    style: str
    result: str
    details: str = ""
    measure_id: str = ""
    calls: int = 0
    cpu_seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Model:
    """The model under test on its backend, asked in one style; counts its calls."""

    llm: LLMResource
    name: str
    style: str
    calls: int = 0

    @property
    def chat(self) -> bool:
        return self.style == CHAT_STYLE

    def step_answer(self, step: LLMStep, values: Mapping[str, Any]) -> str:
        """One chain step's answer, rendered and sent as the chain runner sends it."""
        schema = dict(step.output_schema) if step.output_schema is not None else None
        self.calls += 1
        if self.chat and step.chat is not None:
            messages, _ = step.render_chat(values)
            return self.llm.generate(self.name, "", "", schema, dict(step.options), messages).text
        prompt, system_prompt, _ = step.render(values)
        return self.llm.generate(self.name, prompt, system_prompt, schema, dict(step.options)).text


# --- summary faithfulness -----------------------------------------------------------------------


def summary_faithfulness(
    model: Model, postings: list[dict[str, Any]], checker: FaithfulnessChecker
) -> dict[str, Any]:
    """posting_summary's first attempt at each posting: faithful (passes its checks, nothing unsupported),
    with unsupported facts, blocked by another check, or unusable (no summary could be read)."""
    generate = CachedGenerator(model.llm, None)
    use_case = replace(POSTING_SUMMARY, model=model.name)
    counts = {"faithful": 0, "unsupported": 0, "blocked_otherwise": 0, "unusable": 0}
    examples: dict[str, Any] = {}
    for posting in postings:
        record = summarize(generate, use_case, posting, retries=False, style=model.style)[0]
        summary = record["summary"]
        unsupported = checker.unsupported(summary, values_of(posting)) if summary is not None else []
        if summary is None:
            counts["unusable"] += 1
        elif unsupported:
            counts["unsupported"] += 1
        elif record["error"] is not None:
            counts["blocked_otherwise"] += 1
        else:
            counts["faithful"] += 1
        examples[posting["key"]] = {"summary": summary, "error": record["error"], "unsupported": unsupported}
    model.calls += generate.calls
    return {"postings": len(postings), **counts, "summaries": examples}


def summary_row(sample: str, figures: dict[str, Any]) -> tuple[str, str, str]:
    total = figures["postings"]
    return (
        sample,
        f"{figures['faithful']}/{total} faithful",
        f"unsupported facts {figures['unsupported']}, blocked by another check "
        f"{figures['blocked_otherwise']}, unusable {figures['unusable']}",
    )


# --- judge discrimination -----------------------------------------------------------------------


def judge_cases(postings: int) -> list[CalibrationCase]:
    """Per calibration posting: its faithful summary, the first invented variant and the last looping one."""
    by_posting: dict[str, list[CalibrationCase]] = {}
    for case in calibration_cases():
        by_posting.setdefault(str(case.posting.get("key")), []).append(case)
    chosen = []
    for cases in list(by_posting.values())[:postings]:
        chosen += [cases[0], cases[1], cases[-1]]
    return chosen


def judge_discrimination(model: Model, settings: Settings, cases: list[CalibrationCase]) -> dict[str, Any]:
    generate = CachedGenerator(model.llm, None)
    grade = llm_judge(generate, settings, model=model.name, style=model.style)
    calibration = calibrate_judge(f"LLM {model.name}", grade, cases, review_below=settings.review_below)
    model.calls += generate.calls
    return {
        "bad": calibration.bad,
        "good": calibration.good,
        "flagged_bad": calibration.flagged_bad,
        "flagged_good": calibration.flagged_good,
        "errors": len(calibration.errors),
        "error_examples": calibration.errors[:3],
        "by_kind": calibration.by_kind,
        "review_below": settings.review_below,
    }


# --- skills verification ------------------------------------------------------------------------


class _ShippedTaxonomy:
    """The taxonomy resource as the pipeline has it by default (the demo taxonomy), for the fallback."""

    def taxonomy_path(self) -> Path:
        return DEMO_TAXONOMY_PATH


@dataclass(frozen=True)
class _Resources:
    taxonomy: _ShippedTaxonomy = field(default_factory=_ShippedTaxonomy)


@dataclass(frozen=True)
class _CandidatesContext:
    resources: _Resources = field(default_factory=_Resources)


def stored_mentions(output: Mapping[str, Any]) -> list[Mention]:
    """The stored posting_skills output's mentions, at their offsets (for span scoring)."""
    return [
        Mention(skill["mention"], skill["kind"], skill["start"], skill["end"], "stored", 1.0, skill["field"])
        for skill in output["skills"]
    ]


def skills_verification(model: Model, documents: list[GoldDocument]) -> dict[str, Any]:
    """The tagger+llm chain against the tagger alone, on the same documents: F1 of what would be stored."""
    verify = verified_skills(model.name).steps.step("verify")
    assert isinstance(verify, LLMStep)
    context: Any = _CandidatesContext()
    tagger_alone: dict[str, list[Mention]] = {}
    verified: dict[str, list[Mention]] = {}
    stats = {"asked": 0, "labelled_none": 0, "relabelled": 0, "missed_proposed": 0, "unreadable": 0}
    for document in documents:
        inputs: dict[str, Any] = {"title": "", "description": document.text}
        inputs["candidates"] = find_candidates(inputs, context)
        tagger_alone[document.doc_id] = stored_mentions(final_skills(inputs, context))
        verdict: dict[str, Any] | None = None
        text = model.step_answer(verify, inputs)
        try:
            verdict = parse_output(verify, text, inputs)
        except ItemError as exc:  # the chain would fail this item; here the tagger's mentions stand
            stats["unreadable"] += 1
            stats.setdefault("unreadable_examples", []).append(f"{exc} ({text[:100]!r})"[:240])
        if verdict is not None:
            asked = inputs["candidates"]["asked"]
            candidates = inputs["candidates"]["candidates"]
            labels = list(verdict.get("labels") or [])[: len(asked)]
            stats["asked"] += len(asked)
            stats["labelled_none"] += sum(label == "none" for label in labels)
            stats["relabelled"] += sum(
                label not in ("none", candidates[index]["kind"])
                for index, label in zip(asked, labels, strict=False)
            )
            stats["missed_proposed"] += len(verdict.get("missed") or [])
            verified[document.doc_id] = stored_mentions(final_skills({**inputs, "verify": verdict}, context))
        else:
            verified[document.doc_id] = tagger_alone[document.doc_id]
    return {
        "documents": len(documents),
        "gold_spans": sum(len(spans) for document in documents for spans in document.gold.values()),
        "tagger": score_mentions(documents, tagger_alone)["any"],
        "tagger+llm": score_mentions(documents, verified)["any"],
        **stats,
    }


# --- the linking referee ------------------------------------------------------------------------


def referee_quality(model: Model, splits: list[Any], resolver: Any, sentences: int) -> dict[str, Any]:
    step = replace(entities_use_case("linker+llm", model.name).steps.step("referee"), model=model.name)
    assert isinstance(step, LLMStep)

    def ask(listing: str) -> str:
        return model.step_answer(step, {"resolve": {"listing": listing}})

    by_split = {split.name: run_split(split, resolver, ask, sentences, ASK_BELOW) for split in splits}
    spans = sum(row["spans"] for row in by_split.values())

    def pooled(which: str) -> dict[str, float]:
        return {
            outcome: round(
                sum(row[which][outcome] * row["spans"] for row in by_split.values()) / max(spans, 1), 1
            )
            for outcome in ("right", "wrong", "unmatched")
        }

    return {
        "spans": spans,
        "calls": sum(row["sentences_asked"] for row in by_split.values()),
        "unreadable": sum(row["unreadable_calls"] for row in by_split.values()),
        "linker": pooled("before"),
        "referee": pooled("after"),
        "perfect_referee": pooled("perfect_referee"),
        "splits": by_split,
    }


def outcomes(shares: Mapping[str, float]) -> str:
    return f"{shares['right']:g} / {shares['wrong']:g} / {shares['unmatched']:g} %"


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Inputs:
    """What the measures read, loaded once for every style."""

    demo: list[dict[str, Any]] = field(default_factory=list)
    skillspan_postings: list[dict[str, Any]] = field(default_factory=list)
    skillspan_documents: list[GoldDocument] = field(default_factory=list)
    judge_cases: list[CalibrationCase] = field(default_factory=list)
    referee: tuple[list[Any], Any, Any] | None = None
    skipped: dict[str, str] = field(default_factory=dict)


def load_inputs(args: argparse.Namespace, measures: list[str], limits: dict[str, int]) -> Inputs:
    inputs = Inputs()
    if "summary-demo" in measures:
        rows = [json.loads(line) for line in DEMO_POSTINGS.read_text().splitlines() if line.strip()]
        inputs.demo = rows[: limits["summary-demo"]]
    if "judge" in measures:
        inputs.judge_cases = judge_cases(limits["judge"])
    needs_data = {"summary-skillspan", "verification", "referee"} & set(measures)
    if not needs_data:
        return inputs
    try:
        data_dir = shared_data_dir(args.data_dir)
    except FileNotFoundError as exc:
        inputs.skipped.update({measure: str(exc) for measure in needs_data})
        return inputs
    skillspan = data_dir / "skillspan" / f"{SKILLSPAN_SPLIT}.json"
    if "summary-skillspan" in measures:
        inputs.skillspan_postings = skillspan_pipeline_postings(skillspan, limits["summary-skillspan"])
    if "verification" in measures:
        inputs.skillspan_documents = load_skillspan(skillspan)[: limits["verification"]]
    if "referee" in measures:
        linker_args = argparse.Namespace(
            data_dir=str(data_dir),
            model=DEFAULT_MODEL_PATH,
            embedding_cache=Path(args.embedding_cache),
            prior_unknown=False,
        )
        started = time.perf_counter()
        inputs.referee = referee_setup(linker_args)
        print(f"linker over ESCO ready in {time.perf_counter() - started:.0f}s", flush=True)
    return inputs


def run_style(
    model: Model, settings: Settings, measures: list[str], inputs: Inputs, limits: dict[str, int]
) -> list[Row]:
    """Every chosen measure in one prompt style."""
    checker = default_checker() if {"summary-demo", "summary-skillspan"} & set(measures) else None
    rows: list[Row] = []
    for measure in measures:
        if measure in inputs.skipped:
            rows.append(
                Row(measure, "-", model.style, "skipped", inputs.skipped[measure], measure_id=measure)
            )
            continue
        calls, cpu_started = model.calls, cpu_seconds()
        print(f"{measure} ({model.style}) ...", flush=True)
        row = measure_row(model, settings, measure, inputs, limits, checker)
        row.measure_id = measure
        row.calls, row.cpu_seconds = model.calls - calls, round(cpu_seconds() - cpu_started, 1)
        print(f"  {row.result}; {row.details}", flush=True)
        rows.append(row)
    return rows


def measure_row(
    model: Model,
    settings: Settings,
    measure: str,
    inputs: Inputs,
    limits: dict[str, int],
    checker: FaithfulnessChecker | None,
) -> Row:
    if measure in ("summary-demo", "summary-skillspan"):
        assert checker is not None
        demo = measure == "summary-demo"
        postings = inputs.demo if demo else inputs.skillspan_postings
        figures = summary_faithfulness(model, postings, checker)
        where = "demo postings" if demo else f"SkillSpan {SKILLSPAN_SPLIT} postings"
        sample, result, details = summary_row(f"{len(postings)} {where}", figures)
        return Row("summary faithfulness", sample, model.style, result, details, figures=figures)
    if measure == "judge":
        figures = judge_discrimination(model, settings, inputs.judge_cases)
        return Row(
            "judge discrimination",
            f"{len(inputs.judge_cases)} calibration cases ({figures['good']} faithful, {figures['bad']} bad)",
            model.style,
            f"flags {figures['flagged_bad']}/{figures['bad']} bad, "
            f"{figures['flagged_good']}/{figures['good']} faithful",
            f"unusable answers {figures['errors']}; flagged = a criterion below {figures['review_below']:g}",
            figures=figures,
        )
    if measure == "verification":
        figures = skills_verification(model, inputs.skillspan_documents)
        alone, verified = figures["tagger"], figures["tagger+llm"]
        return Row(
            "skills verification",
            f"{figures['documents']} SkillSpan {SKILLSPAN_SPLIT} postings "
            f"({figures['gold_spans']} gold spans)",
            model.style,
            f"strict F1 {verified['strict']['f1']:.3f} (tagger alone {alone['strict']['f1']:.3f})",
            f"loose F1 {verified['loose']['f1']:.3f} ({alone['loose']['f1']:.3f}); asked {figures['asked']}, "
            f"labelled none {figures['labelled_none']}, relabelled {figures['relabelled']}, missed proposed "
            f"{figures['missed_proposed']}, unreadable answers {figures['unreadable']}",
            figures=figures,
        )
    assert inputs.referee is not None
    splits, resolver, _ = inputs.referee
    figures = referee_quality(model, splits, resolver, limits["referee"])
    return Row(
        "linking referee",
        f"{figures['spans']} Decorte validation spans (at most {limits['referee']} sentences per split, "
        f"{', '.join(split.name.upper() for split in splits)})",
        model.style,
        f"right / wrong / unmatched {outcomes(figures['referee'])} "
        f"(linker alone {outcomes(figures['linker'])})",
        f"a perfect referee {outcomes(figures['perfect_referee'])}; unreadable answers "
        f"{figures['unreadable']} of {figures['calls']}",
        figures=figures,
    )


def render(results: dict[str, Any]) -> str:
    lines = [
        f"## LLM quality: `{results['model']}` on the `{results['backend']}` backend",
        "",
        f"`{results['command']}`",
        "",
        "| measure | sample | prompt style | result | details | calls | CPU s |",
        "|---|---|---|---|---|---:|---:|",
    ]
    for row in results["rows"]:
        lines.append(
            f"| {row['measure']} | {row['sample']} | {row['style']} | {row['result']} | {row['details']} "
            f"| {row['calls']} | {row['cpu_seconds']:g} |"
        )
    whose = "the model's included" if results["backend"] == "embedded" else "the server's own not included"
    per_style = ", ".join(
        f"{style} {seconds:g}" for style, seconds in results["cpu_seconds_by_style"].items()
    )
    lines += [
        "",
        f"CPU seconds of this process ({whose}): {per_style}; loading the model and inputs "
        f"{results['loading_cpu_seconds']:g}; {results['cpu_seconds']:g} in all "
        f"({results['wall_seconds']:g}s wall). Summary faithful = passes the use case's checks with no "
        "unsupported fact (first attempt, no retry); verification F1 = spans of the stored output, kinds "
        "together.",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.llm_quality", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--backend", choices=("ollama", "openai", "embedded"), help="default: the deployment's"
    )
    parser.add_argument(
        "--model", help="the model to measure (default: PIPELINE_MODEL, else posting_summary's)"
    )
    parser.add_argument("--prompt-style", default=AUTO_STYLE, choices=STYLE_CHOICES)
    parser.add_argument(
        "--limit", type=int, help=f"items per measure instead of the defaults {DEFAULT_LIMITS}"
    )
    parser.add_argument(
        "--measures", default=",".join(MEASURES), help=f"comma-separated, of: {', '.join(MEASURES)}"
    )
    parser.add_argument(
        "--data-dir", help="the shared data folder (default $PIPELINE_SHARED_DATA or ../shared/data)"
    )
    parser.add_argument(
        "--embedding-cache",
        default=str(PROJECT_ROOT / "data" / "embedding_cache"),
        help="the linker's ESCO label vectors (built once, ~16 min on 2 cores) and query vectors",
    )
    parser.add_argument("--out", type=Path, help="results folder (default results/)")
    args = parser.parse_args(argv)
    measures = [name.strip() for name in args.measures.split(",") if name.strip()]
    unknown = sorted(set(measures) - set(MEASURES))
    if unknown:
        parser.error(f"unknown measures {unknown}; known: {', '.join(MEASURES)}")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    args.measures = measures
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings.from_env()
    backend = args.backend or settings.llm_backend
    model_name = args.model or settings.model or POSTING_SUMMARY.model
    limits = {measure: args.limit or default for measure, default in DEFAULT_LIMITS.items()}
    limits["judge"] = min(limits["judge"], len({c.posting.get("key") for c in calibration_cases()}))
    started, cpu_started = time.perf_counter(), cpu_seconds()
    try:
        llm = build_llm_resource(settings, backend=backend)
        llm.ensure_loaded(model_name)
        styles = (
            [COMPLETION_STYLE, CHAT_STYLE]
            if args.prompt_style == "both"
            else [llm.resolve_style(model_name, args.prompt_style)]
        )
        inputs = load_inputs(args, args.measures, limits)
    except (LLMError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    loading = cpu_seconds() - cpu_started
    rows: list[Row] = []
    by_style: dict[str, float] = {}
    for style in styles:
        style_started = cpu_seconds()
        try:
            rows += run_style(Model(llm, model_name, style), settings, args.measures, inputs, limits)
        except LLMError as exc:  # the server went away or refused the model: say so, keep what was measured
            print(f"error: {exc}", file=sys.stderr)
            return 2
        by_style[style] = round(cpu_seconds() - style_started, 1)
    if inputs.referee is not None:
        inputs.referee[2].save()
    rows.sort(key=lambda row: (MEASURES.index(row.measure_id), styles.index(row.style)))
    results = {
        "backend": llm.backend_name,
        "model": model_name,
        "prompt_styles": styles,
        "command": "python -m benchmarks.llm_quality " + " ".join(sys.argv[1:] if argv is None else argv),
        "limits": limits,
        "skillspan_split": SKILLSPAN_SPLIT,
        "rows": [row.__dict__ for row in rows],
        "cpu_seconds_by_style": by_style,
        "loading_cpu_seconds": round(loading, 1),
        "cpu_seconds": round(cpu_seconds() - cpu_started, 1),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    markdown = render(results)
    print(markdown)
    json_path, markdown_path = write_report(NAME, results, markdown, args.out or DEFAULT_RESULTS_DIR)
    print(f"wrote {json_path} and {markdown_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
