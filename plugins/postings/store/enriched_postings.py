"""The enriched postings as a table: one row per posting with its summary, skills and concepts.

This is the read side users build on (pandas, `pipeline export`, the `enriched_postings` asset, the
`enriched_postings` SQL view; `enriched_table` is what the asset and the export write, and a test holds
the view to it): the posting's fields beside the current output of each enrichment use
case, read from `outputs.value` (what `pipeline trace` shows), with each output's version, model and
time. A posting without an output of a use case has nulls there, never a missing row.

Reading is chunked by posting id (keyset pagination, no IN lists), so memory stays bounded by the
chunk size whatever the number of postings. The table's columns are `ENRICHED_SCHEMA` (documented,
with its version `SCHEMA_VERSION`, in docs/outputs.md); bump the version when a column changes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from appdb import discovery
from appdb.discovery import WorkSpec
from appdb.models import UseCaseOutput
from appdb.review import REVIEW_BACKEND, REVIEWER
from plugins.postings.store.enriched_columns import OUTPUT_PREFIXES, SCHEMA_VERSION
from plugins.postings.store.tables import Posting

DEFAULT_CHUNK_SIZE = 5_000
"""Postings per chunk: ~10 MB of Python objects per chunk with the shipped outputs."""

_TIME = pa.timestamp("us", tz="UTC")
SKILL_TYPE = pa.struct(
    [
        ("mention", pa.string()),
        ("kind", pa.string()),
        ("field", pa.string()),
        ("start", pa.int32()),
        ("end", pa.int32()),
    ]
)
CONCEPT_TYPE = pa.struct(
    [
        ("mention", pa.string()),
        ("kind", pa.string()),
        ("concept_uri", pa.string()),
        ("concept_label", pa.string()),
        ("stage", pa.string()),
        ("confidence", pa.float64()),
    ]
)

if TYPE_CHECKING:  # DataFrames for readers; runs (which import this module) need no pandas
    import pandas as pd


def _provenance(prefix: str) -> list[pa.Field]:
    return [
        pa.field(f"{prefix}_version", pa.string()),
        pa.field(f"{prefix}_model", pa.string()),
        pa.field(f"{prefix}_updated_at", _TIME),
    ]


ENRICHED_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("company", pa.string()),
        pa.field("location", pa.string()),
        pa.field("posted_at", _TIME),
        pa.field("summary", pa.string()),
        *_provenance("summary"),
        pa.field("skills", pa.list_(SKILL_TYPE)),
        *_provenance("skills"),
        pa.field("concepts", pa.list_(CONCEPT_TYPE)),
        *_provenance("concepts"),
        pa.field("updated_at", _TIME, nullable=False),
    ],
    metadata={"posting_enrichment.schema_version": SCHEMA_VERSION},
)
"""One row per posting. `updated_at` is the latest of the posting's and its outputs' times."""

CONCEPTS_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("posted_at", _TIME),
        *[pa.field(name, CONCEPT_TYPE.field(name).type) for name in CONCEPT_TYPE.names],
        *_provenance("concepts"),
    ],
    metadata={"posting_enrichment.schema_version": SCHEMA_VERSION},
)
"""One row per (posting, resolved mention): the `concepts` column of ENRICHED_SCHEMA, long."""

# The `stage` values skill_entities writes (its output schema's enum, which a test holds this to: the
# store sits below the skill models and does not import them). `learned`: the learned linker's answer.
CONCEPT_STAGES = ("exact", "alt_label", "fuzzy", "semantic", "learned", "referee", "review", "unmatched")
_STAGES = "|".join(CONCEPT_STAGES)

# What each column means, for docs/outputs.md and the schema file beside an export.
COLUMN_DESCRIPTIONS: dict[str, str] = {
    "key": "the posting's key, as ingested",
    "title": "the posting's title",
    "company": "the hiring company, when the posting names it",
    "location": "where the job is, when the posting says",
    "posted_at": "when the posting was published (UTC), when known",
    "summary": "posting_summary: one or two factual sentences",
    "skills": "posting_skills: each mention with its kind (skill|knowledge) and its span: field "
    "(title|description) and character offsets start..end in that field",
    "concepts": "skill_entities: each mention resolved to a taxonomy concept: concept_uri and "
    f"concept_label (null when unmatched), stage ({_STAGES}) and confidence 0..1",
    "updated_at": "the latest of the posting's and its outputs' update times (UTC)",
    "mention": "the skill mention as it reads in the posting",
    "kind": "skill or knowledge",
    "concept_uri": "the taxonomy concept's URI (null when unmatched)",
    "concept_label": "the concept's preferred label (null when unmatched)",
    "stage": f"how the concept was found ({', '.join(CONCEPT_STAGES)})",
    "confidence": "0..1, how sure the resolution is",
}
for _use_case, _prefix in OUTPUT_PREFIXES.items():
    COLUMN_DESCRIPTIONS[f"{_prefix}_version"] = f"the {_use_case} version that made the output"
    COLUMN_DESCRIPTIONS[f"{_prefix}_model"] = f"the model (or CPU model) that made the {_use_case} output"
    COLUMN_DESCRIPTIONS[f"{_prefix}_updated_at"] = f"when the {_use_case} output was written (UTC)"


@dataclass(frozen=True)
class ReadFilter:
    """Which postings and outputs to read.

    `since`: only postings whose row or any read output changed at or after this time (naive = UTC).
    `use_cases`: read only these use cases' outputs (the others' columns stay null); None reads all.
    `current_specs`: when given, an output that is not current by its use case's spec (the rule
    discovery applies) reads as missing; a use case read without a spec here is an error.
    """

    since: datetime | None = None
    use_cases: tuple[str, ...] | None = None
    current_specs: Mapping[str, WorkSpec] | None = None

    def read_use_cases(self) -> tuple[str, ...]:
        chosen = tuple(OUTPUT_PREFIXES) if self.use_cases is None else self.use_cases
        unknown = [name for name in chosen if name not in OUTPUT_PREFIXES]
        if unknown:
            raise ValueError(
                f"no use case {unknown[0]!r} in the enriched postings (known: {', '.join(OUTPUT_PREFIXES)})"
            )
        if self.current_specs is not None:
            missing = [name for name in chosen if name not in self.current_specs]
            if missing:
                raise ValueError(f"use case {missing[0]!r} is not declared, so no output of it is current")
        return chosen

    def since_utc(self) -> datetime | None:
        if self.since is None or self.since.tzinfo is None:
            return self.since
        return self.since.astimezone(UTC).replace(tzinfo=None)


def iter_enriched_tables(
    session: Session, read: ReadFilter | None = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[pa.Table]:
    """The enriched postings, `chunk_size` postings at a time in id order, as Arrow tables of
    ENRICHED_SCHEMA (an empty database yields nothing)."""
    read = read or ReadFilter()
    use_cases = read.read_use_cases()
    since = read.since_utc()
    last_id = 0
    while True:
        postings = _posting_chunk(session, last_id, chunk_size, since, use_cases)
        if not postings:
            return
        last_id = postings[-1].id
        outputs = _outputs_of(session, postings, use_cases, read.current_specs)
        yield pa.Table.from_pylist([_row(posting, outputs) for posting in postings], schema=ENRICHED_SCHEMA)
        if len(postings) < chunk_size:
            return


@dataclass(frozen=True)
class EnrichedTable:
    """The enriched postings (or their long concepts table) as Arrow chunks of one schema: what the
    `enriched_postings` asset, `pipeline export` and the demo's export write, each to its file."""

    schema: pa.Schema
    chunks: Iterator[pa.Table]
    descriptions: Mapping[str, str]


