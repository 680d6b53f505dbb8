"""Does the judge tell good summaries from bad ones? Grades of real and planted summaries.

    python -m benchmarks.judge_discrimination [--limit N] [--out DIR]

For each demo posting the summary use case makes its summary (as the pipeline does), and
the judge (PIPELINE_JUDGE_MODEL on the configured backend, the default rubric or
PIPELINE_JUDGE_RUBRIC) grades it and two planted bad ones: an *invented* summary (a
role, place and perks the posting does not mention) and a *looping* one (the title
repeated). A useful judge grades the model's summaries high and flags (grades below
PIPELINE_REVIEW_BELOW) the planted ones.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from typing import Any

from benchmarks.report import write_report
from domain.language.llm_types import ItemError
from domain.language.output_parsing import parse_output
from domain.quality.judge_rubric import JUDGE_OPTIONS, judge_text, load_rubric, overall
from domain.use_cases.posting_summary import POSTING_SUMMARY
from pipeline_defs.cli.run_commands import DEMO_POSTINGS
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_llm_resource

INVENTED = (
    "A fast-growing start-up offers a fully remote senior leadership role with a six-figure salary, "
    "stock options and unlimited holidays; no experience needed."
)


def planted(posting: dict[str, Any]) -> dict[str, str]:
    return {"invented": INVENTED, "looping": " ".join([posting["title"]] * 6)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=8, help="demo postings to use (default 8)")
    parser.add_argument("--out", help="results folder (default results/)")
    args = parser.parse_args(argv)

    settings = Settings.from_env()
    rubric = load_rubric(settings.judge_rubric_path or None)
    llm = build_llm_resource(settings)
    postings = [json.loads(line) for line in DEMO_POSTINGS.read_text().splitlines() if line.strip()]
    grades: dict[str, list[float]] = defaultdict(list)
    started = time.perf_counter()
    judge_seconds = 0.0
    for number, posting in enumerate(postings[: args.limit], start=1):
        values = {
            name: posting.get(name) or "not stated"
            for name in ("title", "company", "location", "description")
        }
        prompt, system_prompt, _ = POSTING_SUMMARY.render(values)
        generation = llm.generate(
            POSTING_SUMMARY.model,
            prompt,
            system_prompt,
            dict(POSTING_SUMMARY.grammar_schema),
            dict(POSTING_SUMMARY.options),
        )
        try:
            candidates = {"model": parse_output(POSTING_SUMMARY, generation.text, values)["summary"]}
        except ItemError as exc:
            print(f"{number} {posting['key']}: the model's summary is unusable ({exc}); planted ones only")
            candidates = {}
        candidates.update(planted(posting))
        line = []
        for kind, summary in candidates.items():
            judged = llm.generate(
                settings.judge_model,
                rubric.prompt(POSTING_SUMMARY.name, judge_text(posting), summary),
                "",
                rubric.schema,
                dict(JUDGE_OPTIONS),
            )
            judge_seconds += judged.latency_ms / 1000
            score = overall(rubric.parse(judged.text))
            grades[kind].append(score)
            line.append(f"{kind} {score:.2f}")
        print(f"{number} {posting['key']}: " + ", ".join(line), flush=True)

    threshold = settings.review_below
    results = {
        "backend": llm.backend_name,
        "judge_model": settings.judge_model,
        "rubric_version": rubric.version,
        "postings": min(args.limit, len(postings)),
        "review_below": threshold,
        "by_kind": {
            kind: {
                "graded": len(scores),
                "mean_overall": round(sum(scores) / len(scores), 3),
                "flagged_share": round(sum(score < threshold for score in scores) / len(scores), 3),
            }
            for kind, scores in grades.items()
        },
        "judge_seconds_per_call": round(judge_seconds / max(sum(len(s) for s in grades.values()), 1), 2),
        "wall_seconds": round(time.perf_counter() - started, 1),
    }
    lines = [
        f"## Judge discrimination ({results['postings']} demo postings)",
        "",
        f"Judge `{results['judge_model']}` on `{results['backend']}`, rubric {results['rubric_version']}; "
        f"flagged = graded below {threshold:g}.",
        "",
        "| summary | graded | mean overall (1-5) | flagged |",
        "|---|---|---|---|",
        *(
            f"| {kind} | {row['graded']} | {row['mean_overall']:.2f} | {row['flagged_share']:.0%} |"
            for kind, row in results["by_kind"].items()
        ),
        "",
        f"{results['judge_seconds_per_call']}s per judge call; {results['wall_seconds']}s in all.",
    ]
    markdown = "\n".join(lines)
    print(markdown)
    json_path, markdown_path = write_report("judge_discrimination", results, markdown, args.out)
    print(f"wrote {json_path} and {markdown_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
