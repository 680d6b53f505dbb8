"""The `stage` of a resolved concept reads the same in the export's schema, docs/outputs.md and what
skill_entities writes (issue 64: the docs said `linker` where the code writes `learned`)."""

from __future__ import annotations

import re

from pipeline_defs.settings import PROJECT_ROOT
from plugins.postings.store.enriched_postings import COLUMN_DESCRIPTIONS
from plugins.postings.use_cases.skill_entities import SKILL_ENTITIES


def _written_stages() -> set[str]:
    item = SKILL_ENTITIES.output_schema["properties"]["entities"]["items"]
    return set(item["properties"]["stage"]["enum"])


def test_the_export_schema_names_the_stages_skill_entities_writes() -> None:
    described = re.search(r"how the concept was found \(([^)]*)\)", COLUMN_DESCRIPTIONS["stage"]).group(1)
    assert set(described.split(", ")) == _written_stages()
    concepts = re.search(r"stage \(([^)]*)\)", COLUMN_DESCRIPTIONS["concepts"]).group(1)
    assert set(concepts.split("|")) == _written_stages()


def test_docs_outputs_names_the_stages_skill_entities_writes() -> None:
    docs = (PROJECT_ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")
    listed = re.search(r"`stage` says how it was found \(([^:)]*)", docs).group(1)
    assert set(re.findall(r"`(\w+)`", listed)) == _written_stages()
