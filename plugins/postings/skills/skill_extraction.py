"""Skill and knowledge mentions of a posting on a plain CPU: the CRF tagger, the taxonomy a second signal.

    extractor = SkillExtractor.load(taxonomy_labels)   # once per run (reads the model, indexes the labels)
    mentions = extractor.extract(title, description)    # ~0.3 s a posting (tagger)

Every mention carries its field ("title" or "description") and character offsets in it.
Combinations (`mode`), as measured by benchmarks/skills_extraction.py on SkillSpan dev:
- "tagger": the CRFs alone;
- "taxonomy": the taxonomy's labels found in the text, alone;
- "tagger+taxonomy": the tagger's mentions, plus the taxonomy matches that overlap none of them.
`skills_output` turns mentions into the stored posting_skills shape (mention, kind, evidence, offsets).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from plugins.postings.skills.mention_grounding import Mention, sentence_around
from plugins.postings.skills.skill_tagger import SkillTagger
from plugins.postings.skills.taxonomy_matcher import TaxonomyLabel, TaxonomyMatcher

EXTRACTION_MODES = ("tagger", "taxonomy", "tagger+taxonomy")
DEFAULT_MODE = "tagger"
# The posting_skills output with offsets: what `skills_output` returns (the stored schema today has
# mention, kind and evidence only; field, start and end are what the wiring adds).
SKILL_MENTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "skills": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "mention": {"type": "string", "minLength": 1},
                    "kind": {"type": "string", "enum": ["skill", "knowledge"]},
                    "evidence": {"type": "string"},
                    "field": {"type": "string", "enum": ["title", "description"]},
                    "start": {"type": "integer", "minimum": 0},
                    "end": {"type": "integer", "minimum": 1},
                },
                "required": ["mention", "kind", "evidence", "field", "start", "end"],
                "additionalProperties": False,
            },
        },
        "ungrounded": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["skills", "ungrounded"],
    "additionalProperties": False,
}


class SkillExtractor:
    """The loaded tagger and taxonomy index; build once per run and call `extract` per posting."""

    def __init__(
        self, tagger: SkillTagger | None, matcher: TaxonomyMatcher | None, mode: str = DEFAULT_MODE
    ) -> None:
        if mode not in EXTRACTION_MODES:
            raise ValueError(f"extraction mode must be one of {', '.join(EXTRACTION_MODES)}, not {mode!r}")
        if "tagger" in mode and tagger is None:
            raise ValueError(f"mode {mode!r} needs the tagger")
        if "taxonomy" in mode and matcher is None:
            raise ValueError(f"mode {mode!r} needs a taxonomy (labels to match)")
        self.tagger, self.matcher, self.mode = tagger, matcher, mode

    @classmethod
    def load(cls, taxonomy_labels: Iterable[TaxonomyLabel] = (), mode: str = DEFAULT_MODE) -> SkillExtractor:
        """The shipped tagger, and an index of `taxonomy_labels` when the mode or the model uses them."""
        labels = list(taxonomy_labels)
        matcher = TaxonomyMatcher(labels) if labels else None
        tagger = SkillTagger.load(matcher) if "tagger" in mode else None
        return cls(tagger, matcher, mode)

    def extract(self, title: str, description: str) -> list[Mention]:
        """The mentions of the title, then of the description, each in text order."""
        return [
            *self._extract_field(title or "", "title"),
            *self._extract_field(description or "", "description"),
        ]

    def _extract_field(self, text: str, field: str) -> list[Mention]:
        if not text.strip():
            return []
        tagged = self.tagger.tag(text, field) if self.tagger is not None and "tagger" in self.mode else []
        if self.mode == "tagger":
            return tagged
        assert self.matcher is not None
        matched = self.matcher.mentions(text, field=field)
        if self.mode == "taxonomy":
            return matched
        extra = [m for m in matched if not any(m.start < t.end and t.start < m.end for t in tagged)]
        return sorted(tagged + extra, key=lambda m: (m.start, m.end, m.kind))


def skills_output(mentions: Iterable[Mention], title: str, description: str) -> dict[str, Any]:
    """The posting_skills output: one entry per distinct (mention, kind), at its first place.

    Each entry has the mention as written, its kind, the sentence around it as evidence, and
    where it is (field, start, end). `ungrounded` is empty: every mention here was found in
    the text it came from.
    """
    texts = {"title": title or "", "description": description or ""}
    skills: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for mention in mentions:
        key = (" ".join(mention.text.lower().split()), mention.kind)
        if key in seen:
            continue
        seen.add(key)
        text = texts[mention.field]
        skills.append(
            {
                "mention": mention.text,
                "kind": mention.kind,
                "evidence": sentence_around(text, mention.start, mention.end),
                "field": mention.field,
                "start": mention.start,
                "end": mention.end,
            }
        )
    return {"skills": skills, "ungrounded": []}


_default: SkillExtractor | None = None


def extract_mentions(title: str, description: str, extractor: SkillExtractor | None = None) -> list[Mention]:
    """`extractor.extract(title, description)`; without one, the shipped tagger (loaded on first use)."""
    global _default
    if extractor is None:
        if _default is None:
            _default = SkillExtractor.load()
        extractor = _default
    return extractor.extract(title, description)


_matchers: dict[str, TaxonomyMatcher] = {}


def taxonomy_mentions(title: str, description: str, taxonomy_csv: Path | str) -> list[Mention]:
    """The taxonomy's labels found in the posting (the index is built once per file and process).

    The fallback for a posting where the tagger finds nothing: tagger+taxonomy together score lower on
    SkillSpan dev (loose F1 0.52 vs 0.61), but a posting that names skills the taxonomy knows ("patient
    manner", "reliability") should not come out empty."""
    key = str(taxonomy_csv)
    if key not in _matchers:
        _matchers[key] = TaxonomyMatcher.from_csv(taxonomy_csv)
    matcher = _matchers[key]
    return [
        *matcher.mentions(title or "", field="title"),
        *matcher.mentions(description or "", field="description"),
    ]


def sentence_mentions(sentence: str) -> list[str]:
    """The tagger's mentions of one sentence, as text: the extractor the linking benchmark plugs in
    (`python -m benchmarks.linking_quality
    --extractor plugins.postings.skills.skill_extraction:sentence_mentions`)."""
    return [mention.text for mention in extract_mentions("", sentence)]
