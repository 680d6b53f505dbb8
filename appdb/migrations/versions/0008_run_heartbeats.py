"""run heartbeats: every run that can hold the llm pool or claims shows it is alive

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_heartbeats",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("source", sa.String(20)),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("beat_at", sa.DateTime(), nullable=False),
        sa.Column("ended_reason", sa.Text()),
    )
    op.create_index("ix_run_heartbeats_beat_at", "run_heartbeats", ["state", "beat_at"])


def downgrade() -> None:
    op.drop_index("ix_run_heartbeats_beat_at", table_name="run_heartbeats")
    op.drop_table("run_heartbeats")
