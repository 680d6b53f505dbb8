"""Detail claims tuned where the demo is not: real summaries of SkillSpan dev postings, read.

    python -m benchmarks.detail_claims [--limit 25] [--source house] [--shares 0.02,0.05,0.1]
                                       [--no-cache] [--out DIR]

The faithfulness check's *detail* claims (`faithfulness.py`: a lower-case phrase with a specific
word the posting does not state, "homecare centre", "dementia") decide what is specific with a
vocabulary of shared words (`benchmarks/posting_vocabulary.py`: words of SkillSpan **train**
postings above a document share, and ESCO's skill verbs). Here, on SkillSpan **dev** postings
(not the demo's 25, not the vocabulary's), for each share:
1. real summaries (the summary use case's first attempt, embedded model, as the pipeline runs it):
   the detail phrases flagged, each labelled by a careful reading in
   `benchmarks/detail_readings.json` as invented (the posting does not state it) or supported
   (it does, in other words); flags on supported phrases are false flags;
2. planted details (`planted.plant_detail`: a specific phrase of another dev posting added to the
   summary): the share caught.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.judge_discrimination import CachedGenerator, summarize
from benchmarks.posting_vocabulary import ESCO_SKILLS, posting_texts, shared_words, skill_verbs
from benchmarks.report import DEFAULT_RESULTS_DIR, shared_data_dir, write_report
from benchmarks.skills_extraction import load_postings
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_llm_resource
from plugins.postings.quality.faithfulness import FaithfulnessChecker, detail_stem
from plugins.postings.quality.planted import plant_detail
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY

READINGS = Path(__file__).with_name("detail_readings.json")


def dev_postings(root: Path, limit: int, source: str = "house") -> list[dict[str, Any]]:
    """SkillSpan dev postings of `source` as pipeline postings: the first line is the title."""
    postings = []
    chosen = [p for p in load_postings(root / "skillspan" / "dev.json") if p.doc_id.startswith(f"{source}-")]
    for posting in chosen[:limit]:
        title, *rest = posting.sentences
        postings.append(
            {
                "key": f"skillspan-{posting.doc_id}",
                "title": title,
                "company": "not stated",
                "location": "not stated",
                "description": "\n".join(rest),
            }
        )
    return postings


def detail_flags(checker: FaithfulnessChecker, summary: str, posting: dict[str, Any]) -> list[str]:
    return [
        f.claim.text
        for f in checker.findings(summary, posting)
        if f.claim.kind == "detail" and not f.supported
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=25)
    parser.add_argument(
        "--source",
        default="house",
        choices=["house", "tech"],
        help="SkillSpan source (default house: on the long tech postings the embedded model mostly "
        "repeats the prompt's first example)",
    )
    parser.add_argument("--shares", default="0.02,0.05,0.1")
    parser.add_argument("--data-dir")
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    root = shared_data_dir(args.data_dir)
    out_dir = Path(args.out) if args.out else DEFAULT_RESULTS_DIR
    llm = build_llm_resource(Settings.from_env())
    generate = CachedGenerator(
        llm, None if args.no_cache else out_dir / f"judge_discrimination_cache_{llm.backend_name}.json"
    )
    postings = dev_postings(root, args.limit, args.source)
    readings = json.loads(READINGS.read_text()) if READINGS.is_file() else {}
    summaries = {}
    for number, posting in enumerate(postings, start=1):
        attempt = summarize(generate, POSTING_SUMMARY, posting, retries=False)[0]
        if attempt["summary"]:
            summaries[posting["key"]] = attempt["summary"]
        print(f"{number} {posting['key']}: {attempt['summary']!r}", flush=True)

    by_key = {posting["key"]: posting for posting in postings}
    planted = {}  # a specific phrase of another dev posting added to each summary
    for key, summary in summaries.items():
        others = [other for other in postings if other["key"] != key]
        text = plant_detail(summary, by_key[key], others)
        if text:
            planted[key] = text
    train = posting_texts(root / "skillspan" / "train.json")
    verbs = skill_verbs(root / ESCO_SKILLS)
    rows, flagged_by_share = [], {}
    for share in [float(value) for value in args.shares.split(",")]:
        vocabulary = frozenset(detail_stem(word) for word in [*shared_words(train, share), *verbs])
        checker = FaithfulnessChecker(None, vocabulary=vocabulary)
        counts = {"invented": 0, "supported": 0, "unread": 0}
        summaries_false = 0
        flagged: dict[str, list[str]] = {}
        for posting in postings:
            summary = summaries.get(posting["key"])
            if summary is None:
                continue
            phrases = detail_flags(checker, summary, posting)
            flagged[posting["key"]] = phrases
            reading = readings.get(posting["key"], {})
            labels = reading.get("phrases", {}) if reading.get("summary") == summary else {}
            verdicts = [labels.get(phrase, "unread") for phrase in phrases]
            for verdict in verdicts:
                counts[verdict] += 1
            summaries_false += "supported" in verdicts
        caught = sum(
            len(detail_flags(checker, text, by_key[key])) > len(flagged[key]) for key, text in planted.items()
        )
        rows.append(
            {
                "share": share,
                "vocabulary": len(vocabulary),
                "flags": counts,
                "summaries_with_false_flag": summaries_false,
                "summaries": len(summaries),
                "planted": len(planted),
                "planted_caught": caught,
            }
        )
        flagged_by_share[str(share)] = flagged
    results = {
        "postings": len(postings),
        "summaries": summaries,
        "rows": rows,
        "flagged": flagged_by_share,
        "planted": planted,
        "generations": generate.calls,
    }
    lines = [
        f"## Detail claims on SkillSpan dev ({len(summaries)} summaries, embedded model)",
        "",
        "| vocabulary share | stems | flags invented / supported / unread | summaries with a false flag "
        "| planted caught |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        flags = row["flags"]
        lines.append(
            f"| {row['share']:g} | {row['vocabulary']} | {flags['invented']} / {flags['supported']} / "
            f"{flags['unread']} | {row['summaries_with_false_flag']} of {row['summaries']} | "
            f"{row['planted_caught']} of {row['planted']} |"
        )
    markdown = "\n".join(lines)
    print(markdown)
    write_report("detail_claims", results, markdown, out_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
