"""Content-word stems of a skill mention or label, for the linker's word-overlap features.

A light stemmer (no dictionary): a suffix stripped, then the first five letters kept, so
"developing", "developed", "development" and "develops" all give "devel", "communicate" and
"communication" "commu", "analysis" and "analyses" "analy". Crude, and good enough to tell that
a mention and a label share their words, which is all the reranker asks of it.
"""

from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[a-z0-9][a-z0-9+#.]*")
_STOPWORD_TEXT = """a an and are as at be by for from in into is it its of on or our the their to with your
you we will all any other such this that these those using use via etc including experience skills
skill ability able strong good excellent"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# Longest first; a suffix is removed only when at least three letters stay.
_SUFFIXES = (
    "ational", "ization", "isation", "ations", "ments", "ation", "ities", "ement", "ingly",
    "ness", "ment", "ings", "ions", "ing", "ion", "ity", "ies", "ers", "ed", "er", "es", "ly", "al", "s",
)  # fmt: skip


STEM_LETTERS = 5


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """`word` (lower case) without its suffix, cut to `STEM_LETTERS` letters."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith(("ss", "is", "us")):
            base = word[: -len(suffix)]
            if suffix == "ies":
                base += "y"
            elif len(base) > 3 and base[-1] == base[-2] and base[-1] not in "ls":  # "planning" -> "plan"
                base = base[:-1]
            return base[:STEM_LETTERS]
    return word[:STEM_LETTERS]


@lru_cache(maxsize=200_000)
def content_stems(text: str) -> tuple[str, ...]:
    """The stems of `text`'s content words, in order (stop words and generic skill words dropped)."""
    words = _WORD.findall(text.lower())
    return tuple(stem(word.rstrip(".")) for word in words if word.rstrip(".") not in STOPWORDS)
