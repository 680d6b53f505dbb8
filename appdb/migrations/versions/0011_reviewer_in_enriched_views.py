"""the enriched postings views name a reviewer's value `reviewer` in their model columns

A reviewer's correction (`pipeline review correct`) keeps the use case's model in `outputs.model`, so
discovery takes it as current; the views said it was made by that model. They now say `reviewer` where
the output's backend is `review`, as `pipeline export` does (docs/outputs.md). Views only.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _model(alias: str) -> str:
    return f"CASE WHEN {alias}.backend = 'review' THEN 'reviewer' ELSE {alias}.model END"


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
        f"  c.use_case_version AS concepts_version, {_model('c')} AS concepts_model,\n"
        "  c.updated_at AS concepts_updated_at\n"
        f"FROM postings p\nJOIN outputs c ON c.use_case = 'skill_entities' AND c.subject_key = p.key\n{each}"
    )


def _replace(enriched: str, concepts: str) -> None:
    op.execute("DROP VIEW posting_concepts")
    op.execute("DROP VIEW enriched_postings")
    op.execute(enriched)
    op.execute(concepts)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    _replace(_enriched_view(postgres), _concepts_view(postgres))


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    plain = _enriched_view(postgres).replace(_model("summary"), "summary.model")
    plain = plain.replace(_model("skills"), "skills.model").replace(_model("concepts"), "concepts.model")
    _replace(plain, _concepts_view(postgres).replace(_model("c"), "c.model"))
