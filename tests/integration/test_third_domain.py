"""A third domain touches only its folder: the toy plugin (`tests/support/toy_domain/`), added to the
registry by one line, brings a kind, a use case, a setting, a command and a table with its own migration,
and the generic CLI runs it alone (PIPELINE_DOMAINS=toy), on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from appdb.database import dispose, get_engine, head_revision, migrate, remove_migrations
from pipeline_defs import registry
from pipeline_defs.cli.main import main
from pipeline_defs.settings import Settings, settings_markdown

TOY_MIGRATIONS = Path(__file__).resolve().parents[1] / "support" / "toy_domain" / "migrations"


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The one line a third domain adds to the registry, for this test only."""
    monkeypatch.setitem(registry.REGISTRY, "toy", "tests.support.toy_domain")
    yield
    remove_migrations(TOY_MIGRATIONS)


@pytest.fixture
def toy_alone(toy_registered: None, app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.setenv("PIPELINE_DOMAINS", "toy")
    monkeypatch.setenv("PIPELINE_TOY_GREETING", "hej")
    return app_db_url


def test_the_toy_domain_is_stored_run_and_shown_by_the_generic_cli_alone(
    toy_alone: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["toy", "add", "Still waters run deep", "Haste makes waste", "--tag", "old"]) == 0
    assert main(["run"]) == 0  # its reference data: none; no postings, no taxonomy
    capsys.readouterr()
    assert main(["toy", "show"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) == 2 and all("[old] hej: " in line for line in shown)  # its setting, read
    assert any(line.endswith("hej: Haste makes waste") for line in shown)
    assert main(["status", "--json"]) == 0
    assert '"proverb_echo"' in capsys.readouterr().out


def test_its_setting_is_read_validated_and_documented_from_its_declaration(
    toy_alone: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = Settings.from_env()
    assert settings.section("toy").greeting == "hej" and settings.toy.greeting == "hej"
    assert settings.origin("toy.greeting") == "environment PIPELINE_TOY_GREETING"
    assert "| `PIPELINE_TOY_GREETING` | `toy.greeting` | hello |" in settings_markdown()
    assert main(["config", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {"setting": "toy.greeting", "variable": "PIPELINE_TOY_GREETING", "value": "hej"}.items() <= next(
        row for row in shown["settings"] if row["setting"] == "toy.greeting"
    ).items()
    assert {"plugin": "toy", "declared": "yes", "commands": "toy"}.items() <= shown["plugins"][-1].items()
    monkeypatch.setenv("PIPELINE_TOY_GREETING", " ")
    with pytest.raises(ValueError, match="PIPELINE_TOY_GREETING.*must not be blank"):
        Settings.from_env()


def test_its_command_is_listed_by_help(toy_registered: None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "proverbs: add, show" in capsys.readouterr().out


def test_a_database_at_0012_upgrades_to_the_toy_branch_and_keeps_its_history(
    toy_registered: None, app_db_url: str
) -> None:
    """An existing database (the engine's history only, at its head) gains the toy's table on the next
    migration; alembic_version keeps one row per branch."""
    remove_migrations(TOY_MIGRATIONS)  # as before the toy was registered
    engine_head = head_revision()
    migrate(app_db_url)
    with get_engine(app_db_url).connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [
            engine_head
        ]
    registry.registered_plugins()  # registering the plugins adds their migrations
    dispose(app_db_url)
    migrate(app_db_url)
    engine = get_engine(app_db_url)
    with engine.connect() as connection:
        versions = set(connection.execute(text("SELECT version_num FROM alembic_version")).scalars())
    assert versions == {engine_head, "toy_0001"}
    assert "toy_tags" in inspect(engine).get_table_names() and "outputs" in inspect(engine).get_table_names()
    remove_migrations(TOY_MIGRATIONS)  # a process that does not know the toy leaves its branch alone
    dispose(app_db_url)
    migrate(app_db_url)
