"""Load a skills taxonomy (ESCO's skills CSV format) into the application database.

The file is validated row by row: a bad row is reported as `file:line: reason` and the
good rows still load. The parsed content is hashed; when the hash equals the one stored
in `reference_data`, nothing is rewritten, so reloading the same file makes no output
stale. Otherwise concepts and labels are replaced in the caller's transaction with bulk
inserts (ESCO's ~14k concepts and ~110k labels take seconds).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert, select, text
from sqlalchemy.orm import Session

from appdb.models import KEY_LENGTH, ReferenceData, utcnow
from plugins.postings.store.tables import PostingSkillConcept, TaxonomyConcept, TaxonomyLabel

REFERENCE_NAME = "skills_taxonomy"
DEMO_TAXONOMY_PATH = Path(__file__).resolve().parents[1] / "demo_data" / "skills_taxonomy.csv"
REQUIRED_COLUMNS = ("conceptUri", "preferredLabel")
OPTIONAL_COLUMNS = ("altLabels", "skillType", "description")
_MAX_CSV_FIELD = 64 * 1024 * 1024
_INSERT_CHUNK = 10_000
_CONCEPT_KEYS_CHUNK = 500  # postings per delete (SQLite caps a statement's parameters)

# Every dash-like character becomes "-", every curly quote a straight one.
_DASHES = dict.fromkeys(map(ord, "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"), "-")
_QUOTES = {ord("\u2018"): "'", ord("\u2019"): "'", ord("\u201a"): "'", ord("\u201b"): "'"} | dict.fromkeys(
    map(ord, "\u201c\u201d\u201e\u201f\u00ab\u00bb"), '"'
)
# Stripped from both ends; "+" and "#" are kept (c++, c#) and a leading "." before a
# letter or digit too (.net).
_EDGE_PUNCTUATION = " \t\n\"'`.,;:!?()[]{}<>*\u2022\u00b7_\\|-~/=^"
_WHITESPACE = re.compile(r"\s+")
_SPACED_SLASH = re.compile(r"\s*/\s*")


def normalize_label(text: str) -> str:
    """The form labels and mentions are compared in: case, width, dashes, quotes and spacing unified.

    Characters that tell skills apart stay: "c++", "c#", ".net", "node.js", "ci/cd".
    """
    text = unicodedata.normalize("NFKC", text).translate(_DASHES).translate(_QUOTES).lower()
    text = _SPACED_SLASH.sub("/", _WHITESPACE.sub(" ", text))
    start, end = 0, len(text)
    while end > start and text[end - 1] in _EDGE_PUNCTUATION:
        end -= 1
    while start < end and text[start] in _EDGE_PUNCTUATION:
        if text[start] == "." and start + 1 < end and text[start + 1].isalnum():
            break
        start += 1
    return text[start:end]


@dataclass(frozen=True)
class ConceptRow:
    """One concept as read from the file (alt labels in file order, blanks dropped)."""

    concept_uri: str
    preferred_label: str
    alt_labels: tuple[str, ...]
    skill_type: str | None
    description: str | None


@dataclass
class TaxonomyLoad:
    """What `load_taxonomy` did; `changed` is False when the stored taxonomy was already this content."""

    concepts: int
    labels: int
    content_hash: str
    changed: bool
    rejected: list[str] = field(default_factory=list)
    source: str = ""


def read_taxonomy_csv(path: Path | str) -> tuple[list[ConceptRow], list[str]]:
    """Parse a skills CSV into concepts and `file:line: reason` rejections.

    Raises FileNotFoundError for a missing file and ValueError when the header lacks a
    required column (then no row could be read sensibly).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"skills taxonomy file not found: {path}")
    # surrogateescape keeps undecodable bytes visible per row instead of failing the file.
    text = path.read_bytes().decode("utf-8", errors="surrogateescape").lstrip("\ufeff")
    csv.field_size_limit(_MAX_CSV_FIELD)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
    except csv.Error as exc:
        raise ValueError(f"{path}: unreadable CSV header: {exc}") from exc
    missing = [name for name in REQUIRED_COLUMNS if name not in header]
    if missing:
        raise ValueError(
            f"{path}: the header has no column {', '.join(repr(name) for name in missing)} "
            f"(expected ESCO's skills CSV columns: {', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)})"
        )
    concepts: list[ConceptRow] = []
    rejections: list[str] = []
    first_line: dict[str, int] = {}
    line = reader.line_num + 1
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # the rest of the file cannot be parsed reliably
            rejections.append(f"{path}:{line}: unreadable CSV from here on: {exc}")
            break
        record_line, line = line, reader.line_num + 1
        try:
            concept = _concept_from_record(record)
        except ValueError as exc:
            rejections.append(f"{path}:{record_line}: {exc}")
            continue
        if concept.concept_uri in first_line:
            rejections.append(
                f"{path}:{record_line}: duplicate conceptUri {concept.concept_uri!r} "
                f"(first at line {first_line[concept.concept_uri]}, kept)"
            )
            continue
        first_line[concept.concept_uri] = record_line
        concepts.append(concept)
    return concepts, rejections


