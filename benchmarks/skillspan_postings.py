"""SkillSpan postings as pipeline input, so the gym's gold check can score them.

    python -m benchmarks.skillspan_postings OUT.jsonl [--split dev] [--limit N] [--data-dir D]
    pipeline ingest OUT.jsonl
    PIPELINE_GOLD_SKILLSPAN=../shared/data/skillspan/dev.json pipeline run

Each posting is rebuilt from its sentences (as `benchmarks/skills_extraction.py` does)
and keyed `skillspan-<source>-<idx>`; the `gold_agreement` check of posting_skills then
compares their current skills with SkillSpan's gold spans (exact mention match, modulo
case) and records `skillspan_precision`, `skillspan_recall` and `skillspan_f1`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.report import shared_data_dir
from benchmarks.skills_extraction import load_postings
from plugins.postings.quality.skillspan_gold import SKILLSPAN_KEY_PREFIX


def skillspan_pipeline_postings(source: Path, limit: int | None = None) -> list[dict[str, str]]:
    """The first `limit` SkillSpan postings of `source` as pipeline input rows (key, title, description)."""
    return [
        {
            "key": f"{SKILLSPAN_KEY_PREFIX}{posting.doc_id}",
            "title": "not stated",
            "description": "\n".join(posting.sentences),
        }
        for posting in load_postings(source)[:limit]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON lines to write (for `pipeline ingest`)")
    parser.add_argument("--split", default="dev", choices=["dev", "train"])
    parser.add_argument("--limit", type=int, help="only the first N postings")
    parser.add_argument("--data-dir")
    args = parser.parse_args(argv)
    source = shared_data_dir(args.data_dir) / "skillspan" / f"{args.split}.json"
    postings = skillspan_pipeline_postings(source, args.limit)
    with args.out.open("w", encoding="utf-8") as handle:
        for row in postings:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(postings)} SkillSpan {args.split} postings to {args.out}")
    print(f"gold: PIPELINE_GOLD_SKILLSPAN={source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
