"""Migration 0007 (outputs, work items, review items and corrections keyed by any subject) keeps every
row of a database made before it, and afterwards an autodo item's output can be stored."""

from __future__ import annotations

from alembic import command
from sqlalchemy import text

from appdb.database import alembic_config, get_engine

ROWS = {
    "postings": "INSERT INTO postings (key, title, description, content_hash, ingested_at, updated_at) "
    "VALUES ('p-1', 'Nurse', 'Care.', 'h', '2026-01-01', '2026-01-01')",
    "outputs": "INSERT INTO outputs (use_case, posting_key, value, model, backend, use_case_version, "
    "input_hash, posting_hash, created_at, updated_at) "
    "VALUES ('posting_summary', 'p-1', '{}', 'm', 'b', 'v', 'i', 'h', "
    "'2026-01-01', '2026-01-01')",
    "work_items": "INSERT INTO work_items (use_case, posting_key, status, attempts, created_at, updated_at) "
    "VALUES ('posting_summary', 'p-1', 'done', 1, '2026-01-01', '2026-01-01')",
    "review_items": "INSERT INTO review_items (use_case, posting_key, use_case_version, reason, status, "
    "created_at) VALUES ('posting_summary', 'p-1', 'v', 'low grade', 'open', '2026-01-01')",
    "corrections": "INSERT INTO corrections (use_case, posting_key, use_case_version, verdict, corrected, "
    "created_at) VALUES ('posting_summary', 'p-1', 'v', 'accepted', '{}', '2026-01-01')",
}


def test_migration_0007_keeps_every_row_and_frees_the_keys(app_db_url: str) -> None:
    engine = get_engine(app_db_url)
    config = alembic_config(app_db_url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0006")
    with engine.begin() as connection:
        for statement in ROWS.values():
            connection.execute(text(statement))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0007")
    with engine.begin() as connection:
        counts = {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar() for table in ROWS}
        connection.execute(
            text(ROWS["outputs"].replace("'posting_summary', 'p-1'", "'autodo_scope', 'WI-001'"))
        )
    assert counts == dict.fromkeys(ROWS, 1)
