"""taxonomy, resolved skills, reference data, use-case pauses

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reference_data",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("row_count", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "taxonomy_concepts",
        sa.Column("concept_uri", sa.String(length=255), nullable=False),
        sa.Column("preferred_label", sa.Text(), nullable=False),
        sa.Column("alt_labels", sa.JSON(), nullable=False),
        sa.Column("skill_type", sa.String(length=100), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("concept_uri"),
    )
    op.create_table(
        "taxonomy_labels",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("concept_uri", sa.String(length=255), nullable=False),
        sa.Column("label", sa.Text(), nullable=False),
        sa.Column("normalized_label", sa.String(length=255), nullable=False),
        sa.Column("is_preferred", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["concept_uri"], ["taxonomy_concepts.concept_uri"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_taxonomy_labels_normalized", "taxonomy_labels", ["normalized_label"])
    op.create_table(
        "posting_skill_concepts",
        sa.Column("posting_key", sa.String(length=255), nullable=False),
        sa.Column("mention", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=True),
        sa.Column("concept_uri", sa.String(length=255), nullable=True),
        sa.Column("concept_label", sa.Text(), nullable=True),
        sa.Column("confidence", sa.Double(), nullable=False),
        sa.Column("stage", sa.String(length=20), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["posting_key"], ["postings.key"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("posting_key", "mention"),
    )
    op.create_index("ix_posting_skill_concepts_concept", "posting_skill_concepts", ["concept_uri"])
    op.create_table(
        "use_case_pauses",
        sa.Column("use_case", sa.String(length=100), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("paused_at", sa.DateTime(), nullable=False),
        sa.Column("resume_at", sa.DateTime(), nullable=False),
        sa.Column("consecutive_trips", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("use_case"),
    )


def downgrade() -> None:
    op.drop_table("use_case_pauses")
    op.drop_index("ix_posting_skill_concepts_concept", table_name="posting_skill_concepts")
    op.drop_table("posting_skill_concepts")
    op.drop_index("ix_taxonomy_labels_normalized", table_name="taxonomy_labels")
    op.drop_table("taxonomy_labels")
    op.drop_table("taxonomy_concepts")
    op.drop_table("reference_data")
