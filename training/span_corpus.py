"""Span-annotated corpora as raw text with gold spans: SkillSpan (JSON lines) and Sayfullina (CoNLL).

Both come pre-tokenized. A document's text is rebuilt by joining its tokens with spaces and
its sentences with line breaks, and every gold token keeps its character offsets, so an
extractor reads plain text (as it would a posting) and a predicted mention is scored by the
gold tokens its offsets cover (`gold_token_span`): a mention counts where it was found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from plugins.postings.skills.mention_grounding import MENTION_KINDS, Mention
from plugins.postings.skills.skill_metrics import SPAN_MODES, Span, span_scores


@dataclass
class GoldDocument:
    """One posting (SkillSpan) or snippet (Sayfullina): its text, gold tokens and gold spans per kind.

    Gold spans are [first, end) ranges of gold tokens; `token_offsets[i]` is gold token i's
    (start, end) in `text`.
    """

    doc_id: str
    text: str = ""
    token_offsets: list[tuple[int, int]] = field(default_factory=list)
    gold: dict[str, list[tuple[int, int]]] = field(
        default_factory=lambda: {kind: [] for kind in MENTION_KINDS}
    )

    def add_sentence(self, tokens: list[str], tags_by_kind: dict[str, list[str]]) -> None:
        if self.text:
            self.text += "\n"
        offset = len(self.token_offsets)
        for position, token in enumerate(tokens):
            if position:
                self.text += " "
            self.token_offsets.append((len(self.text), len(self.text) + len(token)))
            self.text += token
        for kind, tags in tags_by_kind.items():
            self.gold[kind] += [(offset + first, offset + end) for first, end in bio_spans(tags)]

    def gold_token_span(self, start: int, end: int) -> tuple[int, int] | None:
        """The [first, end) gold tokens that characters [start, end) overlap (None if none)."""
        covered = [i for i, (left, right) in enumerate(self.token_offsets) if left < end and start < right]
        return (covered[0], covered[-1] + 1) if covered else None

    def gold_char_span(self, first: int, end: int) -> tuple[int, int]:
        return self.token_offsets[first][0], self.token_offsets[end - 1][1]


def bio_spans(tags: list[str]) -> list[tuple[int, int]]:
    """[first, end) spans of BIO tags, typed or not ("B", "B-Skill"); an I after O opens a span."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    for index, tag in enumerate([*tags, "O"]):
        prefix = tag[:1].upper()
        if start is not None and prefix != "I":
            spans.append((start, index))
            start = None
        if prefix == "B" or (prefix == "I" and start is None):
            start = index
    return spans


def load_skillspan(path: Path | str) -> list[GoldDocument]:
    """SkillSpan postings rebuilt from their sentences, grouped by (source, idx), in file order."""
    documents: dict[tuple[str, int], GoldDocument] = {}
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key = (row["source"], row["idx"])
                tags = {"skill": row["tags_skill"], "knowledge": row["tags_knowledge"]}
                tokens = row["tokens"]
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{path}:{number}: not a SkillSpan row: {exc}") from exc
            document = documents.setdefault(key, GoldDocument(doc_id=f"{key[0]}-{key[1]}"))
            document.add_sentence(tokens, tags)
    return list(documents.values())


def load_conll(path: Path | str, kind: str = "skill", prefix: str = "") -> list[GoldDocument]:
    """Snippets of a CoNLL file (token TAB BIO tag, blank line between snippets); every tag is `kind`."""
    documents: list[GoldDocument] = []
    tokens: list[str] = []
    tags: list[str] = []

    def flush() -> None:
        if tokens:
            document = GoldDocument(doc_id=f"{prefix}{len(documents) + 1}")
            document.add_sentence(list(tokens), {kind: list(tags)})
            documents.append(document)
            tokens.clear()
            tags.clear()

    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                flush()
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 2:
                raise ValueError(f"{path}:{number}: expected 'token<TAB>tag', got {line.strip()!r}")
            tokens.append(parts[0])
            tags.append(parts[1])
    flush()
    return documents


def score_mentions(
    documents: list[GoldDocument], predicted: dict[str, list[Mention]]
) -> dict[str, dict[str, dict[str, float | int]]]:
    """Strict and loose span P/R/F1 per kind, overall (kind must match) and "any" (kind ignored).

    A mention is scored at the gold tokens its own offsets cover, never elsewhere; mentions
    found in another field than the text (a title) count as false positives. Gold spans of
    documents without predictions still count in the recall.
    """
    gold: dict[str, set[Span]] = {kind: set() for kind in (*MENTION_KINDS, "overall", "any")}
    guessed: dict[str, set[Span]] = {kind: set() for kind in gold}
    for document in documents:
        for kind in MENTION_KINDS:
            for first, end in document.gold[kind]:
                gold[kind].add((document.doc_id, first, end))
                gold["overall"].add(((document.doc_id, kind), first, end))
                gold["any"].add((document.doc_id, first, end))
        for number, mention in enumerate(predicted.get(document.doc_id, [])):
            span = (
                document.gold_token_span(mention.start, mention.end)
                if mention.field == "description"
                else None
            )
            # A mention outside the text (or in the title) matches nothing: give it a span of its own.
            first, end = span if span is not None else (-1 - number, -number)
            guessed[mention.kind].add((document.doc_id, first, end))
            guessed["overall"].add(((document.doc_id, mention.kind), first, end))
            guessed["any"].add((document.doc_id, first, end))
    return {
        kind: {mode: span_scores(gold[kind], guessed[kind], mode).__dict__ for mode in SPAN_MODES}
        for kind in gold
    }
