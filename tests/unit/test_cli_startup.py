"""The command line answers at once: `--help`, `--version` and the light commands (`status`, `pauses`,
`failures`, `events`) import no Dagster (2+ s of CPU before the change, all of them paid for `--help`);
usage errors exit 2; `--json` on the listing commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from appdb.database import migrate

PROBE = """
import json, sys
from pipeline_defs.cli.main import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
tops = {name.split(".")[0] for name in sys.modules}
heavy = sorted(tops & {"dagster", "assets", "sensors"})
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "heavy": heavy}, out)
"""


def run_probe(tmp_path: Path, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    """`pipeline ARGS` in a fresh interpreter; its exit code and the heavy packages it imported."""
    facts = tmp_path / "facts.json"
    env = {
        **os.environ,
        "PIPELINE_DATA_DIR": str(tmp_path / "data"),
        "PIPELINE_DATABASE_URL": f"sqlite:///{tmp_path / 'app.db'}",
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(facts), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert facts.is_file(), done.stderr
    return json.loads(facts.read_text()), done


@pytest.fixture
def migrated(tmp_path: Path) -> Path:
    migrate(f"sqlite:///{tmp_path / 'app.db'}")
    return tmp_path


def test_help_imports_no_dagster(tmp_path: Path) -> None:
    facts, done = run_probe(tmp_path, "--help")
    assert facts == {"code": 0, "heavy": []}
    assert "trace" in done.stdout and "exit codes: 0 done; 1" in done.stdout


@pytest.mark.parametrize("command", [["status"], ["pauses"], ["failures"], ["events"], ["status", "--json"]])
def test_light_commands_import_no_dagster(migrated: Path, command: list[str]) -> None:
    facts, done = run_probe(migrated, *command)
    assert facts == {"code": 0, "heavy": []}, done.stderr


def test_version_and_usage_errors(tmp_path: Path) -> None:
    facts, done = run_probe(tmp_path, "--version")
    assert facts["code"] == 0 and done.stdout.startswith("pipeline ") and done.stdout.strip() != "pipeline"
    facts, done = run_probe(tmp_path, "status", "--no-such-flag")
    assert facts["code"] == 2 and "unrecognized arguments: --no-such-flag" in done.stderr


def test_listing_commands_print_json_for_scripts(migrated: Path) -> None:
    _, done = run_probe(migrated, "status", "--json")
    status = json.loads(done.stdout)
    assert status["subjects"] == {"postings": 0} and "posting_summary" in [
        row["use_case"] for row in status["use_cases"]
    ]
    assert {"pending", "claimed", "failed", "version", "model"} <= set(status["use_cases"][0])
    for command, empty in (("pauses", []), ("failures", [])):
        _, done = run_probe(migrated, command, "--json")
        assert json.loads(done.stdout) == empty
    _, done = run_probe(migrated, "events", "--json")
    assert json.loads(done.stdout) == {"hours": 24.0, "events": [], "errors_by_class": []}


def test_autodo_listings_print_json(migrated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """autodo's listings answer `--json` too (empty here, but JSON)."""
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings,autodo")
    for command in (("autodo", "list", "--json"), ("autodo", "pick", "--json")):
        facts, done = run_probe(migrated, *command)
        assert facts["code"] == 0 and json.loads(done.stdout) == [], done.stderr


def test_the_fast_migration_check_knows_alembics_head() -> None:
    """`migrate` skips Alembic when the database is at the head it reads from the migration files."""
    from alembic.script import ScriptDirectory

    from appdb.database import alembic_config, head_revision

    assert head_revision() == ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def test_the_command_table_lists_what_each_module_registers() -> None:
    """`pipeline --help` lists the commands from main.all_commands() without importing their modules: the same
    names and help texts as the modules register."""
    from pipeline_defs.cli.main import all_commands, build_parser

    parser = build_parser()  # every module imported
    [subcommands] = [action for action in parser._actions if action.dest == "command"]
    registered = {choice.dest: (choice.help or "") for choice in subcommands._choices_actions}
    assert registered == {name: command.help for name, command in all_commands().items()}
