"""What the enriched postings' columns are, without pyarrow: the definitions need these names, and
every run loads the definitions (`enriched_postings.py` builds the Arrow schemas)."""

SCHEMA_VERSION = "1"
"""The version of the enriched postings' columns (docs/outputs.md); written into every export."""

# The use cases whose outputs the table holds, and the prefix of their columns.
OUTPUT_PREFIXES: dict[str, str] = {
    "posting_summary": "summary",
    "posting_skills": "skills",
    "skill_entities": "concepts",
}
