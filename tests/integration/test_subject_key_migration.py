"""Migration 0009 (the engine's tables say `subject_key` and `subject_hash`, not `posting_key` and
`posting_hash`) keeps every row of a database made before it, with its values, on both engines; and the
postings plugin's own `posting_skill_concepts` keeps its `posting_key`."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from appdb.database import alembic_config, get_engine, migrate

BEFORE = {
    "postings": "INSERT INTO postings (key, title, description, content_hash, ingested_at, updated_at) "
    "VALUES ('p-1', 'Nurse', 'Care.', 'h1', '2026-01-01', '2026-01-01')",
    "outputs": "INSERT INTO outputs (use_case, posting_key, value, model, backend, use_case_version, "
    "input_hash, posting_hash, created_at, updated_at) "
    "VALUES ('posting_summary', 'p-1', '{}', 'm', 'b', 'v', 'i', 'h1', '2026-01-01', '2026-01-01')",
    "interactions": "INSERT INTO interactions (use_case, use_case_version, posting_key, backend, model, "
    "prompt, system_prompt, options, status, source, started_at) "
    "VALUES ('posting_summary', 'v', 'p-1', 'b', 'm', 'P', '', '{}', 'ok', 'cli', '2026-01-01')",
    "work_items": "INSERT INTO work_items (use_case, posting_key, status, attempts, created_at, updated_at) "
    "VALUES ('posting_summary', 'p-1', 'done', 1, '2026-01-01', '2026-01-01')",
    "output_grades": "INSERT INTO output_grades (use_case, posting_key, use_case_version, input_hash, "
    "judge_model, rubric_version, scores, overall, created_at) "
    "VALUES ('posting_summary', 'p-1', 'v', 'i', 'j', 'r', '{}', 4.0, '2026-01-01')",
    "review_items": "INSERT INTO review_items (use_case, posting_key, use_case_version, reason, status, "
    "created_at) VALUES ('posting_summary', 'p-1', 'v', 'low grade', 'open', '2026-01-01')",
    "corrections": "INSERT INTO corrections (use_case, posting_key, use_case_version, verdict, corrected, "
    "created_at) VALUES ('posting_summary', 'p-1', 'v', 'accepted', '{}', '2026-01-01')",
    "posting_skill_concepts": "INSERT INTO posting_skill_concepts (posting_key, mention, stage, confidence, "
    "updated_at) VALUES ('p-1', 'Python', 'exact', 1.0, '2026-01-01')",
}
RENAMED = ("outputs", "interactions", "work_items", "output_grades", "review_items", "corrections")


def test_migration_0009_renames_the_key_columns_and_keeps_every_row(app_db_url: str) -> None:
    engine = get_engine(app_db_url)
    config = alembic_config(app_db_url)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0008")
    with engine.begin() as connection:
        for statement in BEFORE.values():
            connection.execute(text(statement))
    migrate(app_db_url)
    columns = {table: {column["name"] for column in inspect(engine).get_columns(table)} for table in BEFORE}
    with engine.begin() as connection:
        keys = {
            table: connection.execute(text(f"SELECT subject_key FROM {table}")).scalars().all()
            for table in RENAMED
        }
        made_from = connection.execute(text("SELECT subject_hash FROM outputs")).scalar()
        concept_keys = (
            connection.execute(text("SELECT posting_key FROM posting_skill_concepts")).scalars().all()
        )
    assert keys == {table: ["p-1"] for table in RENAMED}
    assert made_from == "h1"
    assert concept_keys == ["p-1"]
    assert not any("posting_key" in columns[table] or "posting_hash" in columns[table] for table in RENAMED)
    indexes = {index["name"] for index in inspect(engine).get_indexes("interactions")}
    assert "ix_interactions_subject" in indexes and "ix_interactions_posting" not in indexes
