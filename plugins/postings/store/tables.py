"""The postings plugin's tables: postings, the skills taxonomy, and each posting's resolved concepts.

They share the engine's declarative base (`appdb.models.Base`), so the one migration history in
`appdb/migrations` creates them with the engine's tables; the engine's statements never name them.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from appdb.models import KEY_LENGTH, Base, utcnow


class Posting(Base):
    """One job posting, upserted by its key; `content_hash` changes when any field changes."""

    __tablename__ = "postings"
    # Discovery's change marker reads max(updated_at) every sensor tick: without this index a full
    # scan (0.1-0.3 s at 100,000 postings). (Migration 0004.)
    __table_args__ = (Index("ix_postings_updated_at", "updated_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(KEY_LENGTH), unique=True)
    title: Mapped[str] = mapped_column(Text)
    company: Mapped[str | None] = mapped_column(Text)
    location: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str] = mapped_column(Text)
    url: Mapped[str | None] = mapped_column(Text)
    posted_at: Mapped[datetime | None]
    content_hash: Mapped[str] = mapped_column(String(64))
    ingested_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class TaxonomyConcept(Base):
    """One concept of the loaded skills taxonomy (ESCO's skills_en.csv columns)."""

    __tablename__ = "taxonomy_concepts"

    concept_uri: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    preferred_label: Mapped[str] = mapped_column(Text)
    alt_labels: Mapped[list[str]] = mapped_column(JSON, default=list)
    skill_type: Mapped[str | None] = mapped_column(String(100))
    description: Mapped[str | None] = mapped_column(Text)


class TaxonomyLabel(Base):
    """One preferred or alternative label of a concept, normalized and indexed for exact lookup."""

    __tablename__ = "taxonomy_labels"
    __table_args__ = (Index("ix_taxonomy_labels_normalized", "normalized_label"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    concept_uri: Mapped[str] = mapped_column(
        String(KEY_LENGTH), ForeignKey("taxonomy_concepts.concept_uri", ondelete="CASCADE")
    )
    label: Mapped[str] = mapped_column(Text)
    normalized_label: Mapped[str] = mapped_column(String(KEY_LENGTH))
    is_preferred: Mapped[bool] = mapped_column(default=False)


class PostingSkillConcept(Base):
    """One resolved skill mention of a posting, so postings can be queried by concept.

    Rewritten with each current `skill_entities` output of the posting; `concept_uri`
    is NULL for a mention left `unmatched`.
    """

    __tablename__ = "posting_skill_concepts"
    __table_args__ = (Index("ix_posting_skill_concepts_concept", "concept_uri"),)

    posting_key: Mapped[str] = mapped_column(
        String(KEY_LENGTH), ForeignKey("postings.key", ondelete="CASCADE"), primary_key=True
    )
    mention: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    kind: Mapped[str | None] = mapped_column(String(20))
    concept_uri: Mapped[str | None] = mapped_column(String(KEY_LENGTH))
    concept_label: Mapped[str | None] = mapped_column(Text)
    confidence: Mapped[float] = mapped_column(default=0.0)
    stage: Mapped[str] = mapped_column(String(20))  # exact | alt_label | fuzzy | semantic | unmatched
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
