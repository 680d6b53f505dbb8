"""Read Markdown TODO files and code comments into scanned items, with a clear message for bad input.

Markdown (`.md`, `.markdown`, `.txt`): open checkboxes ``- [ ] text``, bold list items ``- **text**``,
and ``TODO:``/``FIXME:``/``HACK:`` lines, each with the heading path above it (H1 > H2 > H3 ...).
Code: ``TODO:``/``FIXME:``/``HACK:`` inside a comment (``#``, ``//``, ``/*``, ``*``, ``--``, ``<!--``).
An inline anchor ``<!-- TODO:WI-042 -->`` names the item. A file that cannot be read, is binary or is
too large is reported and skipped; the items of every other file are kept.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

MAX_FILE_BYTES = 1_000_000
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
CODE_SUFFIXES = frozenset(
    {
        ".py",
        ".js",
        ".ts",
        ".tsx",
        ".jsx",
        ".go",
        ".rs",
        ".java",
        ".kt",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".rb",
        ".php",
        ".sh",
        ".bash",
        ".sql",
        ".yaml",
        ".yml",
        ".toml",
        ".cfg",
        ".ini",
        ".lua",
        ".swift",
        ".scala",
        ".html",
        ".css",
        ".mako",
    }
)
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        "build",
        "dist",
        "data",
        "results",
    }
)

ANCHOR = re.compile(r"<!--\s*TODO:(?P<id>[A-Za-z][A-Za-z0-9_-]*)\s*-->")
HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<title>.+?)\s*#*\s*$")
CHECKBOX = re.compile(r"^\s*[-*+]\s+\[(?P<mark>[ xX])\]\s+(?P<text>.+)$")
BOLD_ITEM = re.compile(r"^\s*[-*+]\s+\*\*(?P<text>[^*]+?)\*\*(?P<rest>.*)$")
MARKER = re.compile(r"^\s*(?:[-*+]\s+|>\s*)?(?P<marker>TODO|FIXME|HACK):\s*(?P<text>.+)$")
TODO_FILE_NAME = re.compile(r"(todo|roadmap|backlog|tasks|plan)", re.IGNORECASE)
COMMENT_MARKER = re.compile(r"(?:#|//|/\*|^\s*\*|--|<!--)\s*(?P<marker>TODO|FIXME|HACK):\s*(?P<text>.+)$")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class ScannedItem:
    """One work item as a file states it."""

    text: str
    marker: str  # checkbox | bold | TODO | FIXME | HACK
    file: str
    line: int
    heading_path: tuple[str, ...] = ()
    anchor: str | None = None
    checked: bool = False  # a ticked checkbox: the item is done

    @property
    def fingerprint(self) -> str:
        """file + heading path + text: the identity of an item without an anchor."""
        return fingerprint(self.file, self.heading_path, self.text)

    @property
    def heading(self) -> str:
        return " > ".join(self.heading_path)


def fingerprint(file: str, heading_path: Iterable[str], text: str) -> str:
    normalized = " ".join(text.lower().split())
    return hashlib.sha256("\x1f".join([file, " > ".join(heading_path), normalized]).encode()).hexdigest()


@dataclass(frozen=True)
class Problem:
    """Input the scan could not use (or used with a caveat), as file:line: message."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class ScanResult:
    items: list[ScannedItem] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    files: list[str] = field(default_factory=list)  # every file read (its items may be none)


def scan_paths(paths: Iterable[Path], root: Path, *, max_bytes: int = MAX_FILE_BYTES) -> ScanResult:
    """Scan files and directories (recursively); file names are kept relative to `root`."""
    result = ScanResult()
    for path in paths:
        explicit = Path(path).is_file()
        for file in _files(Path(path), result):
            _scan_file(
                file, root, result, max_bytes, todo_file=explicit or bool(TODO_FILE_NAME.search(file.name))
            )
    _drop_duplicate_anchors(result)
    return result


def _files(path: Path, result: ScanResult) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    if not path.is_dir():
        result.problems.append(Problem(str(path), 0, "no such file or directory"))
        return
    for directory, subdirs, names in os.walk(path):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            file = Path(directory) / name
            if file.suffix.lower() in MARKDOWN_SUFFIXES | CODE_SUFFIXES:
                yield file


def _relative(file: Path, root: Path) -> str:
    try:
        return file.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file.resolve().as_posix()


