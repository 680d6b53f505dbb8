"""Postings and autodo in one deployment (PIPELINE_DOMAINS=postings,autodo): each kind's work stays its
own. `pipeline reprocess --stale` registers an autodo item as an autodo partition (it used to add it to
the postings' partitions), and a posting whose every postings use case is done retires although autodo's
use cases never ran on it (retirement used to ask for an output of every use case of every domain)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from dagster import DagsterInstance
from sqlalchemy import update

from appdb.database import session_scope
from appdb.models import UseCaseOutput, utcnow
from assets.retention import retirable
from domain.language.declaration import model_label
from pipeline_defs.cli.main import main
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from tests.support.autodo_tree import write_sample_tree
from tests.support.postings import seed_postings


@pytest.fixture
def both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_db_url: str) -> Settings:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings,autodo")
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    return Settings.from_env()


def store_current_outputs(url: str, settings: Settings, kind: str, keys: list[str]) -> None:
    """A current output of every use case of `kind` for each key, as a finished run leaves them (upstream
    outputs written first)."""
    with session_scope(url) as session:
        hashes = POSTINGS_TABLE.content_hashes(session, keys)
        written = utcnow() - timedelta(hours=1)
        for step, item in enumerate(
            item for item in build_use_cases(settings) if item.use_case.subject_kind == kind
        ):
            for key in keys:
                session.add(
                    UseCaseOutput(
                        use_case=item.use_case.name,
                        subject_key=key,
                        value={},
                        model=model_label(item.use_case),
                        backend="test",
                        use_case_version=item.use_case.version,
                        input_hash="i",
                        subject_hash=hashes[key],
                        created_at=written + timedelta(seconds=step),
                        updated_at=written + timedelta(seconds=step),
                    )
                )


def test_a_finished_posting_retires_though_autodo_is_declared_too(
    both: Settings, app_db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_postings(app_db_url, tmp_path)
    store_current_outputs(app_db_url, both, "postings", ["p-1", "p-2"])
    postings_specs = [item.spec for item in build_use_cases(both) if item.use_case.subject_kind == "postings"]
    with session_scope(app_db_url) as session:
        assert retirable(session, postings_specs, utcnow()) == ["p-1", "p-2"]
    capsys.readouterr()
    assert main(["retire", "--finished-before", (utcnow() + timedelta(days=1)).isoformat(), "--dry-run"]) == 0
    assert "2 postings finished before" in capsys.readouterr().out


def test_reprocess_registers_autodo_items_as_autodo_partitions(
    both: Settings, app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # noqa: ANN001
    tree = write_sample_tree(tmp_path)
    monkeypatch.chdir(tree)
    main(["autodo", "scan", "docs"])
    assert main(["run", "--use-case", "autodo_context"]) == 0
    with session_scope(app_db_url) as session:  # an older version made them: stale
        session.execute(
            update(UseCaseOutput)
            .where(UseCaseOutput.use_case == "autodo_context")
            .values(use_case_version="2000-01-01.1")
        )
    capsys.readouterr()
    assert main(["reprocess", "--stale", "--use-case", "autodo_context"]) == 0
    out = capsys.readouterr().out
    assert "autodo_context: " in out and "stale before, 0 after" in out
    with DagsterInstance.get() as instance:
        autodo = instance.get_dynamic_partitions("autodo")
        postings = instance.get_dynamic_partitions("postings")
    assert autodo and not any(key.startswith("WI-") for key in postings)
