"""A password with any character stays secret: `/ # ? ' " < >` in the database URL's password were
printed in clear by status, migrate, run, config and discover (issue 66, item 5).

The application database's URL holds the password as a user pastes it, not percent-encoded, as each
command in its own process sees it (Dagster's storage URL is left out: a command that sets up the
Dagster home writes it back to this process's environment percent-encoded). PostgreSQL here trusts
local connections, so any password works and is there only to leak. OLLAMA_HOST holds another one,
percent-encoded (an HTTP URL must: the ollama library refuses a raw "/" in it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import pytest
from sqlalchemy.engine import make_url

from appdb.database import dispose
from pipeline_defs.cli.main import main
from tests.support.live_pipeline import free_port
from tests.support.postings import POSTINGS, write_jsonl

pytestmark = pytest.mark.postgres

COMMANDS = [
    ["migrate"],
    ["status"],
    ["status", "--json"],
    ["config"],
    ["config", "--json"],
    ["discover", "--shadow"],
    ["discover", "--shadow", "--json"],
    ["run", "--use-case", "posting_summary"],  # Ollama is down: an error naming the host
]


def with_raw_password(url: str, password: str) -> str:
    """The URL with the password written as a user would paste it: not percent-encoded."""
    parsed = make_url(url)
    return f"{parsed.drivername}://{parsed.username}:{password}@{parsed.host}:{parsed.port}/{parsed.database}"


@pytest.mark.parametrize("password", ["Pw/slash123", "a/#?'\"<>z9"])
def test_no_command_prints_a_password_with_url_characters_in_it(
    password: str,
    postgres_database: Callable[[], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app_url = with_raw_password(postgres_database(), password)
    ollama_password = quote(f"ollama-{password}", safe="")
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_url)
    monkeypatch.setenv("OLLAMA_HOST", f"http://operator:{ollama_password}@127.0.0.1:{free_port()}")
    monkeypatch.setenv("PIPELINE_BATCH_SIZE", "5")
    shown = []
    try:
        assert main(["ingest", str(write_jsonl(tmp_path / "postings.jsonl", POSTINGS[:2]))]) == 0
        capfd.readouterr()
        for command in COMMANDS:
            code = main(command)
            captured = capfd.readouterr()
            text = captured.out + captured.err
            shown_as = f"`pipeline {' '.join(command)}` (exit {code})"
            assert password not in text, f"{shown_as} printed the database password:\n{text}"
            assert ollama_password not in text, f"{shown_as} printed OLLAMA_HOST's password:\n{text}"
            shown.append(text)
    finally:
        dispose(app_url)
    everything = "\n".join(shown)
    assert "postgresql+psycopg2://postgres:***@127.0.0.1" in everything  # the URL is named, masked
    assert "operator:***@127.0.0.1" in everything