def enriched_table(
    session: Session,
    read: ReadFilter | None = None,
    *,
    concepts: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> EnrichedTable:
    """The one producer of the table: a row per posting (or, with `concepts`, per resolved mention),
    `chunk_size` postings at a time. The `enriched_postings` SQL view is held to it by a test
    (tests/integration/test_one_enriched_table.py)."""
    if concepts:
        return EnrichedTable(
            CONCEPTS_SCHEMA, iter_concept_tables(session, read, chunk_size=chunk_size), COLUMN_DESCRIPTIONS
        )
    return EnrichedTable(
        ENRICHED_SCHEMA, iter_enriched_tables(session, read, chunk_size=chunk_size), COLUMN_DESCRIPTIONS
    )


def iter_concept_tables(
    session: Session, read: ReadFilter | None = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[pa.Table]:
    """The (posting, concept) rows of the postings `iter_enriched_tables` reads, chunk by chunk, as
    Arrow tables of CONCEPTS_SCHEMA; postings without concepts have no rows here."""
    for table in iter_enriched_tables(session, read, chunk_size=chunk_size):
        yield concept_rows(table)


def concept_rows(enriched: pa.Table) -> pa.Table:
    """The `concepts` column of an enriched table, one row per concept."""
    rows = []
    for record in enriched.select(
        ["key", "title", "posted_at", *_provenance_names("concepts"), "concepts"]
    ).to_pylist():
        for concept in record.pop("concepts") or []:
            rows.append({**record, **concept})
    return pa.Table.from_pylist(rows, schema=CONCEPTS_SCHEMA)


def enriched_postings_frame(
    session: Session, read: ReadFilter | None = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> pd.DataFrame:
    """All enriched postings (with `read`'s filters) as one DataFrame, a row per posting; for a large
    database iterate `iter_enriched_frames` instead."""
    return to_frame(_concat(iter_enriched_tables(session, read, chunk_size=chunk_size), ENRICHED_SCHEMA))


def iter_enriched_frames(
    session: Session, read: ReadFilter | None = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Iterator[pd.DataFrame]:
    """The enriched postings as DataFrames of at most `chunk_size` rows each (bounded memory)."""
    for table in iter_enriched_tables(session, read, chunk_size=chunk_size):
        yield to_frame(table)


def posting_concepts_frame(
    session: Session, read: ReadFilter | None = None, *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> pd.DataFrame:
    """The long table: one row per (posting, resolved mention)."""
    return to_frame(_concat(iter_concept_tables(session, read, chunk_size=chunk_size), CONCEPTS_SCHEMA))


def to_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow table as pandas reads it from Parquet (`pd.read_parquet`): the same frame either way."""
    return table.to_pandas()


def _concat(tables: Iterator[pa.Table], schema: pa.Schema) -> pa.Table:
    chunks = list(tables)
    return pa.concat_tables(chunks) if chunks else schema.empty_table()


def _provenance_names(prefix: str) -> list[str]:
    return [f"{prefix}_version", f"{prefix}_model", f"{prefix}_updated_at"]


def _posting_chunk(
    session: Session, after_id: int, size: int, since: datetime | None, use_cases: Sequence[str]
) -> list[Any]:
    query = (
        select(
            Posting.id,
            Posting.key,
            Posting.title,
            Posting.company,
            Posting.location,
            Posting.posted_at,
            Posting.updated_at,
        )
        .where(Posting.id > after_id)
        .order_by(Posting.id)
        .limit(size)
    )
    if since is not None:
        # per posting, an index lookup on outputs' key (use case, subject): no list of changed keys
        # built again for every chunk
        changed = (
            select(UseCaseOutput.subject_key)
            .where(
                UseCaseOutput.use_case.in_(use_cases),
                UseCaseOutput.subject_key == Posting.key,
                UseCaseOutput.updated_at >= since,
            )
            .exists()
        )
        query = query.where(or_(Posting.updated_at >= since, changed))
    return list(session.execute(query))


def _outputs_of(
    session: Session,
    postings: Sequence[Any],
    use_cases: Sequence[str],
    current_specs: Mapping[str, WorkSpec] | None,
) -> dict[tuple[str, str], Any]:
    """(use case, key) -> the stored output row, for the chunk's postings (id range, no IN list)."""
    first, last = postings[0].id, postings[-1].id
    query = (
        select(
            UseCaseOutput.use_case,
            UseCaseOutput.subject_key,
            UseCaseOutput.value,
            UseCaseOutput.model,
            UseCaseOutput.backend,
            UseCaseOutput.use_case_version,
            UseCaseOutput.updated_at,
        )
        .join(Posting, Posting.key == UseCaseOutput.subject_key)
        .where(and_(Posting.id >= first, Posting.id <= last), UseCaseOutput.use_case.in_(use_cases))
    )
    found = {(row.use_case, row.subject_key): row for row in session.execute(query)}
    if current_specs is not None:
        keys = [posting.key for posting in postings]
        for use_case in use_cases:
            for key in discovery.outdated_outputs(session, current_specs[use_case], keys):
                found.pop((use_case, key), None)
    return found


def shown_model(backend: str, model: str) -> str:
    """The `*_model` column: who made the value. A reviewer's correction keeps the use case's model in
    the outputs table (so discovery takes it as current) but was not made by it."""
    return REVIEWER if backend == REVIEW_BACKEND else model


def _utc(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(tzinfo=UTC)


def _row(posting: Any, outputs: Mapping[tuple[str, str], Any]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "key": posting.key,
        "title": posting.title,
        "company": posting.company,
        "location": posting.location,
        "posted_at": _utc(posting.posted_at),
    }
    latest = posting.updated_at
    for use_case, prefix in OUTPUT_PREFIXES.items():
        output = outputs.get((use_case, posting.key))
        value = output.value if output is not None else None
        row[prefix] = _VALUE_READERS[prefix](value) if isinstance(value, dict) else None
        row[f"{prefix}_version"] = output.use_case_version if output is not None else None
        row[f"{prefix}_model"] = shown_model(output.backend, output.model) if output is not None else None
        row[f"{prefix}_updated_at"] = _utc(output.updated_at) if output is not None else None
        if output is not None and output.updated_at > latest:
            latest = output.updated_at
    row["updated_at"] = _utc(latest)
    return row


def _summary(value: Mapping[str, Any]) -> str | None:
    summary = value.get("summary")
    return summary if isinstance(summary, str) else None


def _skills(value: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {name: item.get(name) for name in SKILL_TYPE.names}
        for item in value.get("skills") or []
        if isinstance(item, dict)
    ]


def _concepts(value: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {name: item.get(name) for name in CONCEPT_TYPE.names}
        for item in value.get("entities") or []
        if isinstance(item, dict)
    ]


_VALUE_READERS = {"summary": _summary, "skills": _skills, "concepts": _concepts}


def schema_document(schema: pa.Schema) -> dict[str, Any]:
    """The schema as JSON for the file beside an export: version, and each column's type and meaning."""
    return {
        "schema_version": SCHEMA_VERSION,
        "columns": [
            {
                "name": field.name,
                "type": str(field.type),
                "nullable": field.nullable,
                "description": COLUMN_DESCRIPTIONS.get(field.name, ""),
            }
            for field in schema
        ],
    }
