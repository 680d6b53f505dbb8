"""Redaction: a password is masked wherever it is written; a user name, and a word that only contains
a secret, are not."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from appdb.redaction import redact
from pipeline_defs.dagster_home import STORAGE_READY, ensure_dagster_home
from pipeline_defs.settings import Settings

# trust authentication, and a PGPASSWORD left over from a Docker set-up that names the user's word
ENVIRONMENT = {
    "PIPELINE_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/postings",
    "PIPELINE_DAGSTER_POSTGRES_URL": "postgresql://postgres@127.0.0.1:5432/dagster",
    "PGPASSWORD": "postgres",
    "OPENAI_API_KEY": "sk-live-abc123",
}


def test_the_user_name_postgres_is_not_masked_as_a_secret() -> None:
    line = "storage postgresql://postgres@127.0.0.1:5432/dagster (postgres, dagster-postgres)"
    assert redact(line, ENVIRONMENT) == line


def test_passwords_are_still_masked_in_urls_pairs_and_where_a_secret_is_written() -> None:
    assert redact("postgresql://postgres:postgres@db/x", ENVIRONMENT) == "postgresql://postgres:***@db/x"
    assert redact("password=postgres", ENVIRONMENT) == "password=***"
    assert redact("key sk-live-abc123 sent", ENVIRONMENT) == "key *** sent"
    environ = {"PIPELINE_DATABASE_URL": "postgresql://app:hunter@db/x", "DB_PASSWORD": "swordfish"}
    assert redact("connecting with swordfish to postgresql://app:hunter@db/x", environ) == (
        "connecting with *** to postgresql://app:***@db/x"
    )


@pytest.mark.parametrize("storage", ["stock", "pooled"])
def test_no_false_warning_that_dagster_yaml_holds_a_password(
    storage: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / storage
    monkeypatch.setenv("DAGSTER_HOME", str(home))  # restored after the test (the home exports it)
    settings = Settings.from_env().changed(dagster_home=home, dagster_storage=storage)
    home.mkdir()
    for url, warned in (
        ("{env: PIPELINE_DAGSTER_POSTGRES_URL}", False),  # what the pipeline writes
        ("postgresql://postgres:pw@127.0.0.1/dagster", True),  # an old file with the URL inline
    ):
        config = home / "dagster.yaml"
        config.write_text(f"storage:\n  postgres:\n    postgres_url: {url}\n")
        # the storage was set up for this file before: ensure_dagster_home only looks at it
        (home / STORAGE_READY).write_text(hashlib.sha256(config.read_bytes()).hexdigest())
        ensure_dagster_home(settings)
        assert ("holds a password in clear text" in capsys.readouterr().err) is warned, url
