"""the engine's tables name a subject's key and hash as such: `subject_key`, `subject_hash`

outputs, interactions, work items, grades, review items and corrections hold the key of any subject
(a posting, an autodo item), so their `posting_key` column becomes `subject_key`, and the outputs'
`posting_hash` (the subject's content hash an output was made from) becomes `subject_hash`. Every row
is kept (a rename in place: ALTER TABLE ... RENAME COLUMN, on SQLite 3.25+ and PostgreSQL); the
interactions' index follows with a name of its own. `posting_skill_concepts` is the postings plugin's
own table and keeps `posting_key`.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

RENAMED = {
    "outputs": (("posting_key", "subject_key"), ("posting_hash", "subject_hash")),
    "interactions": (("posting_key", "subject_key"),),
    "work_items": (("posting_key", "subject_key"),),
    "output_grades": (("posting_key", "subject_key"),),
    "review_items": (("posting_key", "subject_key"),),
    "corrections": (("posting_key", "subject_key"),),
}


def _rename(direction: int) -> None:
    for table, columns in RENAMED.items():
        for pair in columns:
            old, new = pair[::direction]
            op.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")


def upgrade() -> None:
    _rename(1)
    op.drop_index("ix_interactions_posting", table_name="interactions")
    op.create_index("ix_interactions_subject", "interactions", ["subject_key", "use_case"])


def downgrade() -> None:
    op.drop_index("ix_interactions_subject", table_name="interactions")
    _rename(-1)
    op.create_index("ix_interactions_posting", "interactions", ["posting_key", "use_case"])
