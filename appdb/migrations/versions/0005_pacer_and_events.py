"""the pacer's token buckets, the event log, and each interaction's cost

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pacer_buckets",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("kind", sa.String(30), nullable=False),
        sa.Column("use_case", sa.String(100)),
        sa.Column("subject_kind", sa.String(50)),
        sa.Column("run_id", sa.String(64)),
        sa.Column("source", sa.String(20)),
        sa.Column("count", sa.Integer()),
        sa.Column("error_class", sa.String(100)),
        sa.Column("reason", sa.Text()),
        sa.Column("model", sa.String(200)),
        sa.Column("prompt_tokens", sa.Integer()),
        sa.Column("completion_tokens", sa.Integer()),
        sa.Column("cost", sa.Double()),
        sa.Column("detail", sa.JSON()),
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_index("ix_events_kind", "events", ["kind", "at"])
    with op.batch_alter_table("interactions") as batch:
        batch.add_column(sa.Column("cost", sa.Double()))


def downgrade() -> None:
    with op.batch_alter_table("interactions") as batch:
        batch.drop_column("cost")
    op.drop_index("ix_events_kind", table_name="events")
    op.drop_index("ix_events_at", table_name="events")
    op.drop_table("events")
    op.drop_table("pacer_buckets")
