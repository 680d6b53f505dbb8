"""indexes the discovery sensor's tick needs at 100,000 postings

The change marker reads max(updated_at) of postings, outputs and work items, the next
retry and the next lease expiry, and the lease sweep looks for expired claims: each was
a full scan without these (see README, Performance: discovery at scale).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

INDEXES = (
    ("ix_postings_updated_at", "postings", ["updated_at"]),
    ("ix_outputs_updated_at", "outputs", ["updated_at"]),
    ("ix_work_items_updated_at", "work_items", ["updated_at"]),
    ("ix_work_items_next_attempt_at", "work_items", ["next_attempt_at"]),
    ("ix_work_items_lease_expires_at", "work_items", ["lease_expires_at"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _columns in reversed(INDEXES):
        op.drop_index(name, table_name=table)
