"""Shared helpers of the benchmarks: where the public data sets are, and how results are written."""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline_defs.settings import PROJECT_ROOT, Settings

SHARED_DATA_ENV = "PIPELINE_SHARED_DATA"
DEFAULT_RESULTS_DIR = PROJECT_ROOT / "results"


def shared_data_dir(arg: str | None = None) -> Path:
    """The public data folder: `arg` (--data-dir), else the `PIPELINE_SHARED_DATA` setting (environment,
    config file, else `../shared/data` beside the project: pipeline_defs/settings.py)."""
    if arg:
        path, origin = Path(arg), "--data-dir"
    else:
        from pipeline_defs.settings import Settings

        settings = Settings.from_env()
        path, origin = settings.shared_data, f"{SHARED_DATA_ENV} ({settings.origin('shared_data')})"
    if not path.is_dir():
        raise FileNotFoundError(
            f"the shared data folder {path} (from {origin}) does not exist: pass --data-dir DIR "
            f"or set {SHARED_DATA_ENV} to the folder that holds esco/, skillspan/, decorte_esco_linked/ ..."
        )
    return path.resolve()


def environment() -> dict[str, Any]:
    """When and where a benchmark ran, so figures from different machines are not compared blindly."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.machine(),
            "cpu_count": os.cpu_count(),
        },
        "python": sys.version.split()[0],
    }


def write_report(
    name: str, results: dict[str, Any], markdown: str, out_dir: Path | None = None
) -> tuple[Path, Path]:
    """Write `<name>.json` (results plus environment) and `<name>.md` into `out_dir` (default results/)."""
    out_dir = Path(out_dir) if out_dir is not None else DEFAULT_RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    env = environment()
    json_path = out_dir / f"{name}.json"
    markdown_path = out_dir / f"{name}.md"
    json_path.write_text(json.dumps({"benchmark": name, **env, "results": results}, indent=2) + "\n")
    machine = env["machine"]
    footer = (
        f"\n\n_Run {env['date']} on {machine['platform']} ({machine['cpu_count']} CPUs), "
        f"Python {env['python']}._\n"
    )
    markdown_path.write_text(markdown.rstrip() + footer)
    return json_path, markdown_path


def run_and_report(name: str, run: Callable[[Any], tuple[dict[str, Any], str]], args: Any) -> int:
    """A benchmark's main: run it, write and print its report; a missing file or bad value is a
    clear error (exit 2), not a traceback."""
    try:
        results, markdown = run(args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json_path, markdown_path = write_report(name, results, markdown, args.out)
    print(markdown)
    print(f"written: {json_path} and {markdown_path}")
    return 0


def configure_encoder(settings: Settings | None = None) -> str:
    """The process's shared MiniLM made as the settings say (PIPELINE_ENCODER_PROVIDER and _PRECISION),
    as the pipeline makes it; returns them, for the report."""
    from plugins.postings.skills.embeddings import configure_shared_minilm

    settings = settings or Settings.from_env()
    postings = settings.postings
    configure_shared_minilm(
        cache_dir=settings.cache_dir, provider=postings.encoder_provider, precision=postings.encoder_precision
    )
    return f"{postings.encoder_provider}, {postings.encoder_precision}"
