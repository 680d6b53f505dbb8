"""the enriched postings as SQL views: `enriched_postings` and `posting_concepts` (docs/outputs.md)

For SQL users, the same table `pipeline export` writes: one row per posting with each output's value,
version, model and time (nulls where a posting has no output yet), and one row per (posting, resolved
mention). The skills and concepts columns hold JSON text. Views only: nothing is copied, no row changes.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

OUTPUTS = {"summary": "posting_summary", "skills": "posting_skills", "concepts": "skill_entities"}


def _enriched_view(postgres: bool) -> str:
    def field(alias: str, name: str) -> str:
        if postgres:
            return f"{alias}.value->>'{name}'" if name == "summary" else f"({alias}.value->'{name}')::text"
        return f"json_extract({alias}.value, '$.{name}')"

    values = {
        "summary": field("summary", "summary"),
        "skills": field("skills", "skills"),
        "concepts": field("concepts", "entities"),
    }
    columns = ",\n".join(
        f"  {values[prefix]} AS {prefix}, {prefix}.use_case_version AS {prefix}_version, "
        f"{prefix}.model AS {prefix}_model, {prefix}.updated_at AS {prefix}_updated_at"
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


def _concepts_view(postgres: bool) -> str:
    if postgres:
        each, item = (
            "CROSS JOIN LATERAL json_array_elements(c.value->'entities') AS e(item)",
            "e.item->>'{0}'",
        )
        confidence = "(e.item->>'confidence')::float"
    else:
        each, item = "JOIN json_each(c.value, '$.entities') AS e", "json_extract(e.value, '$.{0}')"
        confidence = item.format("confidence")
    fields = ", ".join(
        f"{item.format(name)} AS {name}"
        for name in ("mention", "kind", "concept_uri", "concept_label", "stage")
    )
    return (
        "CREATE VIEW posting_concepts AS\n"
        f"SELECT p.key, p.title, p.posted_at, {fields}, {confidence} AS confidence,\n"
        "  c.use_case_version AS concepts_version, c.model AS concepts_model,\n"
        "  c.updated_at AS concepts_updated_at\n"
        f"FROM postings p\nJOIN outputs c ON c.use_case = 'skill_entities' AND c.subject_key = p.key\n{each}"
    )


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute(_enriched_view(postgres))
    op.execute(_concepts_view(postgres))


def downgrade() -> None:
    op.execute("DROP VIEW posting_concepts")
    op.execute("DROP VIEW enriched_postings")
