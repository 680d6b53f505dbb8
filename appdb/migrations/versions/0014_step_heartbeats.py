"""step heartbeats: a step executing away from its run's process beats per (run, step, process)

With the Celery executor a run's process only sends its steps and waits; each step runs in a worker
process, possibly on another host. The run's process beats `run_heartbeats` (so a step still queued in
the broker leaves its run alive), and each worker process running a step beats here: a lost worker's
step is found dead by its own row, its claims come back, and the run goes on.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "step_heartbeats",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("step", sa.String(200), primary_key=True),
        sa.Column("instance_id", sa.String(32), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("boot_id", sa.String(40)),
        sa.Column("pid_namespace", sa.String(40)),
        sa.Column("process_started", sa.BigInteger()),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("beat_at", sa.DateTime(), nullable=False),
        sa.Column("ended_reason", sa.Text()),
    )
    op.create_index("ix_step_heartbeats_beat_at", "step_heartbeats", ["state", "beat_at"])


def downgrade() -> None:
    op.drop_index("ix_step_heartbeats_beat_at", table_name="step_heartbeats")
    op.drop_table("step_heartbeats")
