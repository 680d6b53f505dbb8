"""Find the code an item talks about: symbols in its text, searched in the repository, with the
lines around each hit. ripgrep when it is installed, else the same search in Python."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from plugins.autodo.scanner import CODE_SUFFIXES, MARKDOWN_SUFFIXES, SKIPPED_DIRS

MAX_SYMBOLS = 6
MAX_HITS = 8
CONTEXT_LINES = 3
MAX_FILE_BYTES = 1_000_000
STOPWORDS = frozenset({"TODO", "FIXME", "HACK", "JSON", "JSONL", "CSV", "HTTP", "URL", "API", "CLI", "UI"})

_BACKTICKS = re.compile(r"`([^`]{2,80})`")
_IDENTIFIER = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\b")


@dataclass(frozen=True)
class Hit:
    file: str
    line: int
    snippet: str


def symbols_in(text: str) -> list[str]:
    """Code-looking words: `backticked`, snake_case, CamelCase, dotted.paths, file names; in order."""
    found: list[str] = [m.strip("()") for m in _BACKTICKS.findall(text)]
    for word in _IDENTIFIER.findall(text):
        looks_like_code = (
            "_" in word.strip("_")
            or "." in word
            or (re.search(r"[a-z][A-Z]", word) is not None)
            or (word[:1].isupper() and any(c.isupper() for c in word[1:]) and not word.isupper())
        )
        if looks_like_code and word not in STOPWORDS:
            found.append(word)
    unique = []
    for symbol in found:
        if symbol not in unique and len(symbol) >= 3:
            unique.append(symbol)
    return unique[:MAX_SYMBOLS]


def search(root: Path, symbols: list[str], *, skip_file: str | None = None) -> tuple[list[Hit], str]:
    """Up to MAX_HITS places where the symbols occur (each with its nearby lines), and the tool used."""
    if not symbols or not root.is_dir():
        return [], "none"
    places = _ripgrep(root, symbols) if shutil.which("rg") else None
    tool = "ripgrep"
    if places is None:
        places, tool = _python_search(root, symbols), "python"
    hits: list[Hit] = []
    for file, line in places:
        if file == skip_file:
            continue
        if any(hit.file == file and abs(hit.line - line) <= CONTEXT_LINES for hit in hits):
            continue  # already shown with the lines around the previous hit
        hits.append(Hit(file, line, _nearby(root / file, line)))
        if len(hits) >= MAX_HITS:
            break
    return hits, tool


def _ripgrep(root: Path, symbols: list[str]) -> list[tuple[str, int]] | None:
    command = ["rg", "--line-number", "--no-heading", "--fixed-strings", "--max-count", "3"]
    for symbol in symbols:
        command += ["-e", symbol]
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    places = []
    for line in done.stdout.splitlines():
        file, _, rest = line.partition(":")
        number, _, _ = rest.partition(":")
        if number.isdigit():
            places.append((file, int(number)))
    return places


def _python_search(root: Path, symbols: list[str]) -> list[tuple[str, int]]:
    places: list[tuple[str, int]] = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            path = Path(directory) / name
            if path.suffix.lower() not in CODE_SUFFIXES | MARKDOWN_SUFFIXES:
                continue
            try:
                if path.stat().st_size > MAX_FILE_BYTES:
                    continue
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            found = 0
            for number, line in enumerate(lines, start=1):
                if any(symbol in line for symbol in symbols):
                    places.append((path.relative_to(root).as_posix(), number))
                    found += 1
                    if found >= 3:
                        break
            if len(places) >= MAX_HITS * 4:
                return places
    return places


def _nearby(path: Path, line: int) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    start, end = max(0, line - 1 - CONTEXT_LINES), min(len(lines), line + CONTEXT_LINES)
    return "\n".join(lines[start:end])
