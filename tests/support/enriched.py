"""Postings with stored outputs of the three enrichment use cases, as a run would leave them: p-1 with
all three, p-2 with a summary only, p-3 with none (tests of the enriched postings table and assets)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from appdb.database import session_scope
from appdb.models import UseCaseOutput
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.store.tables import Posting
from tests.support.postings import seed_postings

T0 = datetime(2026, 11, 20, 8, 0, 0)
PYTHON = "http://data.europa.eu/esco/skill/python"

SUMMARY = {"summary": "Brightwave Energy hires a Data Engineer in Berlin for Python and SQL pipelines."}
SKILLS = {
    "skills": [
        {
            "mention": "Python",
            "kind": "knowledge",
            "evidence": "Python",
            "field": "description",
            "start": 6,
            "end": 12,
        },
        {
            "mention": "SQL",
            "kind": "knowledge",
            "evidence": "SQL",
            "field": "description",
            "start": 17,
            "end": 20,
        },
    ],
    "ungrounded": [],
}
ENTITIES = {
    "entities": [
        {
            "mention": "Python",
            "source_mention": "Python",
            "kind": "knowledge",
            "concept_uri": PYTHON,
            "concept_label": "Python (computer programming)",
            "confidence": 0.97,
            "stage": "learned",
        },
        {
            "mention": "SQL",
            "source_mention": "SQL",
            "kind": "knowledge",
            "concept_uri": None,
            "concept_label": None,
            "confidence": 0.0,
            "stage": "unmatched",
        },
    ],
    "matched": 1,
    "unmatched": 1,
}


def seed_enriched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_db_url: str) -> dict[str, Any]:
    """p-1 with all three outputs, p-2 with a summary only, p-3 with none; the specs of the use cases."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    seed_postings(app_db_url, tmp_path)
    specs = {item.spec.use_case: item.spec for item in build_use_cases(Settings.from_env())}
    with session_scope(app_db_url) as session:
        hashes = {
            row.key: row.content_hash for row in session.execute(select(Posting.key, Posting.content_hash))
        }
        made = [
            ("posting_summary", "p-1", SUMMARY, T0),
            ("posting_skills", "p-1", SKILLS, T0 + timedelta(minutes=1)),
            ("skill_entities", "p-1", ENTITIES, T0 + timedelta(minutes=2)),
            (
                "posting_summary",
                "p-2",
                {"summary": "Northgate Hospital seeks a nurse."},
                T0 + timedelta(days=3),
            ),
        ]
        for use_case, key, value, at in made:
            spec = specs[use_case]
            session.add(
                UseCaseOutput(
                    use_case=use_case,
                    subject_key=key,
                    value=value,
                    model=spec.model or "cpu",
                    backend="fake",
                    use_case_version=spec.version,
                    input_hash="0" * 64,
                    subject_hash=hashes[key],
                    run_id="run-1",
                    interaction_id=None,
                    created_at=at,
                    updated_at=at,
                )
            )
        session.execute(Posting.__table__.update().values(updated_at=T0 - timedelta(days=1)))
    return {"url": app_db_url, "specs": specs}
