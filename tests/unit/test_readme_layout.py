"""README's layout table names every top-level folder of the tree, and nothing that is gone."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tracked_top_level_folders() -> set[str]:
    """Folders holding tracked files (git's view, so .venv, data/ and caches never count)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return {path.split("/", 1)[0] for path in listed if "/" in path and not path.startswith(".")}


def _layout_rows() -> set[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`/]+)/` \|", section, flags=re.MULTILINE))


def test_the_readme_layout_names_every_top_level_folder_and_only_those() -> None:
    folders = _tracked_top_level_folders()
    rows = _layout_rows()
    assert folders - rows == set(), f"folders missing from README's layout: {sorted(folders - rows)}"
    assert rows - folders == set(), f"README's layout names folders that are gone: {sorted(rows - folders)}"
