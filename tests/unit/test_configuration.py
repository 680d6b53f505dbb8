"""Configuration has one owner: every setting is read by `pipeline_defs/settings.py` from the environment
or the config file, validated at start with an error naming the variable, and documented from the same
declarations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.code_shape import PRODUCT, ROOT, python_files
from pipeline_defs.settings import Settings, settings_markdown

DOC = ROOT / "docs" / "configuration.md"
START = "<!-- generated from pipeline_defs/settings.py: do not edit by hand -->\n"
GENERATED = re.compile(re.escape(START) + r"(.*)<!-- end of the generated tables -->", re.DOTALL)


def test_the_configuration_doc_is_the_one_generated_from_the_declarations() -> None:
    found = GENERATED.search(DOC.read_text())
    assert found, "docs/configuration.md lost its generated tables"
    assert found.group(1) == settings_markdown(), (
        "docs/configuration.md differs from the settings' declarations: run "
        "`python -m pipeline_defs.settings --markdown` and put its output between the markers"
    )


def test_no_module_but_the_settings_reads_the_environment() -> None:
    reads = re.compile(r"os\.environ|os\.getenv|getenv\(")
    readers = [
        str(path.relative_to(ROOT))
        for folder in PRODUCT
        for path in python_files(folder)
        if reads.search(path.read_text()) and path != ROOT / "pipeline_defs" / "settings.py"
    ]
    assert readers == []


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        (
            "PIPELINE_BATCH_SIZE",
            "many",
            "environment PIPELINE_BATCH_SIZE must be a positive integer, not 'many'",
        ),
        (
            "PIPELINE_HEARTBEAT_SECONDS",
            "nan",
            "environment PIPELINE_HEARTBEAT_SECONDS must be a number of seconds",
        ),
        (
            "PIPELINE_SKILLS_STYLE",
            "crf",
            "environment PIPELINE_SKILLS_STYLE must be one of tagger, tagger+llm, llm",
        ),
        (
            "PIPELINE_LLM_HOSTS",
            "gpu-a:11434",
            "environment PIPELINE_LLM_HOSTS an LLM host must start with its URL",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    variable: str, value: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError) as error:
        Settings.from_env()
    assert said in str(error.value) and "\n" not in str(error.value)


def test_a_config_file_sets_core_and_plugin_settings_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text(
        'database_url = "sqlite:///from-file.db"\nbatch_size_override = 40\n\n'
        '[postings]\nsummary_style = "refined"\nextra_use_cases = ["posting_assessment"]\n'
    )
    monkeypatch.setenv("PIPELINE_CONFIG", str(config))
    monkeypatch.setenv("PIPELINE_BATCH_SIZE", "7")
    settings = Settings.from_env()
    assert settings.database_url == "sqlite:///from-file.db"
    assert settings.batch_size_override == 7  # the environment wins
    assert (settings.postings.summary_style, settings.postings.extra_use_cases) == (
        "refined",
        ("posting_assessment",),
    )
    assert settings.origin("database_url") == f"{config}: database_url"
    assert settings.origin("batch_size_override") == "environment PIPELINE_BATCH_SIZE"
    assert settings.origin("postings.summary_style") == f"{config}: summary_style"
    assert settings.origin("judge_model") == "default"


def test_an_unknown_key_in_the_config_file_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "pipeline.toml"
    config.write_text('[postings]\nsumary_style = "refined"\n')
    monkeypatch.setenv("PIPELINE_CONFIG", str(config))
    with pytest.raises(ValueError, match=r"\[postings\] has no setting 'sumary_style'"):
        Settings.from_env()
    monkeypatch.setenv("PIPELINE_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ValueError, match="PIPELINE_CONFIG: no config file at"):
        Settings.from_env()
