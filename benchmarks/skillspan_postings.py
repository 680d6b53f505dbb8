"""Real job postings for the benchmarks: SkillSpan's postings rebuilt from the shared data, or a user's file.

    python -m benchmarks.skillspan_postings OUT.jsonl [--split dev] [--limit N] [--data-dir D]
    pipeline ingest OUT.jsonl
    PIPELINE_GOLD_SKILLSPAN=../shared/data/skillspan/dev.json pipeline run

SkillSpan's `<split>.json` holds one sentence a line; grouped by (source, idx) they are whole job
postings (train: 140 of 110-1,525 words, mean 668; dev: 58), the length of a user's job ads. The
gym's postings are keyed `skillspan-<source>-<idx>`, so the `gold_agreement` check of posting_skills
compares their current skills with SkillSpan's gold spans (PIPELINE_GOLD_SKILLSPAN).

The throughput benchmarks take their postings from `benchmark_postings`: by default SkillSpan's train
postings, cycled to the count asked for, each made unique (its own key and a reference line of its own,
so no cache keyed by a posting's text serves a copy); `tiny` the one-line postings that measure the
orchestration alone; or a user's own JSON lines (`--postings-file`), cycled the same way. The shared
data folder is the `PIPELINE_SHARED_DATA` setting (`../shared/data` beside the project by default).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.report import shared_data_dir
from plugins.postings.quality.skillspan_gold import SKILLSPAN_KEY_PREFIX

SKILLSPAN = "skillspan"
TINY = "tiny"
POSTING_SETS = (SKILLSPAN, TINY)
THROUGHPUT_SPLIT = "train"  # the 140 postings the figures were measured on; dev is the gym's
TINY_TOOLS = ["Python and SQL", "Excel", "Docker", "Java", "dbt and Python", "Kubernetes"]


def skillspan_source(split: str = THROUGHPUT_SPLIT, data_dir: str | Path | None = None) -> Path:
    """SkillSpan's sentences of `split` under the shared data folder; a clear error when missing."""
    path = shared_data_dir(str(data_dir) if data_dir else None) / "skillspan" / f"{split}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no SkillSpan {split} split at {path}")
    return path


def rebuilt_postings(source: Path, title_line: bool = True) -> list[dict[str, str]]:
    """Whole postings from SkillSpan's sentences, in file order: key `skillspan-<source>-<idx>`, every
    sentence, a line each, as the description; the first sentence (usually the job title line) as the
    title, or `not stated` (`title_line=False`: the gym's, whose gold spans are in the description)."""
    sentences: dict[tuple[str, int], list[str]] = {}
    with source.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                sentences.setdefault((row["source"], row["idx"]), []).append(" ".join(row["tokens"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{source}:{number}: not a SkillSpan sentence: {exc}") from exc
    return [
        {
            "key": f"{SKILLSPAN_KEY_PREFIX}{origin}-{idx}",
            "title": (lines[0][:120] if title_line else "") or "not stated",
            "description": "\n".join(lines),
        }
        for (origin, idx), lines in sentences.items()
    ]


def read_postings_file(path: Path) -> list[dict[str, Any]]:
    """A user's postings, one JSON object a line with at least key, title and description."""
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line: {exc}") from exc
            fields = ("key", "title", "description")
            missing = [name for name in fields if not isinstance(row, dict) or not row.get(name)]
            if missing:
                raise ValueError(f"{path}:{number}: a posting needs {', '.join(missing)}")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no postings")
    return rows


def cycled_unique(base: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """`count` postings from `base`, cycled; each its own key (`bench-00042`) and a reference line of its
    own at the end of its description, so that no two share a text (nor a content hash)."""
    postings = []
    for index in range(count):
        posting = dict(base[index % len(base)])
        posting["key"] = f"bench-{index:05d}"
        posting["description"] = f"{posting['description']}\nReference: BENCH-{index:05d}."
        postings.append(posting)
    return postings


def tiny_postings(count: int) -> list[dict[str, str]]:
    """Eight-word postings (the benchmarks' postings before issue 61): the orchestration alone."""
    return [
        {
            "key": f"bench-{index:05d}",
            "title": f"Data Analyst {index}",
            "company": "Brightwave Energy",
            "location": "Berlin",
            "description": f"Analyse turbine data with {TINY_TOOLS[index % len(TINY_TOOLS)]}; report weekly.",
        }
        for index in range(count)
    ]


def benchmark_postings(
    count: int,
    posting_set: str = SKILLSPAN,
    postings_file: Path | None = None,
    data_dir: str | Path | None = None,
    split: str = THROUGHPUT_SPLIT,
) -> list[dict[str, Any]]:
    """The throughput benchmarks' postings: a user's file, else SkillSpan's `split`, cycled and made
    unique to `count`; or `tiny` ones."""
    if postings_file is not None:
        return cycled_unique(read_postings_file(postings_file), count)
    if posting_set == TINY:
        return tiny_postings(count)
    if posting_set != SKILLSPAN:
        raise ValueError(f"no posting set {posting_set!r} (one of {', '.join(POSTING_SETS)})")
    return cycled_unique(rebuilt_postings(skillspan_source(split, data_dir)), count)


def describe(postings: list[dict[str, Any]], posting_set: str, postings_file: Path | None) -> dict[str, Any]:
    """What a report says of its postings: where from, how many distinct texts, their mean length."""
    words = [len(str(posting.get("description", "")).split()) for posting in postings]
    origin = str(postings_file) if postings_file else posting_set
    return {
        "source": origin,
        "postings": len(postings),
        "distinct_descriptions": len({posting.get("description") for posting in postings}),
        "mean_words": round(sum(words) / max(len(words), 1), 1),
    }


def skillspan_pipeline_postings(source: Path, limit: int | None = None) -> list[dict[str, str]]:
    """The first `limit` SkillSpan postings of `source` as the gym's input rows (key, title, description)."""
    return rebuilt_postings(source, title_line=False)[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON lines to write (for `pipeline ingest`)")
    parser.add_argument("--split", default="dev", choices=["dev", "train"])
    parser.add_argument("--limit", type=int, help="only the first N postings")
    parser.add_argument("--data-dir")
    args = parser.parse_args(argv)
    source = skillspan_source(args.split, args.data_dir)
    postings = skillspan_pipeline_postings(source, args.limit)
    with args.out.open("w", encoding="utf-8") as handle:
        for row in postings:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {len(postings)} SkillSpan {args.split} postings to {args.out}")
    print(f"gold: PIPELINE_GOLD_SKILLSPAN={source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def add_posting_options(parser: argparse.ArgumentParser) -> None:
    """The postings options the throughput benchmarks share: which set, a user's own file, fixed latency."""
    parser.add_argument(
        "--posting-set",
        default=SKILLSPAN,
        choices=POSTING_SETS,
        help="skillspan: real postings, SkillSpan's train set cycled and made unique (default); tiny: "
        "8-word postings and a fixed latency, the orchestration alone",
    )
    parser.add_argument(
        "--postings-file", type=Path, help="your own postings (JSON lines: key, title, description), cycled"
    )
    parser.add_argument(
        "--fixed-latency",
        action="store_true",
        help="every simulated call takes --latency-ms (default 100), whatever its tokens: the orchestration "
        "with real postings, as issue 61's table measured it (tiny postings always do)",
    )
