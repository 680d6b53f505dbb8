"""Taxonomy labels found in posting text: an Aho-Corasick index over normalized, stemmed tokens.

Labels (preferred and alternative) and text are compared as sequences of token keys: the
token lowercased (NFKC, dashes and quotes unified as `plugins.postings.store.taxonomy.normalize_label` does)
and reduced to its Snowball (Porter 2) stem, with articles left out; so "working in a team"
meets "work in teams". Keys are joined with spaces and searched as one string, with a space
at both ends of every label, so a match always starts and ends on token boundaries. A label
of one or two letters ("R", "C", "Go") matches only a token written exactly as the label.

Measured on ESCO + the demo taxonomy (111,895 labels, benchmarks/skills_extraction.py, on a busy
2-core machine): 10-33 s to index (plus 2.5-19 s to read the CSV), ~90 MB, and ~30 ms to match
a 4,500-character posting. Build it once per run.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import ahocorasick
import snowballstemmer

from plugins.postings.skills.mention_grounding import Mention, Token, is_short, tokenize
from plugins.postings.store.taxonomy import read_taxonomy_csv

_SKIPPED_WORDS = frozenset({"a", "an", "the"})
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"), "-")
_QUOTES = dict.fromkeys(map(ord, "\u2018\u2019\u201a\u201b"), "'")
_STEMMER = snowballstemmer.stemmer("english")


@dataclass(frozen=True)
class TaxonomyLabel:
    """One label of a concept; `kind` is "skill" or "knowledge" when the taxonomy says which."""

    text: str
    concept: str
    kind: str | None = None
    preferred: bool = True


@dataclass(frozen=True)
class TaxonomyMatch:
    """A label found at tokens [first, last] (inclusive) and characters [start, end) of the text."""

    first: int
    last: int
    start: int
    end: int
    label: TaxonomyLabel


@lru_cache(maxsize=200_000)
def token_key(token: str) -> str:
    """The form a token is compared in: NFKC, lowercase, unified dashes and quotes, stemmed."""
    text = unicodedata.normalize("NFKC", token).translate(_DASHES).translate(_QUOTES).lower()
    if not text.isalpha():
        return text
    return _STEMMER.stemWord(text)


def _keys(tokens: list[Token]) -> list[tuple[int, str]]:
    """(token index, key) of the tokens that count in a comparison (articles are left out)."""
    return [
        (index, token_key(token.text))
        for index, token in enumerate(tokens)
        if token.text.lower() not in _SKIPPED_WORDS
    ]


class TaxonomyMatcher:
    """Finds taxonomy labels in text; build once per run (it indexes every label)."""

    def __init__(self, labels: Iterable[TaxonomyLabel]) -> None:
        self._automaton = ahocorasick.Automaton()
        self.label_count = 0
        for label in labels:
            tokens = tokenize(label.text)
            keys = [key for _, key in _keys(tokens)]
            if not keys:
                continue
            pattern = f" {' '.join(keys)} "
            existing = self._automaton.get(pattern, None)
            # One label per key: a preferred label wins over an alternative one, then the first seen.
            if existing is None or (label.preferred and not existing[0].preferred):
                self._automaton.add_word(pattern, (label, len(keys)))
            self.label_count += 1
        if self.label_count:
            self._automaton.make_automaton()

    @classmethod
    def from_csv(cls, path: Path | str) -> TaxonomyMatcher:
        """An index of the preferred and alternative labels of a skills CSV in ESCO's format."""
        concepts, _ = read_taxonomy_csv(path)
        return cls(labels_of_concepts(concepts))

    def match(self, text: str, tokens: list[Token] | None = None) -> list[TaxonomyMatch]:
        """The labels found in `text`: longest first, then leftmost, without overlaps."""
        if not self.label_count:
            return []
        tokens = tokenize(text) if tokens is None else tokens
        kept = _keys(tokens)
        haystack_parts: list[str] = []
        token_at: dict[int, int] = {}  # position of a key's first character -> index into `kept`
        position = 0
        for number, (_, key) in enumerate(kept):
            haystack_parts.append(" ")
            position += 1
            token_at[position] = number
            haystack_parts.append(key)
            position += len(key)
        haystack = "".join(haystack_parts) + " "
        candidates: list[TaxonomyMatch] = []
        for end_position, (label, length) in self._automaton.iter(haystack):
            # end_position is the pattern's closing space: the key before it is the match's last token.
            last_number = token_at.get(_key_start(haystack, end_position))
            if last_number is None:
                continue
            first_number = last_number - length + 1
            first, last = kept[first_number][0], kept[last_number][0]
            if is_short(label.text) and not (first == last and tokens[first].text == label.text):
                continue
            candidates.append(TaxonomyMatch(first, last, tokens[first].start, tokens[last].end, label))
        return _without_overlaps(candidates)

    def mentions(
        self, text: str, tokens: list[Token] | None = None, field: str = "description"
    ) -> list[Mention]:
        """The matches as mentions (kind "skill" where the taxonomy does not say)."""
        return [
            Mention(
                text[found.start : found.end],
                found.label.kind or "skill",
                found.start,
                found.end,
                "taxonomy",
                field=field,
                concept=found.label.concept,
            )
            for found in self.match(text, tokens)
        ]


def _key_start(haystack: str, end_position: int) -> int:
    """Where the last key of a match ending at `end_position` (its closing space) begins."""
    return haystack.rindex(" ", 0, end_position) + 1


def _without_overlaps(candidates: list[TaxonomyMatch]) -> list[TaxonomyMatch]:
    chosen: list[TaxonomyMatch] = []
    taken: set[int] = set()
    for found in sorted(candidates, key=lambda m: (-(m.last - m.first), m.first)):
        span = set(range(found.first, found.last + 1))
        if span & taken:
            continue
        taken |= span
        chosen.append(found)
    return sorted(chosen, key=lambda m: m.first)


def labels_of_concepts(concepts: Iterable[object]) -> list[TaxonomyLabel]:
    """The labels of `plugins.postings.store.taxonomy.ConceptRow`s, with ESCO's skillType as the kind."""
    labels: list[TaxonomyLabel] = []
    for concept in concepts:
        skill_type = (getattr(concept, "skill_type", None) or "").lower()
        kind = (
            "knowledge" if skill_type == "knowledge" else "skill" if skill_type.startswith("skill") else None
        )
        uri = concept.concept_uri  # type: ignore[attr-defined]
        labels.append(TaxonomyLabel(concept.preferred_label, uri, kind, True))  # type: ignore[attr-defined]
        labels.extend(TaxonomyLabel(alt, uri, kind, False) for alt in concept.alt_labels)  # type: ignore[attr-defined]
    return labels
