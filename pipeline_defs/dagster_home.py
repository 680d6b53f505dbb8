"""Dagster's own storage: a persistent DAGSTER_HOME in the data directory.

SQLite by default; dagster-postgres when PIPELINE_DAGSTER_POSTGRES_URL is set. LLM
steps share one concurrency pool (`llm`, one step at a time by default) so concurrent
runs do not fight over one model; run monitoring frees the slots of runs that died.
"""

from __future__ import annotations

import os
from pathlib import Path

from appdb.database import normalize_url
from pipeline_defs.settings import Settings

LLM_POOL_LIMIT = 1
MAX_CONCURRENT_RUNS = 4
FREE_SLOTS_AFTER_RUN_END_SECONDS = 60


def dagster_yaml(settings: Settings) -> str:
    lines = [
        "# Written by `pipeline`; edit freely, it is not overwritten.",
        "telemetry:",
        "  enabled: false",
        "nux:",  # no sign-up pop-up over the UI
        "  enabled: false",
        "concurrency:",
        "  runs:",
        f"    max_concurrent_runs: {MAX_CONCURRENT_RUNS}",
        "  pools:",
        f"    default_limit: {LLM_POOL_LIMIT}",
        # A run whose worker died keeps its pool slot (one slot: every LLM step would wait
        # forever). The discovery sensor marks such runs failed when their claims expire;
        # monitoring then frees their slots, and fails runs that never get started.
        "run_monitoring:",
        "  enabled: true",
        f"  free_slots_after_run_end_seconds: {FREE_SLOTS_AFTER_RUN_END_SECONDS}",
    ]
    if settings.dagster_postgres_url:
        # dagster-postgres needs psycopg2: with SQLAlchemy 2.1 a bare postgresql:// picks psycopg 3.
        lines += [
            "storage:",
            "  postgres:",
            f"    postgres_url: {normalize_url(settings.dagster_postgres_url)}",
        ]
    return "\n".join(lines) + "\n"


def ensure_dagster_home(settings: Settings) -> Path:
    """Create DAGSTER_HOME with a dagster.yaml if missing, and point this process at it."""
    home = settings.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(dagster_yaml(settings))
    os.environ["DAGSTER_HOME"] = str(home)
    return home
