"""Which stored item a scanned one is, so that editing a TODO does not make a second item.

In order: the inline anchor (``<!-- TODO:WI-042 -->``); else the fingerprint (file + heading path +
text); else a fuzzy match of the text (rapidfuzz) among the stored items of the same file not matched
yet; else it is new and gets the next free ``WI-nnn`` key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rapidfuzz import fuzz

from plugins.autodo.scanner import ScannedItem

FUZZY_MIN_SCORE = 85.0
KEY_PATTERN = re.compile(r"^WI-(\d+)$")


@dataclass(frozen=True)
class KnownItem:
    """What matching needs of a stored item."""

    key: str
    file: str | None
    fingerprint: str | None
    text: str


@dataclass(frozen=True)
class Match:
    item: ScannedItem
    key: str
    how: str  # anchor | fingerprint | fuzzy | new


def match_items(scanned: Sequence[ScannedItem], known: Sequence[KnownItem]) -> list[Match]:
    """A key for every scanned item; no stored item is matched twice."""
    by_key = {item.key: item for item in known}
    by_fingerprint = {item.fingerprint: item.key for item in known if item.fingerprint}
    taken: set[str] = set()
    matches: dict[int, Match] = {}
    for index, item in enumerate(scanned):  # anchors first: they are what the user wrote
        if item.anchor is not None:
            matches[index] = Match(item, item.anchor, "anchor" if item.anchor in by_key else "new")
            taken.add(item.anchor)
    for index, item in enumerate(scanned):
        key = by_fingerprint.get(item.fingerprint)
        if index not in matches and key is not None and key not in taken:
            matches[index] = Match(item, key, "fingerprint")
            taken.add(key)
    for index, item in enumerate(scanned):
        if index in matches:
            continue
        candidates = [k for k in known if k.key not in taken and k.file == item.file]
        best = max(candidates, key=lambda k: fuzz.ratio(k.text.lower(), item.text.lower()), default=None)
        if best is not None and fuzz.ratio(best.text.lower(), item.text.lower()) >= FUZZY_MIN_SCORE:
            matches[index] = Match(item, best.key, "fuzzy")
            taken.add(best.key)
    next_number = next_key_number([*by_key, *taken])
    result = []
    for index, item in enumerate(scanned):
        if index not in matches:
            matches[index] = Match(item, f"WI-{next_number:03d}", "new")
            next_number += 1
        result.append(matches[index])
    return result


def next_key_number(keys: Iterable[str]) -> int:
    numbers = [int(m.group(1)) for key in keys if (m := KEY_PATTERN.match(key))]
    return max(numbers, default=0) + 1
