"""autodo's own tables: each work item's state (its text is a `subjects` row of kind ``autodo``) and the
dependencies between items."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from appdb.models import KEY_LENGTH, Base, utcnow


class AutodoItem(Base):
    """autodo's own state of one work item (its text is the `subjects` row of kind ``autodo``):
    status, priority, parent, where it was last seen, notes. (Migration 0006.)"""

    __tablename__ = "autodo_items"
    __table_args__ = (Index("ix_autodo_items_fingerprint", "fingerprint"),)

    key: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    status: Mapped[str] = mapped_column(String(20), default="open")  # open | done | wontfix | stale
    priority: Mapped[str] = mapped_column(String(2), default="P2")
    parent_key: Mapped[str | None] = mapped_column(String(KEY_LENGTH))
    file: Mapped[str | None] = mapped_column(Text)
    line: Mapped[int | None] = mapped_column(Integer)
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    anchor: Mapped[str | None] = mapped_column(String(100))
    unseen_scans: Mapped[int] = mapped_column(Integer, default=0)
    notes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    closed_at: Mapped[datetime | None]


class AutodoDependency(Base):
    """`item_key` waits for `depends_on` (never a cycle: `plugins/autodo/planning.py`)."""

    __tablename__ = "autodo_dependencies"

    item_key: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    depends_on: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