def _concept_from_record(record: dict[str | None, str | None]) -> ConceptRow:
    if None in record:
        raise ValueError("more fields than the header has")
    values = {name: (record.get(name) or "").strip() for name in REQUIRED_COLUMNS + OPTIONAL_COLUMNS}
    for name, value in values.items():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"invalid UTF-8 in {name!r}") from None
        if "\x00" in value:
            raise ValueError(f"{name!r} contains a NUL character")
    uri, label = values["conceptUri"], values["preferredLabel"]
    if not uri:
        raise ValueError("missing 'conceptUri'")
    if len(uri) > KEY_LENGTH:
        raise ValueError(f"'conceptUri' is longer than {KEY_LENGTH} characters")
    if not normalize_label(label):
        raise ValueError(f"missing 'preferredLabel' for {uri}")
    alt_labels = tuple(alt.strip() for alt in values["altLabels"].splitlines() if alt.strip())
    return ConceptRow(uri, label, alt_labels, values["skillType"] or None, values["description"] or None)


def concept_labels(concept: ConceptRow) -> list[tuple[str, str, bool]]:
    """(label, normalized label, is_preferred) of one concept, deduplicated after normalization."""
    seen: set[str] = set()
    labels = []
    for label, is_preferred in [
        (concept.preferred_label, True),
        *((alt, False) for alt in concept.alt_labels),
    ]:
        normalized = normalize_label(label)[:KEY_LENGTH]
        if normalized and normalized not in seen:
            seen.add(normalized)
            labels.append((label, normalized, is_preferred))
    return labels


def taxonomy_content_hash(concepts: list[ConceptRow]) -> str:
    """Hash of the parsed content, independent of row order and of columns we do not store."""
    canonical = sorted(
        [c.concept_uri, c.preferred_label, list(c.alt_labels), c.skill_type, c.description] for c in concepts
    )
    return hashlib.sha256(json.dumps(canonical, ensure_ascii=False).encode("utf-8")).hexdigest()


