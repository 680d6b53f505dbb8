"""run heartbeats name their process by more than a pid: an instance id, the boot and the PID namespace

A pid names a process only within one PID namespace on one boot: a run in a container (or under
`unshare --pid`) with the host's hostname was reaped from the host as "process gone", and the other way
round. The row now says which process beats (`instance_id`, random per process), and where its pid
means something (`boot_id`, `pid_namespace`, and `process_started`, its start in clock ticks since
boot, so a reused pid is told apart without comparing clocks). All nullable: rows of older versions,
and processes without /proc, are judged by their heartbeat's age alone.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = (
    ("instance_id", sa.String(32)),
    ("boot_id", sa.String(40)),
    ("pid_namespace", sa.String(40)),
    ("process_started", sa.BigInteger()),
)


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("run_heartbeats", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_heartbeats") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
