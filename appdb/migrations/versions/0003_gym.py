"""the gym: judge grades, review items, corrections (the gold corpus)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "output_grades",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("use_case", sa.String(length=100), nullable=False),
        sa.Column("posting_key", sa.String(length=255), nullable=False),
        sa.Column("use_case_version", sa.String(length=50), nullable=False),
        sa.Column("input_hash", sa.String(length=64), nullable=False),
        sa.Column("judge_model", sa.String(length=200), nullable=False),
        sa.Column("rubric_version", sa.String(length=50), nullable=False),
        sa.Column("scores", sa.JSON(), nullable=False),
        sa.Column("overall", sa.Double(), nullable=False),
        sa.Column("interaction_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_output_grades_use_case", "output_grades", ["use_case", "created_at"])
    op.create_table(
        "review_items",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("use_case", sa.String(length=100), nullable=False),
        sa.Column("posting_key", sa.String(length=255), nullable=False),
        sa.Column("use_case_version", sa.String(length=50), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("check_name", sa.String(length=100), nullable=True),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.Column("interaction_id", sa.Integer(), nullable=True),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["posting_key"], ["postings.key"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_review_items_status", "review_items", ["status", "use_case"])
    op.create_table(
        "corrections",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("use_case", sa.String(length=100), nullable=False),
        sa.Column("posting_key", sa.String(length=255), nullable=False),
        sa.Column("use_case_version", sa.String(length=50), nullable=False),
        sa.Column("verdict", sa.String(length=20), nullable=False),
        sa.Column("original", sa.JSON(), nullable=True),
        sa.Column("corrected", sa.JSON(), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("review_item_id", sa.Integer(), nullable=True),
        sa.Column("interaction_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["posting_key"], ["postings.key"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_corrections_use_case", "corrections", ["use_case", "posting_key"])


def downgrade() -> None:
    op.drop_index("ix_corrections_use_case", table_name="corrections")
    op.drop_table("corrections")
    op.drop_index("ix_review_items_status", table_name="review_items")
    op.drop_table("review_items")
    op.drop_index("ix_output_grades_use_case", table_name="output_grades")
    op.drop_table("output_grades")
