"""The toy's own table: a tag per proverb. A branch of its own (`toy`), beside the engine's history.

Revision ID: toy_0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "toy_0001"
down_revision = None
branch_labels = ("toy",)
depends_on = None  # independent of the engine's branch: a process that does not know the toy leaves it alone


def upgrade() -> None:
    op.create_table(
        "toy_tags",
        sa.Column("subject_key", sa.String(200), primary_key=True),
        sa.Column("tag", sa.String(100), nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("toy_tags")
