"""outputs, work items, review items and corrections keyed by any subject, not only postings

The work core runs use cases on subjects of several kinds (postings, autodo items), so these tables'
`posting_key` no longer references `postings.key`. Every row is kept; only the constraint goes (with it
the cascade: deleting a posting no longer deletes its outputs, and nothing in the project deletes
postings). `posting_skill_concepts` keeps its foreign key: it is postings-only.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = ("outputs", "work_items", "review_items", "corrections")
# SQLite's foreign keys have no names: batch mode names them by this convention to drop them.
NAMING = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s"}


def upgrade() -> None:
    bind = op.get_bind()
    for table in TABLES:
        if bind.dialect.name == "postgresql":
            for fk in sa.inspect(bind).get_foreign_keys(table):
                if fk["referred_table"] == "postings":
                    op.drop_constraint(fk["name"], table, type_="foreignkey")
        else:
            with op.batch_alter_table(table, naming_convention=NAMING, recreate="always") as batch:
                batch.drop_constraint(f"fk_{table}_posting_key_postings", type_="foreignkey")


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(
                f"fk_{table}_posting_key_postings", "postings", ["posting_key"], ["key"], ondelete="CASCADE"
            )