def _clear_taxonomy(session: Session) -> None:
    """Empty both taxonomy tables in the caller's transaction.

    On PostgreSQL, TRUNCATE: a DELETE of the concepts runs the labels' foreign-key check
    once per concept, and with no index on taxonomy_labels.concept_uri that took 80 s
    for ESCO. TRUNCATE is transactional there; readers wait for the commit.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"TRUNCATE {TaxonomyLabel.__tablename__}, {TaxonomyConcept.__tablename__}"))
    else:
        session.execute(delete(TaxonomyLabel))
        session.execute(delete(TaxonomyConcept))


def load_taxonomy(session: Session, path: Path | str) -> TaxonomyLoad:
    """Load `path` into the taxonomy tables in the caller's transaction, unless its content is already there.

    Raises ValueError when no row of the file is usable (an empty taxonomy would
    silently unresolve every skill).
    """
    path = Path(path)
    concepts, rejections = read_taxonomy_csv(path)
    if not concepts:
        detail = f"; first rejections: {rejections[:3]}" if rejections else ""
        raise ValueError(f"{path}: no usable concept in the skills taxonomy file{detail}")
    digest = taxonomy_content_hash(concepts)
    label_rows = [
        {
            "concept_uri": c.concept_uri,
            "label": label,
            "normalized_label": normalized,
            "is_preferred": preferred,
        }
        for c in concepts
        for label, normalized, preferred in concept_labels(c)
    ]
    result = TaxonomyLoad(len(concepts), len(label_rows), digest, False, rejections, str(path))
    reference = session.get(ReferenceData, REFERENCE_NAME)
    if reference is not None and reference.content_hash == digest:
        return result
    _clear_taxonomy(session)
    concept_rows = [
        {
            "concept_uri": c.concept_uri,
            "preferred_label": c.preferred_label,
            "alt_labels": list(c.alt_labels),
            "skill_type": c.skill_type,
            "description": c.description,
        }
        for c in concepts
    ]
    for start in range(0, len(concept_rows), _INSERT_CHUNK):
        session.execute(insert(TaxonomyConcept), concept_rows[start : start + _INSERT_CHUNK])
    for start in range(0, len(label_rows), _INSERT_CHUNK):
        session.execute(insert(TaxonomyLabel), label_rows[start : start + _INSERT_CHUNK])
    if reference is None:
        reference = ReferenceData(name=REFERENCE_NAME)
        session.add(reference)
    reference.content_hash = digest
    reference.source = str(path)
    reference.row_count = len(concepts)
    reference.updated_at = utcnow()
    session.flush()
    result.changed = True
    return result


def read_taxonomy_labels(
    session: Session,
) -> tuple[dict[str, str], list[tuple[str, str, str, bool]]]:
    """Every concept's preferred label by URI, and every label as (uri, label, normalized, is_preferred)."""
    preferred = dict(
        session.execute(
            select(TaxonomyConcept.concept_uri, TaxonomyConcept.preferred_label).order_by(
                TaxonomyConcept.concept_uri
            )
        ).all()
    )
    rows = session.execute(
        select(
            TaxonomyLabel.concept_uri,
            TaxonomyLabel.label,
            TaxonomyLabel.normalized_label,
            TaxonomyLabel.is_preferred,
        ).order_by(TaxonomyLabel.id)
    ).all()
    return preferred, [tuple(row) for row in rows]


def loaded_taxonomy_hash(session: Session) -> str | None:
    """The content hash of the loaded taxonomy, or None when none is loaded yet."""
    reference = session.get(ReferenceData, REFERENCE_NAME)
    return reference.content_hash if reference is not None else None


def replace_posting_skill_concepts(
    session: Session, entities_by_posting: Mapping[str, list[dict[str, Any]]]
) -> None:
    """The postings' rows in `posting_skill_concepts`, one per distinct mention of a posting
    (case-insensitive), so postings can be found by concept; written in the transaction that stores the
    resolutions, a statement per few hundred postings (a run stores a group at a time)."""
    keys, now = list(entities_by_posting), utcnow()
    rows: list[dict[str, Any]] = []
    for key, entities in entities_by_posting.items():
        seen: set[str] = set()
        for entity in entities:
            mention = entity["mention"][:KEY_LENGTH]
            if mention.lower() in seen:
                continue
            seen.add(mention.lower())
            rows.append(
                {
                    "posting_key": key,
                    "mention": mention,
                    "kind": entity["kind"],
                    "concept_uri": entity["concept_uri"],
                    "concept_label": entity.get("concept_label"),
                    "confidence": entity["confidence"],
                    "stage": entity["stage"],
                    "updated_at": now,
                }
            )
    table = PostingSkillConcept.__table__
    for start in range(0, len(keys), _CONCEPT_KEYS_CHUNK):
        session.execute(
            delete(table).where(table.c.posting_key.in_(keys[start : start + _CONCEPT_KEYS_CHUNK]))
        )
    if rows:
        session.execute(insert(table), rows)


def concept_label(session: Session, uri: str) -> str | None:
    """The preferred label of a concept of the loaded taxonomy; None when the URI is not one."""
    concept = session.get(TaxonomyConcept, uri)
    return concept.preferred_label if concept is not None else None
