"""A sample TODO tree for the autodo tests: Markdown with headings, code comments, and bad input."""

from __future__ import annotations

from pathlib import Path

ROADMAP = """# Roadmap

## Ingest

- [ ] Stream large JSONL files instead of reading them whole
- [x] Reject rows without a key
- **Merge postings from two boards**: keep the longest description

### Secrets

TODO: read the database password from a file

## Pacing

- [ ] Pace the remote Ollama hosts <!-- TODO:WI-042 -->
"""

NOTES = """Some loose notes without any heading.

- [ ] Write the plugin guide
"""

CODE = '''"""A module with TODO comments."""


def parse(text: str) -> str:
    # TODO: handle a BOM at the start of the file
    return text.strip()  # FIXME: strips meaningful whitespace too


def load() -> None:
    # HACK: retry twice because the share is flaky
    pass
'''


def write_sample_tree(root: Path) -> Path:
    """Write the sample tree under `root`; returns its directory."""
    tree = root / "project"
    (tree / "docs").mkdir(parents=True)
    (tree / "src").mkdir()
    (tree / "docs" / "ROADMAP.md").write_text(ROADMAP)
    (tree / "docs" / "notes.md").write_text(NOTES)
    (tree / "src" / "reader.py").write_text(CODE)
    (tree / "src" / "blob.py").write_bytes(b"\x00\x01# TODO: not text\x00")  # binary
    (tree / "docs" / "huge.md").write_text("- [ ] big\n" * 150_000)  # 1.5 MB: over the limit
    dup = tree / "docs" / "dup.md"
    dup.write_text("# Dup\n\n- [ ] Also claims the same anchor <!-- TODO:WI-042 -->\n")
    return tree
