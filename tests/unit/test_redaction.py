"""Redaction: a password is masked wherever it is written; a user name, and a word that only contains
a secret, are not."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from appdb.redaction import redact
from pipeline_defs.runtime.dagster_home import STORAGE_READY, ensure_dagster_home
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


# Every character the passwords held that the old pattern stopped at, and more: an "@", a
# "%", a ":", whitespace, a password that looks like the rest of a URL.
HOSTILE_PASSWORDS = [
    "Pw/slash123",
    "Pw#hash1234",
    "Pw?query123",
    "Pw'quote123",
    'Pw"dquote12',
    "Pw<angle>12",
    "a/#?'\"<>z",
    "p@ss@w0rd",
    "pct%2Fenc0ded",
    "co:lon:pw",
    "x@127.0.0.1:5432/y",
    "pass word",
    "ab",
]


@pytest.mark.parametrize("password", HOSTILE_PASSWORDS)
def test_a_password_with_any_character_is_masked_in_a_database_url(password: str) -> None:
    url = f"postgresql://postgres:{password}@127.0.0.1:5432/x"
    environ = {"PIPELINE_DATABASE_URL": url}
    masked = "postgresql://postgres:***@127.0.0.1:5432/x"
    assert redact(url, environ) == masked  # as `pipeline status` prints the configured URL
    assert redact(f"connecting to {url} failed", environ) == f"connecting to {masked} failed"
    if " " not in password:  # a URL in any text, its password not configured anywhere
        assert redact(f"'{url}' (tried twice, ask admin@example.org)", {}) == (
            f"'{masked}' (tried twice, ask admin@example.org)"
        )


def test_what_a_connection_error_prints_of_a_password_with_an_at_is_masked() -> None:
    """SQLAlchemy ends the password at its first "@" and takes the rest for the host name."""
    environ = {"PIPELINE_DATABASE_URL": "postgresql://postgres:p@ss@w0rd@127.0.0.1:5432/x"}
    error = 'could not translate host name "ss@w0rd@127.0.0.1" to address'
    assert redact(error, environ) == 'could not translate host name "***@127.0.0.1" to address'


def test_a_url_no_parser_reads_is_masked_from_its_scheme_to_its_last_at() -> None:
    assert redact("postgresql://ad/min:pw@db/x", {}) == "postgresql://***@db/x"
    assert redact("postgresql://us@er@db/x", {}) == "postgresql://***@db/x"


@given(password=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30))
@settings(max_examples=300, deadline=None)
def test_any_configured_password_is_never_printed_in_its_url(password: str) -> None:
    assume(password.strip() == password and password != "***" and "\n" not in password)
    url = f"postgresql://postgres:{password}@127.0.0.1:5432/x"
    assert redact(url, {"PIPELINE_DATABASE_URL": url}) == "postgresql://postgres:***@127.0.0.1:5432/x"
