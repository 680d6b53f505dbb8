"""Loading the skills taxonomy: the demo file, reloads, replacement, bad rows, and the Dagster asset."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import materialize
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import func, select

from appdb.database import session_scope
from appdb.models import ReferenceData
from plugins.postings.store.tables import TaxonomyConcept, TaxonomyLabel
from plugins.postings.store.taxonomy import (
    DEMO_TAXONOMY_PATH,
    REFERENCE_NAME,
    load_taxonomy,
    normalize_label,
    read_taxonomy_csv,
)
from plugins.postings.taxonomy_asset import skills_taxonomy
from plugins.postings.taxonomy_resource import TaxonomyResource
from resources.app_database import AppDatabase
from tests.support.taxonomy_files import URI, write_taxonomy


def small_rows() -> list[list[str]]:
    return [
        [URI + "python", "Python", "python programming\nPython 3", "knowledge", "A programming language."],
        [URI + "sql", "SQL", "structured query language", "knowledge", "Querying relational data."],
        [URI + "excel", "Microsoft Excel", "Excel\nMS Excel\nmicrosoft  EXCEL", "knowledge", "Spreadsheets."],
    ]


def labels_of(session, uri: str) -> set[tuple[str, bool]]:  # noqa: ANN001 - a SQLAlchemy session
    rows = session.execute(
        select(TaxonomyLabel.normalized_label, TaxonomyLabel.is_preferred).where(
            TaxonomyLabel.concept_uri == uri
        )
    )
    return {(label, preferred) for label, preferred in rows}


def test_demo_taxonomy_loads_with_indexed_labels(app_db_url: str) -> None:
    with session_scope(app_db_url) as session:
        load = load_taxonomy(session, DEMO_TAXONOMY_PATH)
    assert load.changed and not load.rejected
    assert 100 <= load.concepts <= 200
    assert load.source == str(DEMO_TAXONOMY_PATH)
    with session_scope(app_db_url) as session:
        assert session.scalar(select(func.count()).select_from(TaxonomyConcept)) == load.concepts
        assert session.scalar(select(func.count()).select_from(TaxonomyLabel)) == load.labels
        excel = session.scalars(
            select(TaxonomyLabel.concept_uri).where(TaxonomyLabel.normalized_label == "ms excel")
        ).all()
        assert excel == [URI + "excel"]
        assert (("python", True)) in labels_of(session, URI + "python")
        assert ("structured query language", False) in labels_of(session, URI + "sql")
        reference = session.get(ReferenceData, REFERENCE_NAME)
        assert (reference.content_hash, reference.row_count) == (load.content_hash, load.concepts)


def test_demo_taxonomy_covers_skills_named_in_the_demo_postings(sqlite_url: str) -> None:
    mentions = [
        "Python",
        "SQL",
        "dbt",
        "Kubernetes",
        "PostgreSQL",
        "Java",
        "Spring Boot",
        "Kafka",
        "Figma",
        "Excel",
        "PowerPoint",
        "Terraform",
        "AWS",
        "HACCP",
        "AutoCAD",
        "Revit",
        "PCR",
        "ELISA",
        "React",
        "TypeScript",
        "Salesforce",
        "Zendesk",
        "forklift licence",
        "German",
        "driving licence",
        "Go",
        "WCAG",
        "Grafana",
        "Prometheus",
        "Google Analytics",
        "Canva",
    ]
    with session_scope(sqlite_url) as session:
        load_taxonomy(session, DEMO_TAXONOMY_PATH)
        known = set(session.scalars(select(TaxonomyLabel.normalized_label)))
    assert [mention for mention in mentions if normalize_label(mention) not in known] == []


def test_reloading_the_same_content_changes_nothing(app_db_url: str, tmp_path: Path) -> None:
    path = write_taxonomy(tmp_path / "skills.csv", small_rows())
    with session_scope(app_db_url) as session:
        first = load_taxonomy(session, path)
    with session_scope(app_db_url) as session:
        before = session.get(ReferenceData, REFERENCE_NAME).updated_at
        label_ids = set(session.scalars(select(TaxonomyLabel.id)))
    # Same content in another order and with a BOM: the same taxonomy.
    same = write_taxonomy(tmp_path / "same.csv", list(reversed(small_rows())), bom=True)
    with session_scope(app_db_url) as session:
        again = load_taxonomy(session, same)
    assert first.changed and not again.changed
    assert again.content_hash == first.content_hash
    assert (again.concepts, again.labels) == (first.concepts, first.labels)
    with session_scope(app_db_url) as session:
        assert session.get(ReferenceData, REFERENCE_NAME).updated_at == before
        assert set(session.scalars(select(TaxonomyLabel.id))) == label_ids


def test_a_changed_file_replaces_concepts_and_labels(app_db_url: str, tmp_path: Path) -> None:
    with session_scope(app_db_url) as session:
        load_taxonomy(session, write_taxonomy(tmp_path / "v1.csv", small_rows()))
    with session_scope(app_db_url) as session:
        before = session.get(ReferenceData, REFERENCE_NAME).updated_at
    rows = small_rows()[:2]
    rows[0][2] = "py"
    with session_scope(app_db_url) as session:
        load = load_taxonomy(session, write_taxonomy(tmp_path / "v2.csv", rows))
    assert load.changed and load.concepts == 2
    with session_scope(app_db_url) as session:
        assert session.get(TaxonomyConcept, URI + "excel") is None
        assert labels_of(session, URI + "excel") == set()
        assert labels_of(session, URI + "python") == {("python", True), ("py", False)}
        assert session.get(TaxonomyConcept, URI + "python").alt_labels == ["py"]
        reference = session.get(ReferenceData, REFERENCE_NAME)
        assert reference.updated_at > before
        assert (reference.row_count, reference.source) == (2, str(tmp_path / "v2.csv"))


def test_labels_are_deduplicated_per_concept_after_normalization(sqlite_url: str, tmp_path: Path) -> None:
    with session_scope(sqlite_url) as session:
        load_taxonomy(session, write_taxonomy(tmp_path / "skills.csv", small_rows()))
        # "microsoft  EXCEL" normalizes to the preferred label and is not stored twice.
        assert labels_of(session, URI + "excel") == {
            ("microsoft excel", True),
            ("excel", False),
            ("ms excel", False),
        }


def test_bad_rows_are_reported_with_file_line_and_reason_and_good_rows_load(
    app_db_url: str, tmp_path: Path
) -> None:
    rows = [
        *small_rows(),  # lines 2-3, 4 and 5-7: multi-line alt labels span several lines
        ["", "Orphan label", "", "knowledge", ""],  # line 8
        [URI + "no-label", "  ", "", "knowledge", ""],  # line 9
        [URI + "sql", "SQL again", "", "knowledge", ""],  # line 10
        [URI + "dbt", "dbt", "data build tool", "knowledge", "SQL models."],  # line 11
    ]
    path = write_taxonomy(tmp_path / "skills.csv", rows)
    with session_scope(app_db_url) as session:
        load = load_taxonomy(session, path)
    assert load.rejected == [
        f"{path}:8: missing 'conceptUri'",
        f"{path}:9: missing 'preferredLabel' for {URI}no-label",
        f"{path}:10: duplicate conceptUri '{URI}sql' (first at line 4, kept)",
    ]
    assert load.concepts == 4
    with session_scope(app_db_url) as session:
        assert session.get(TaxonomyConcept, URI + "sql").preferred_label == "SQL"
        assert session.get(TaxonomyConcept, URI + "dbt") is not None


def test_extra_columns_are_ignored_and_a_row_with_too_many_fields_is_rejected(tmp_path: Path) -> None:
    header = [
        "conceptType",
        "conceptUri",
        "skillType",
        "reuseLevel",
        "preferredLabel",
        "altLabels",
        "description",
    ]
    rows = [
        [
            "KnowledgeSkillCompetence",
            URI + "git",
            "knowledge",
            "cross-sector",
            "Git",
            "GitHub",
            "Versioning.",
        ],
        [
            "KnowledgeSkillCompetence",
            URI + "go",
            "knowledge",
            "cross-sector",
            "Go",
            "",
            "A language.",
            "extra",
        ],
    ]
    concepts, rejections = read_taxonomy_csv(write_taxonomy(tmp_path / "esco-like.csv", rows, header))
    assert [(c.concept_uri, c.preferred_label, c.alt_labels) for c in concepts] == [
        (URI + "git", "Git", ("GitHub",))
    ]
    assert rejections == [f"{tmp_path / 'esco-like.csv'}:3: more fields than the header has"]


def test_a_missing_required_column_or_file_is_a_clear_error(sqlite_url: str, tmp_path: Path) -> None:
    path = write_taxonomy(tmp_path / "no-label.csv", [[URI + "x", "x"]], header=["conceptUri", "label"])
    with (
        pytest.raises(ValueError, match="the header has no column 'preferredLabel'"),
        session_scope(sqlite_url) as s,
    ):
        load_taxonomy(s, path)
    with pytest.raises(FileNotFoundError, match="skills taxonomy file not found"):
        read_taxonomy_csv(tmp_path / "nowhere.csv")


def test_a_file_without_any_usable_row_does_not_wipe_the_taxonomy(sqlite_url: str, tmp_path: Path) -> None:
    with session_scope(sqlite_url) as session:
        load_taxonomy(session, write_taxonomy(tmp_path / "good.csv", small_rows()))
    bad = write_taxonomy(tmp_path / "bad.csv", [["", "Python", "", "", ""]])
    with pytest.raises(ValueError, match="no usable concept"), session_scope(sqlite_url) as session:
        load_taxonomy(session, bad)
    with session_scope(sqlite_url) as session:
        assert session.scalar(select(func.count()).select_from(TaxonomyConcept)) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  Python ", "python"),
        ("C++", "c++"),
        ("C#.", "c#"),
        (".NET", ".net"),
        ("Node.js", "node.js"),
        ("CI / CD", "ci/cd"),
        ("\u201cTeam  player\u201d", "team player"),
        ("front\u2013end development", "front-end development"),
        ("(SQL)", "sql"),
        ("\uff33\uff31\uff2c", "sql"),  # full-width letters
        ("- Excel;", "excel"),
        ("health and safety", "health and safety"),
    ],
)
def test_normalize_label(text: str, expected: str) -> None:
    assert normalize_label(text) == expected


@given(st.text())
def test_normalize_label_is_idempotent(text: str) -> None:
    once = normalize_label(text)
    assert normalize_label(once) == once


def test_the_asset_materializes_with_metadata(sqlite_url: str, tmp_path: Path, dagster_instance) -> None:
    rows = [*small_rows(), ["", "No URI", "", "", ""]]
    path = write_taxonomy(tmp_path / "skills.csv", rows)
    resources = {"taxonomy": TaxonomyResource(path=str(path)), "app_db": AppDatabase(url=sqlite_url)}
    result = materialize([skills_taxonomy], resources=resources, instance=dagster_instance)
    assert result.success
    [event] = result.get_asset_materialization_events()
    metadata = {key: value.value for key, value in event.materialization.metadata.items()}
    assert metadata["concepts"] == 3 and metadata["changed"] is True
    assert metadata["path"] == str(path) and metadata["rejected"] == 1
    assert f"{path}:8: missing 'conceptUri'" in metadata["rejections"]
    assert len(metadata["content_hash"]) == 64

    again = materialize([skills_taxonomy], resources=resources, instance=dagster_instance)
    [event] = again.get_asset_materialization_events()
    assert event.materialization.metadata["changed"].value is False
    assert event.materialization.tags["dagster/data_version"] == metadata["content_hash"]


def test_the_resource_defaults_to_the_demo_taxonomy_and_rejects_unknown_backends() -> None:
    assert TaxonomyResource().taxonomy_path() == DEMO_TAXONOMY_PATH
    assert TaxonomyResource().embeddings() is None
    with pytest.raises(ValueError, match="must be one of none, ollama, minilm, not 'openai'"):
        TaxonomyResource(embedding_backend="openai").embeddings()
