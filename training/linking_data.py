"""Readers for the public linking data sets: SkillSkape (training) and Decorte et al. (selection, benchmark).

- SkillSkape (Magron et al. 2024, MIT): synthetic job-ad sentences, each with the ESCO skills
  it expresses (`,sentence,skills`, skills a Python list literal; "UNK" = none).
- Decorte et al. 2022 (TECH and HOUSE validation): SkillSpan sentences with skill spans linked to
  ESCO preferred labels (`sentence,span,sub_span,label`). The CSVs repeat some rows; queries are
  counted once per distinct sentence or (sentence, span). `LABEL NOT PRESENT` and
  `UNDERSPECIFIED` are not ESCO concepts and are left out of ranking metrics, as the data
  set's README says.

Gold labels are ESCO v1.1.0 preferred labels; `gold_concepts` maps them to the loaded taxonomy.
"""

from __future__ import annotations

import ast
import csv
import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from plugins.postings.store.taxonomy import normalize_label

SHARED_DATA_ENV = "PIPELINE_SHARED_DATA"
DEFAULT_SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
ESCO_FILE = Path("esco") / "skills_en_v1.1.1.csv"
DECORTE_FILES = {
    "tech": Path("decorte_esco_linked") / "tech_validation_annotations.csv",
    "house": Path("decorte_esco_linked") / "house_validation_annotations.csv",
}
SKILLSKAPE_FILES = {"train": Path("skillskape") / "train.csv", "dev": Path("skillskape") / "dev.csv"}
EXCLUDED_LABELS = frozenset({"LABEL NOT PRESENT", "UNDERSPECIFIED"})


def data_dir(arg: str | Path | None = None) -> Path:
    """The public data folder: `arg`, else $PIPELINE_SHARED_DATA, else ../shared/data (must exist)."""
    path = Path(arg) if arg else Path(os.environ.get(SHARED_DATA_ENV) or DEFAULT_SHARED_DATA)
    if not path.is_dir():
        raise FileNotFoundError(
            f"the shared data folder {path} does not exist: pass --data-dir DIR or set {SHARED_DATA_ENV}"
        )
    return path.resolve()


@dataclass(frozen=True)
class SpanQuery:
    """One distinct (sentence, span) with an ESCO label: the span given, rank ESCO concepts."""

    sentence: str
    span: str
    gold_labels: frozenset[str]


@dataclass(frozen=True)
class SentenceQuery:
    """One distinct sentence with at least one ESCO label; `spans` are all its annotated spans."""

    sentence: str
    gold_labels: frozenset[str]
    spans: tuple[str, ...]


@dataclass(frozen=True)
class DecorteSplit:
    name: str
    span_queries: list[SpanQuery]
    sentence_queries: list[SentenceQuery]
    unlinked_spans: list[tuple[str, str]]  # (sentence, span) annotated LABEL NOT PRESENT only
    rows: int
    excluded_rows: int


def read_decorte(path: Path, name: str) -> DecorteSplit:
    """A Decorte et al. annotation file as distinct span and sentence queries."""
    labels: dict[tuple[str, str], set[str]] = defaultdict(set)
    spans: dict[str, dict[str, None]] = defaultdict(dict)
    rows = excluded = 0
    with path.open(newline="", encoding="utf-8-sig") as handle:
        for row in csv.DictReader(handle):
            rows += 1
            sentence = (row.get("sentence") or "").strip()
            span = (row.get("sub_span") or "").strip() or (row.get("span") or "").strip()
            label = (row.get("label") or "").strip()
            if not sentence or not span:
                excluded += 1
                continue
            spans[sentence][span] = None
            labels[(sentence, span)].add(label)
            if not label or label in EXCLUDED_LABELS:
                excluded += 1
    span_queries = [
        SpanQuery(sentence, span, frozenset(found - EXCLUDED_LABELS - {""}))
        for (sentence, span), found in labels.items()
        if found - EXCLUDED_LABELS - {""}
    ]
    unlinked = [key for key, found in labels.items() if found == {"LABEL NOT PRESENT"}]
    by_sentence: dict[str, set[str]] = defaultdict(set)
    for query in span_queries:
        by_sentence[query.sentence] |= query.gold_labels
    sentence_queries = [
        SentenceQuery(sentence, frozenset(gold), tuple(spans[sentence]))
        for sentence, gold in by_sentence.items()
    ]
    return DecorteSplit(name, span_queries, sentence_queries, unlinked, rows, excluded)


def read_decorte_splits(root: Path) -> list[DecorteSplit]:
    return [read_decorte(root / relative, name) for name, relative in DECORTE_FILES.items()]


def read_skillskape(path: Path) -> list[tuple[str, frozenset[str]]]:
    """(sentence, ESCO preferred labels) per row; rows with no skill ("UNK") are left out."""
    examples = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        for row in reader:
            if len(row) < 3:
                continue
            try:
                labels = ast.literal_eval(row[2])
            except (ValueError, SyntaxError) as exc:
                raise ValueError(f"{path}: cannot read the skills of row {row[0]!r}: {exc}") from exc
            kept = frozenset(label for label in labels if label and label != "UNK")
            if row[1].strip() and kept:
                examples.append((row[1].strip(), kept))
    return examples


def read_reuse_levels(path: Path) -> dict[str, str]:
    """ESCO preferred label -> reuse level (transversal, cross-sector, sector- or occupation-specific)."""
    with path.open(newline="", encoding="utf-8") as handle:
        return {row["preferredLabel"]: row["reuseLevel"] for row in csv.DictReader(handle)}


def gold_index(preferred_labels: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Concept URIs by exact preferred label and by normalized preferred label."""
    exact: dict[str, list[str]] = defaultdict(list)
    normalized: dict[str, list[str]] = defaultdict(list)
    for uri, label in preferred_labels.items():
        exact[label].append(uri)
        normalized[normalize_label(label)].append(uri)
    return exact, normalized


def gold_concepts(
    labels: Iterable[str], index: tuple[dict[str, list[str]], dict[str, list[str]]]
) -> tuple[set[str], list[str]]:
    """The concept URIs the labels name (exactly, else after normalization), and the labels none names."""
    exact, normalized = index
    found: set[str] = set()
    unmapped = []
    for label in labels:
        uris = exact.get(label) or normalized.get(normalize_label(label))
        if uris:
            found.update(uris)
        else:
            unmapped.append(label)
    return found, unmapped


_CLAUSE_BREAK = re.compile(
    r"\s*(?:[,;:()\[\]|•*]|\s[-–]\s|\.(?=\s|$)|\b(?:and|or|as well as|while|including|such as|whilst|"
    r"which|that|who|where|ensuring|by|through|with|using)\b)\s*",
    re.IGNORECASE,
)


def sentence_chunks(sentence: str, max_words: int = 8) -> list[str]:
    """Phrases of a sentence split at punctuation and linking words: pseudo-mentions for training.

    "Experience in conducting financial analysis and making data-driven recommendations" ->
    ["Experience in conducting financial analysis", "making data-driven recommendations"];
    phrases longer than `max_words` also give their last `max_words` words.
    """
    chunks = []
    for piece in _CLAUSE_BREAK.split(sentence):
        words = piece.split()
        if not words or not normalize_label(piece):
            continue
        chunks.append(" ".join(words))
        if len(words) > max_words:
            chunks.append(" ".join(words[-max_words:]))
    return list(dict.fromkeys(chunks))
