"""Where a skill mention sits in a posting: tokens with character offsets, and grounding on word boundaries.

Every extractor (the tagger, the taxonomy matcher, an LLM) ends in a `Mention` that carries its
character offsets in the text it was found in, so a mention is scored, shown and linked where it
was found rather than wherever else its words occur. Text an LLM returns is located here: on
word boundaries, case-insensitively and tolerant of spacing, except that a mention of one or two
letters ("R", "C", "Go") must appear as a whole word in its own case, so that "Go" is found in
"Go and Rust" but not in "go-to-market", "Cargo" or "Go-to-market".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

MENTION_KINDS = ("skill", "knowledge")
# A token is a run of word characters, joined across inner ".", "'", "-", "&" ("node.js",
# "e-mail", "2021-04-22", "R&D"), with trailing "+"/"#" ("C++", "C#") and a leading "." before
# letters (".NET"); any other non-space character is a token of its own.
_TOKEN = re.compile(r"(?<![\w.])\.(?=[A-Za-z])\w+|\w+(?:['’.\-&]\w+)*[+#]*|[^\w\s]")
# One or two letters (possibly with "+"/"#"): grounded only as a whole word in the original case.
SHORT_MENTION_LENGTH = 2
# Next to a short mention, only these (or the start/end of the text, or a space) may stand.
_SHORT_NEIGHBOURS = set(',;:()[]{}"/!?|•*')
_SENTENCE_END = re.compile(r"[.!?;](?=\s)|\n")
_EDGE_PUNCTUATION = " \t\n.,;:!?\"'()[]{}-*•"


@dataclass(frozen=True)
class Token:
    """A token of the text with its character offsets (`end` exclusive)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Mention:
    """A skill or knowledge mention at `text[start:end]` of the field it was found in.

    `source` says what found it ("tagger", "taxonomy", "llm"); `score` is the tagger's
    marginal probability of the span (or 1.0 when the source has none); `concept` is the
    taxonomy concept a taxonomy match came from.
    """

    text: str
    kind: str
    start: int
    end: int
    source: str
    score: float = 1.0
    field: str = "description"
    concept: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in MENTION_KINDS:
            raise ValueError(f"mention kind must be one of {MENTION_KINDS}, not {self.kind!r}")
        if not 0 <= self.start < self.end:
            raise ValueError(f"mention offsets must satisfy 0 <= start < end, not {self.start}..{self.end}")


def tokenize(text: str) -> list[Token]:
    """The tokens of raw posting text with their offsets (the tagger and the matcher share them)."""
    return [Token(match.group(), match.start(), match.end()) for match in _TOKEN.finditer(text)]


def is_short(mention: str) -> bool:
    """One or two letters, e.g. "R", "C#", "Go": such mentions are grounded in their own case only."""
    return len(mention.rstrip("+#")) <= SHORT_MENTION_LENGTH


def _pattern(mention: str) -> re.Pattern[str] | None:
    words = mention.split()
    if not words:
        return None
    body = r"\s+".join(re.escape(word) for word in words)
    if is_short(mention):
        return re.compile(body)
    before = r"(?<![\w])" if mention[0].isalnum() or mention[0] == "_" else ""
    after = r"(?![\w+#])" if mention[-1].isalnum() or mention[-1] == "_" else r"(?![\w])"
    return re.compile(before + body + after, re.IGNORECASE)


def _short_boundaries(text: str, start: int, end: int) -> bool:
    before = text[start - 1] if start > 0 else " "
    after = text[end] if end < len(text) else " "
    if after == "." and (end + 1 == len(text) or text[end + 1].isspace()):
        after = " "  # a sentence ends right after it: "... in R."
    return all(char.isspace() or char in _SHORT_NEIGHBOURS for char in (before, after))


def locate_all(mention: str, text: str) -> list[tuple[int, int]]:
    """Every place `mention` occurs in `text` on word boundaries, as (start, end) character offsets."""
    pattern = _pattern(mention.strip())
    if pattern is None:
        return []
    found = [(match.start(), match.end()) for match in pattern.finditer(text)]
    if is_short(mention.strip()):
        found = [(start, end) for start, end in found if _short_boundaries(text, start, end)]
    return found


def locate(mention: str, text: str, after: int = 0) -> tuple[int, int] | None:
    """The first place at or after `after` where `mention` occurs on word boundaries, else None."""
    return next(((start, end) for start, end in locate_all(mention, text) if start >= after), None)


def sentence_around(text: str, start: int, end: int) -> str:
    """The sentence (or line) of `text` that holds the offsets: the evidence shown with a mention."""
    left = 0
    for match in _SENTENCE_END.finditer(text, 0, start):
        left = match.end()
    right_match = _SENTENCE_END.search(text, max(end, left))
    right = right_match.end() if right_match else len(text)
    return text[left:right].strip()


def ground_mentions(
    generated: Iterable[tuple[str, str]], title: str, description: str, source: str = "llm"
) -> tuple[list[Mention], list[str]]:
    """Locate generated (mention, kind) pairs in the posting: the grounded mentions and the dropped ones.

    A mention is looked for in the description first, then in the title. A mention generated
    more than once is located at its next occurrence each time (so a repeated mention does
    not count twice at one place); one that cannot be located is dropped and returned as text.
    """
    grounded: list[Mention] = []
    dropped: list[str] = []
    next_start: dict[tuple[str, str], int] = {}
    for raw, kind in generated:
        mention = " ".join(str(raw).split()).strip(_EDGE_PUNCTUATION.replace("-", ""))
        if not mention:
            continue
        for field, text in (("description", description), ("title", title)):
            key = (field, mention.lower())
            place = locate(mention, text, next_start.get(key, 0))
            if place is not None:
                next_start[key] = place[1]
                grounded.append(
                    Mention(text[place[0] : place[1]], kind, place[0], place[1], source, field=field)
                )
                break
        else:
            dropped.append(mention)
    return grounded, dropped
