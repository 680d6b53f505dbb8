"""the work core's subjects (kinds other than postings) and autodo's items and dependencies

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "subjects",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("content", sa.JSON(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("kind", "key", name="uq_subjects_kind_key"),
    )
    op.create_index("ix_subjects_kind_updated_at", "subjects", ["kind", "updated_at"])
    op.create_table(
        "autodo_items",
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("priority", sa.String(2), nullable=False),
        sa.Column("parent_key", sa.String(255)),
        sa.Column("file", sa.Text()),
        sa.Column("line", sa.Integer()),
        sa.Column("fingerprint", sa.String(64)),
        sa.Column("anchor", sa.String(100)),
        sa.Column("unseen_scans", sa.Integer(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("closed_at", sa.DateTime()),
    )
    op.create_index("ix_autodo_items_fingerprint", "autodo_items", ["fingerprint"])
    op.create_table(
        "autodo_dependencies",
        sa.Column("item_key", sa.String(255), primary_key=True),
        sa.Column("depends_on", sa.String(255), primary_key=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("autodo_dependencies")
    op.drop_index("ix_autodo_items_fingerprint", table_name="autodo_items")
    op.drop_table("autodo_items")
    op.drop_index("ix_subjects_kind_updated_at", table_name="subjects")
    op.drop_table("subjects")