def _scan_file(file: Path, root: Path, result: ScanResult, max_bytes: int, *, todo_file: bool) -> None:
    """Read one file. Bold list items count only in a TODO file (named like TODO.md, ROADMAP.md,
    backlog.md, or named on the command line): elsewhere they are prose, such as a doc's key points."""
    name = _relative(file, root)
    try:
        size = file.stat().st_size
        if size > max_bytes:
            result.problems.append(
                Problem(name, 0, f"{size:,} bytes, over the {max_bytes:,}-byte limit: skipped")
            )
            return
        data = file.read_bytes()
    except OSError as exc:
        result.problems.append(Problem(name, 0, f"cannot read: {exc.strerror or exc}"))
        return
    if b"\x00" in data[:8192]:
        result.problems.append(Problem(name, 0, "binary file: skipped"))
        return
    text = data.decode("utf-8", errors="replace")
    if "\ufffd" in text and "\ufffd".encode() not in data:
        line = text[: text.index("\ufffd")].count("\n") + 1
        result.problems.append(Problem(name, line, "invalid UTF-8 (shown as \ufffd); the items are kept"))
    result.files.append(name)
    lines = text.splitlines()
    if file.suffix.lower() in MARKDOWN_SUFFIXES:
        _scan_markdown(name, lines, result, todo_file)
    else:
        _scan_code(name, lines, result, python=file.suffix.lower() == ".py")


def _anchor_and_text(text: str) -> tuple[str | None, str]:
    match = ANCHOR.search(text)
    if match is None:
        return None, text.strip()
    return match.group("id"), (text[: match.start()] + text[match.end() :]).strip()


def _scan_markdown(name: str, lines: list[str], result: ScanResult, todo_file: bool = True) -> None:
    path: list[tuple[int, str]] = []
    in_fence = False
    found = 0
    saw_heading = False
    for number, line in enumerate(lines, start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        heading = HEADING.match(line)
        if heading:
            level = len(heading.group("hashes"))
            path = [(lvl, title) for lvl, title in path if lvl < level]
            path.append((level, _anchor_and_text(heading.group("title"))[1]))
            saw_heading = True
            continue
        item = _markdown_item(line, todo_file)
        if item is None:
            continue
        marker, raw, checked = item
        anchor, text = _anchor_and_text(raw)
        if not text:
            result.problems.append(Problem(name, number, "an item with no text: skipped"))
            continue
        headings = tuple(title for _, title in path)
        result.items.append(ScannedItem(text, marker, name, number, headings, anchor, checked))
        found += 1
    if found and not saw_heading:
        result.problems.append(
            Problem(name, 1, f"no headings: its {found} items are kept without a heading path")
        )


def _markdown_item(line: str, todo_file: bool) -> tuple[str, str, bool] | None:
    checkbox = CHECKBOX.match(line)
    if checkbox:
        return "checkbox", checkbox.group("text"), checkbox.group("mark") != " "
    bold = BOLD_ITEM.match(line) if todo_file else None
    if bold:
        rest = bold.group("rest").strip().lstrip(":-–— ").strip()
        return "bold", bold.group("text") + (f": {rest}" if rest else ""), False
    marker = MARKER.match(ANCHOR.sub("", line))
    if marker:
        return marker.group("marker"), marker.group("text") + _anchors_of(line), False
    return None


def _anchors_of(line: str) -> str:
    """The line's anchor, to put back after the marker's text (the marker is matched without it)."""
    found = ANCHOR.search(line)
    return f" {found.group(0)}" if found else ""


def _scan_code(name: str, lines: list[str], result: ScanResult, *, python: bool = False) -> None:
    """Markers in comments. Python's comments are found by its tokenizer (a marker inside a string is
    not a comment); other languages by the comment signs before the marker."""
    comments = _python_comments(lines) if python else None
    for number, line in enumerate(lines, start=1):
        if comments is not None:
            if number not in comments:
                continue
            line = comments[number]
        anchor = ANCHOR.search(line)
        match = COMMENT_MARKER.search(ANCHOR.sub("", line))
        if not match:
            continue
        text = re.sub(r"\s*(\*/|-->)\s*$", "", match.group("text")).strip()
        if text:
            result.items.append(
                ScannedItem(
                    text, match.group("marker"), name, number, (), anchor.group("id") if anchor else None
                )
            )


def _python_comments(lines: list[str]) -> dict[int, str] | None:
    """Line number -> the comment on it, or None when the file does not tokenize (then: by signs)."""
    source = "\n".join(lines) + "\n"
    comments: dict[int, str] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return comments


def _drop_duplicate_anchors(result: ScanResult) -> None:
    """An anchor names one item: a second use is reported, and that item is matched as if it had none."""
    first: dict[str, ScannedItem] = {}
    kept = []
    for item in result.items:
        if item.anchor is None:
            kept.append(item)
            continue
        if item.anchor in first:
            other = first[item.anchor]
            result.problems.append(
                Problem(
                    item.file,
                    item.line,
                    f"duplicate anchor {item.anchor} (first at {other.file}:{other.line}): "
                    "this item is matched by its text instead",
                )
            )
            kept.append(
                ScannedItem(
                    item.text, item.marker, item.file, item.line, item.heading_path, None, item.checked
                )
            )
            continue
        first[item.anchor] = item
        kept.append(item)
    result.items = kept
