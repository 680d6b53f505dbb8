"""Secrets stay secret: no command prints a password or a credential from the database URLs, OLLAMA_HOST or
an API key; pause reasons, events and Dagster's event log store none; dagster.yaml names the variable
(mode 0600); the resources Dagster shows in the UI show the environment variable, not its value.

PostgreSQL here trusts local connections, so any password in the URL works and is there only to leak.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance
from dagster._core.remote_representation.external_data import RepositorySnap, ResourceConfigEnvVarSnap
from sqlalchemy import MetaData, create_engine, select
from sqlalchemy.engine import make_url

from appdb import pauses
from appdb.database import dispose, migrate, session_scope
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.runtime.dagster_home import ensure_dagster_home
from pipeline_defs.settings import Settings
from tests.support.live_pipeline import free_port
from tests.support.postings import POSTINGS, run_use_case, seed_postings, write_jsonl

pytestmark = pytest.mark.postgres

APP_PASSWORD = "s3cret-app-pw"
DAGSTER_PASSWORD = "s3cret-dagster-pw"
OLLAMA_PASSWORD = "hunter2-ollama-pw"
API_KEY = "sk-secret-api-key-42"
SECRETS = (APP_PASSWORD, DAGSTER_PASSWORD, OLLAMA_PASSWORD, API_KEY)
HOSTILE = "\x1b[2J"  # a posting's title that would clear the screen


def with_password(url: str, password: str) -> str:
    return make_url(url).set(password=password).render_as_string(hide_password=False)


def leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.fixture
def secret_env(
    postgres_database: Callable[[], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    """The CLI on PostgreSQL for both databases (URLs with passwords), a credentialed OLLAMA_HOST on a
    port nobody listens on, and an API key in the environment."""
    env = {
        "PIPELINE_DATA_DIR": str(tmp_path / "data"),
        "PIPELINE_DATABASE_URL": with_password(postgres_database(), APP_PASSWORD),
        "PIPELINE_DAGSTER_POSTGRES_URL": with_password(postgres_database(), DAGSTER_PASSWORD),
        "OLLAMA_HOST": f"http://operator:{OLLAMA_PASSWORD}@127.0.0.1:{free_port()}",
        "OPENAI_API_KEY": API_KEY,
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
        "PIPELINE_BATCH_SIZE": "5",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield env
    dispose(env["PIPELINE_DATABASE_URL"])


def stored_rows(url: str) -> str:
    """Every row of every table of a database, as text (the databases here hold a few hundred rows)."""
    engine = create_engine(url)
    try:
        metadata = MetaData()
        metadata.reflect(engine)
        with engine.connect() as connection:
            return "\n".join(
                str(row) for table in metadata.sorted_tables for row in connection.execute(select(table))
            )
    finally:
        engine.dispose()


def test_no_command_prints_a_password(
    secret_env: dict[str, str],
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    postings = write_jsonl(tmp_path / "postings.jsonl", [{**POSTINGS[0], "title": f"Clerk {HOSTILE}"}])
    key = POSTINGS[0]["key"]
    commands = [
        ["migrate"],
        ["ingest", str(postings)],
        ["status"],
        ["status", "--by-source"],
        ["discover", "--shadow"],
        ["discover", "--shadow", "--json"],
        ["run", "--use-case", "posting_summary"],  # Ollama is down: an error, a pause
        ["pauses"],
        ["events"],
        ["failures"],
        ["trace", key, "--markdown", str(tmp_path / "trace.md")],
        ["review"],
        ["reprocess", "--stale", "--dry-run"],
        ["retire", "--finished-before", "2000-01-01", "--dry-run"],
        ["retry", "--all"],
        ["resume"],
    ]
    outputs = []
    for command in commands:
        code = main(command)
        captured = capfd.readouterr()
        outputs.append((command, code, captured.out + captured.err))
    # `pipeline ui`: its banner, and what dagster dev's processes write to the inherited descriptors
    from dagster._cli import dev as dagster_dev

    def dagster_dev_writes_the_environment(**_: object) -> None:
        os.write(1, f"webserver: {os.environ['PIPELINE_DAGSTER_POSTGRES_URL']} {HOSTILE}\n".encode())
        os.write(2, f"daemon: cannot reach {os.environ['OLLAMA_HOST']}\n".encode())

    monkeypatch.setattr(dagster_dev, "dev_command_impl", dagster_dev_writes_the_environment)
    monkeypatch.setattr(os, "execv", lambda *_: dagster_dev_writes_the_environment())  # the old `ui`
    main(["ui", "--port", str(free_port())])
    captured = capfd.readouterr()
    outputs.append((["ui"], 0, captured.out + captured.err))

    for command, code, text in outputs:
        shown_as = f"`pipeline {' '.join(command)}` (exit {code})"
        assert not leaked(text), f"{shown_as} printed {leaked(text)}:\n{text}"
        assert "\x1b" not in text, f"`pipeline {' '.join(command)}` printed a control sequence:\n{text!r}"
    shown = "\n".join(text for _, _, text in outputs)
    assert "operator:***@127.0.0.1" in shown  # the host is still named, its password masked
    assert "webserver: postgresql+psycopg2://postgres:***@" in shown
    assert not leaked((tmp_path / "trace.md").read_text())
    # nothing stored a credential either: pause reasons, events, work items, Dagster's runs and event log
    for url in (secret_env["PIPELINE_DATABASE_URL"], secret_env["PIPELINE_DAGSTER_POSTGRES_URL"]):
        assert not leaked(stored_rows(url)), url


def test_a_pause_after_an_outage_stores_no_password(secret_env: dict[str, str], tmp_path: Path) -> None:
    url = secret_env["PIPELINE_DATABASE_URL"]
    migrate(url)
    seed_postings(url, tmp_path)
    defs = build_definitions(Settings.from_env())  # the real Ollama backend, at the dead host
    with DagsterInstance.ephemeral() as instance:
        result = run_use_case(defs, instance, [posting["key"] for posting in POSTINGS[:3]])
        logged = "\n".join(
            str(entry.user_message) + str(entry.dagster_event and entry.dagster_event.event_specific_data)
            for entry in instance.all_logs(result.run_id)
        )
    with session_scope(url) as session:
        reasons = [pause.reason for pause in pauses.active_pauses(session).values()]
    assert reasons, "the outage paused the use case"
    assert all("operator:***@127.0.0.1" in reason for reason in reasons), reasons
    assert not any(leaked(reason) for reason in reasons), reasons
    assert "operator:***@127.0.0.1" in logged
    assert not leaked(logged), leaked(logged)
    assert not leaked(stored_rows(url))


def test_dagster_yaml_names_the_variable_and_only_its_owner_reads_it(
    secret_env: dict[str, str], tmp_path: Path
) -> None:
    for storage in ("stock", "pooled"):
        settings = Settings.from_env().changed(dagster_home=tmp_path / storage, dagster_storage=storage)
        home = ensure_dagster_home(settings)
        config_file = home / "dagster.yaml"
        text = config_file.read_text()
        assert not leaked(text), text
        assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
        assert "postgres_url: {env: PIPELINE_DAGSTER_POSTGRES_URL}" in text
        yaml.safe_load(text)
        with DagsterInstance.from_config(str(home)) as instance:  # Dagster reads the URL from the variable
            assert instance.get_runs() == []


def test_the_ui_shows_the_environment_variables_not_their_values(secret_env: dict[str, str]) -> None:
    """What the UI's resource pages show (the code location's snapshot of each resource's config)."""
    snapshot = RepositorySnap.from_def(build_definitions(Settings.from_env()).get_repository_def())
    configured = {resource.name: resource.configured_values for resource in snapshot.resources}
    assert configured["app_db"]["url"] == ResourceConfigEnvVarSnap(name="PIPELINE_DATABASE_URL")
    assert configured["llm"]["host"] == ResourceConfigEnvVarSnap(name="OLLAMA_HOST")
    assert configured["llm"]["pace_database_url"] == ResourceConfigEnvVarSnap(name="PIPELINE_DATABASE_URL")
    assert configured["taxonomy"]["ollama_host"] == ResourceConfigEnvVarSnap(name="OLLAMA_HOST")
    shown = json.dumps({name: {k: str(v) for k, v in values.items()} for name, values in configured.items()})
    assert not leaked(shown), shown
