"""the enriched_postings view's skills and concepts hold the exported fields, as the export's lists do

The view's `skills` and `concepts` were the stored output's whole lists as JSON text, with fields
the table does not have (a skill's `evidence`, a concept's `source_mention`, and whatever a later
version of a use case adds); `pipeline export` and the `enriched_postings` asset keep only the
table's fields (docs/outputs.md). The view now builds each item from those fields in their order,
objects only, `[]` for an output without items, so its rows are the exported rows
(tests/integration/test_one_enriched_table.py holds the three together). Views only.

The SQL is written out here, not generated from `plugins.postings.store.enriched_postings`: a
migration is history and must do tomorrow what it did today; when the table's columns change, the
test fails until a new migration changes the view.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

OUTPUTS = {"summary": "posting_summary", "skills": "posting_skills", "concepts": "skill_entities"}
# the list columns: the output's field holding the items, and the fields of an item the table keeps
LISTS = {
    "skills": ("skills", ("mention", "kind", "field", "start", "end")),
    "concepts": ("entities", ("mention", "kind", "concept_uri", "concept_label", "stage", "confidence")),
}


def _model(alias: str) -> str:
    return f"CASE WHEN {alias}.backend = 'review' THEN 'reviewer' ELSE {alias}.model END"


def _items(alias: str, postgres: bool) -> str:
    """The list column `alias`: each object of the output's list with the kept fields, or null when
    the posting has no such output."""
    source, names = LISTS[alias]
    if postgres:
        fields = ", ".join(f"'{name}', i.item->'{name}'" for name in names)
        items = (
            f"(SELECT COALESCE(json_agg(json_build_object({fields}) ORDER BY i.n), '[]'::json)::text "
            f"FROM json_array_elements(CASE WHEN json_typeof({alias}.value->'{source}') = 'array' "
            f"THEN {alias}.value->'{source}' ELSE '[]'::json END) WITH ORDINALITY AS i(item, n) "
            "WHERE json_typeof(i.item) = 'object')"
        )
    else:
        fields = ", ".join(f"'{name}', json_extract(i.value, '$.{name}')" for name in names)
        items = (
            f"(SELECT json_group_array(json_object({fields})) "
            f"FROM (SELECT value FROM json_each({alias}.value, '$.{source}') "
            "WHERE type = 'object' ORDER BY key) AS i)"
        )
    return f"CASE WHEN {alias}.value IS NULL THEN NULL ELSE {items} END"


def _enriched_view(postgres: bool) -> str:
    summary = "summary.value->>'summary'" if postgres else "json_extract(summary.value, '$.summary')"
    values = {
        "summary": summary,
        "skills": _items("skills", postgres),
        "concepts": _items("concepts", postgres),
    }
    columns = ",\n".join(
        f"  {values[prefix]} AS {prefix}, {prefix}.use_case_version AS {prefix}_version, "
        f"{_model(prefix)} AS {prefix}_model, {prefix}.updated_at AS {prefix}_updated_at"
        for prefix in OUTPUTS
    )
    joins = "\n".join(
        f"LEFT JOIN outputs {prefix} ON {prefix}.use_case = '{use_case}' AND {prefix}.subject_key = p.key"
        for prefix, use_case in OUTPUTS.items()
    )
    latest = "GREATEST" if postgres else "MAX"
    times = ", ".join(
        ["p.updated_at", *(f"COALESCE({prefix}.updated_at, p.updated_at)" for prefix in OUTPUTS)]
    )
    return (
        "CREATE VIEW enriched_postings AS\nSELECT p.key, p.title, p.company, p.location, p.posted_at,\n"
        f"{columns},\n  {latest}({times}) AS updated_at\nFROM postings p\n{joins}"
    )


def _revision_0011():  # noqa: ANN202
    """Migration 0011, whose view this one replaces: the downgrade makes it again."""
    path = next(Path(__file__).parent.glob("0011_*.py"))
    spec = importlib.util.spec_from_file_location("_revision_0011", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upgrade() -> None:
    op.execute("DROP VIEW enriched_postings")  # posting_concepts reads the tables, not this view
    op.execute(_enriched_view(op.get_bind().dialect.name == "postgresql"))


def downgrade() -> None:
    op.execute("DROP VIEW enriched_postings")
    op.execute(_revision_0011()._enriched_view(op.get_bind().dialect.name == "postgresql"))
