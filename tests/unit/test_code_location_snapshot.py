"""A snapshot of the whole code location: every asset, check, job, sensor and resource key, with its
partitions, group, dependencies and tags. A refactor that renames or drops one fails here, loudly.

After an intended change, write the new snapshot and review its diff:

    PIPELINE_UPDATE_SNAPSHOT=1 .venv/bin/pytest tests/unit/test_code_location_snapshot.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from dagster import Definitions, EnvVar

from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings

SNAPSHOT_DIR = Path(__file__).with_name("snapshots")
CONFIGURATIONS = {
    "default": {},
    "all_opt_ins": {"summary_style": "refined", "extra_use_cases": ("posting_assessment",)},
    "postings_autodo": {"domains": ("postings", "autodo")},
    "two_models": {},
}
# Configurations a user makes in the environment: the work groups, jobs and sensors follow the models.
ENVIRONMENTS = {
    "two_models": {
        "OLLAMA_HOST": "http://gpu-box:11434",
        "PIPELINE_MODEL": "qwen2.5:7b-instruct",
        "PIPELINE_MODELS": "posting_summary=llama3.1:8b",
    },
}


def describe(defs: Definitions) -> dict[str, Any]:
    """What the code location offers, in names a user sees in the UI and the CLI (no versions: a
    version bump is not a rename)."""
    graph = defs.resolve_asset_graph()
    checks_by_asset: dict[str, list[str]] = {}
    for check in graph.asset_check_keys:
        checks_by_asset.setdefault(check.asset_key.to_user_string(), []).append(check.name)
    assets = {
        spec.key.to_user_string(): {
            "group": spec.group_name,
            "partitions": getattr(spec.partitions_def, "name", None),
            "deps": sorted(dep.asset_key.to_user_string() for dep in spec.deps),
            "checks": sorted(checks_by_asset.get(spec.key.to_user_string(), [])),
            "kinds": sorted(
                tag.removeprefix("dagster/kind/") for tag in spec.tags if tag.startswith("dagster/kind/")
            ),
        }
        for spec in defs.resolve_all_asset_specs()
    }
    repository = defs.get_repository_def()
    jobs = {
        job.name: {
            "tags": {name: value for name, value in sorted(job.tags.items()) if name.startswith("pipeline/")}
        }
        for job in repository.get_all_jobs()
        if not job.name.startswith("__")
    }
    sensors = {
        sensor.name: {
            "jobs": sorted(target.job_name for target in sensor.targets),
            "default_status": sensor.default_status.value,
        }
        for sensor in repository.sensor_defs
    }
    resources = {key: type(resource).__name__ for key, resource in sorted((defs.resources or {}).items())}
    # the fields the UI shows as an environment variable's name (a URL with a password, a key)
    from_env = {
        key: {
            name: getattr(resource, name).env_var_name
            for name in type(resource).model_fields
            if isinstance(getattr(resource, name), EnvVar)
        }
        for key, resource in sorted((defs.resources or {}).items())
    }
    return {"assets": assets, "jobs": jobs, "sensors": sensors, "resources": resources, "from_env": from_env}


@pytest.mark.parametrize("configuration", CONFIGURATIONS)
def test_the_code_location_matches_its_snapshot(
    configuration: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    for name, value in ENVIRONMENTS.get(configuration, {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", f"sqlite:///{tmp_path / 'app.db'}")
    settings = Settings.from_env().changed(**CONFIGURATIONS[configuration])
    current = describe(build_definitions(settings))
    path = SNAPSHOT_DIR / f"code_location_{configuration}.json"
    if os.environ.get("PIPELINE_UPDATE_SNAPSHOT") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    assert current == expected, (
        f"the code location differs from {path.name}: a renamed or dropped asset, check, job, sensor or "
        "resource. If intended, set PIPELINE_UPDATE_SNAPSHOT=1 and review the diff."
    )


def test_the_snapshot_names_what_users_see() -> None:
    """The snapshot is not empty: it holds the assets, jobs and sensors the README's tour names."""
    default = json.loads((SNAPSHOT_DIR / "code_location_default.json").read_text())
    assert {"postings", "posting_summary", "posting_skills", "skill_entities", "skills_taxonomy"} <= set(
        default["assets"]
    )
    assert default["assets"]["posting_summary"]["partitions"] == "postings"
    assert "gemma3_270m_batch_job" in default["jobs"] and "gemma3_270m_discovery" in default["sensors"]
