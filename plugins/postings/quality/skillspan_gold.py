"""SkillSpan as public gold for `posting_skills`: postings ingested with the key `skillspan-<source>-<idx>`
(`benchmarks/skillspan_postings.py`) are compared with the gold spans' text (PIPELINE_GOLD_SKILLSPAN)."""

from __future__ import annotations

import json
from pathlib import Path

from domain.quality.gold import PublicGold
from plugins.postings.skills.skill_metrics import bio_to_spans

SKILLSPAN_KEY_PREFIX = "skillspan-"


def load_skillspan_gold(path: str | Path) -> dict[str, set[str]]:
    """Posting key (`skillspan-<source>-<idx>`) -> the gold mentions (span texts, lowercased)."""
    gold: dict[str, set[str]] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key = f"{SKILLSPAN_KEY_PREFIX}{row['source']}-{row['idx']}"
                tokens = row["tokens"]
                spans = bio_to_spans(row["tags_skill"]) + bio_to_spans(row["tags_knowledge"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a SkillSpan sentence: {exc}") from exc
            mentions = gold.setdefault(key, set())
            mentions.update(" ".join(tokens[start:end]).lower() for _, start, end in spans)
    return gold


SKILLSPAN_GOLD = PublicGold("skillspan", load_skillspan_gold)
