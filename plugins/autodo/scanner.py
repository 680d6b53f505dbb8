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
import stat
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from domain.core.progress import progress_task

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
    unread: list[str] = field(default_factory=list)
    """Directories that could not be listed and files that could not be read (relative to the root):
    their items were not looked for, so they are not missing."""


def scan_paths(
    paths: Iterable[Path], root: Path, *, max_bytes: int = MAX_FILE_BYTES, follow_symlinks: bool = False
) -> ScanResult:
    """Scan files and directories (recursively); file names are kept relative to `root`.

    Only regular files are read, at most `max_bytes` of each: a FIFO would block the scan for ever and
    a link to /dev/zero would fill the memory. Inside a scanned directory a symlink is followed only
    to a file in that directory, unless `follow_symlinks`; a file named on the command line is read
    wherever its link points (it is still refused if it is not a regular file)."""
    result = ScanResult()
    found = [  # listed first, so the progress knows how many files there are
        (file, tree, not Path(path).is_dir())
        for path in paths
        for file, tree in _files(Path(path), result, root)
    ]
    with progress_task("autodo scan", len(found), "files") as task:
        for file, tree, explicit in found:
            _scan_file(
                file,
                root,
                result,
                max_bytes,
                todo_file=explicit or bool(TODO_FILE_NAME.search(file.name)),
                tree=None if follow_symlinks else tree,
            )
            task.advance()
    _drop_duplicate_anchors(result)
    return result


def _files(path: Path, result: ScanResult, root: Path) -> Iterator[tuple[Path, Path | None]]:
    """Each file to read, with the directory tree its symlink must stay in (None: named, any place);
    a directory that cannot be listed is reported and named in `result.unread`."""
    if not path.is_dir():
        if os.path.lexists(path):
            yield path, None
        else:
            result.problems.append(Problem(str(path), 0, "no such file or directory"))
        return
    tree = path.resolve()

    def unreadable(error: OSError) -> None:
        name = printable(_relative(Path(error.filename or path), root))
        result.unread.append(name)
        result.problems.append(
            Problem(
                name,
                0,
                f"cannot read the directory: {error.strerror or error}: skipped, and its items are "
                "not counted as unseen",
            )
        )

    for directory, subdirs, names in os.walk(path, onerror=unreadable):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            file = Path(directory) / name
            if file.suffix.lower() in MARKDOWN_SUFFIXES | CODE_SUFFIXES:
                yield file, tree


def printable(name: str) -> str:
    """A file name as text that can be printed and stored: bytes that are not UTF-8 (kept by the
    file system's surrogate escapes) shown as \\xNN."""
    return os.fsencode(name).decode("utf-8", errors="backslashreplace")


def _undecodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _relative(file: Path, root: Path) -> str:
    try:
        return file.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file.resolve().as_posix()


def _link_name(file: Path, root: Path) -> str:
    """The file's own name relative to `root`, its last component unresolved (a link, not its target)."""
    return f"{_relative(file.parent, root).rstrip('/')}/{file.name}".removeprefix("./")


def _not_regular(mode: int) -> str | None:
    """What a file of this mode is when it is not a regular file, else None."""
    if stat.S_ISREG(mode):
        return None
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _read_capped(file: Path, name: str, result: ScanResult, max_bytes: int) -> bytes | None:
    """The bytes of a regular file of at most `max_bytes`, or None with the reason in `result`.

    Opened without blocking and checked again on the open descriptor, so a file swapped for a FIFO
    after the first look cannot hang the scan, and read no further than the cap, so a file that
    grows after the look cannot fill the memory."""
    try:
        kind = _not_regular(os.stat(file).st_mode)
        if kind is not None:
            result.problems.append(Problem(name, 0, f"{kind}, not a regular file: skipped"))
            return None
        descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(descriptor, "rb") as handle:
            status = os.fstat(handle.fileno())
            kind = _not_regular(status.st_mode)
            if kind is not None:
                result.problems.append(Problem(name, 0, f"{kind}, not a regular file: skipped"))
                return None
            data = handle.read(max_bytes + 1) if status.st_size <= max_bytes else b""
    except OSError as exc:
        result.problems.append(Problem(name, 0, f"cannot read: {exc.strerror or exc}"))
        result.unread.append(name)
        return None
    if status.st_size > max_bytes or len(data) > max_bytes:
        size = max(status.st_size, len(data))
        more = "" if status.st_size > max_bytes else "more than "
        result.problems.append(
            Problem(
                name,
                0,
                f"{more}{size:,} bytes, over the {max_bytes:,}-byte limit: skipped "
                "(PIPELINE_AUTODO_MAX_FILE_BYTES raises it)",
            )
        )
        return None
    return data


def _scan_file(
    file: Path, root: Path, result: ScanResult, max_bytes: int, *, todo_file: bool, tree: Path | None = None
) -> None:
    """Read one file. Bold list items count only in a TODO file (named like TODO.md, ROADMAP.md,
    backlog.md, or named on the command line): elsewhere they are prose, such as a doc's key points.
    A symlink whose target is outside `tree` (when given) is reported and skipped, as are a symlink
    loop and a file whose name is not UTF-8 (an item's file is stored and printed as text)."""
    if _undecodable(str(file)):
        name = printable(_link_name(file, root))
        result.problems.append(Problem(name, 0, "the file name is not valid UTF-8: skipped (rename it)"))
        return
    try:
        target = file.resolve()
    except (OSError, RuntimeError):  # RuntimeError: Python before 3.13 on a symlink loop
        result.problems.append(Problem(_link_name(file, root), 0, "a symlink loop: skipped"))
        return
    if file.is_symlink() and tree is not None and not target.is_relative_to(tree):
        result.problems.append(
            Problem(
                _link_name(file, root),
                0,
                f"a symlink to {target}, outside the scanned directory: skipped (--follow-symlinks reads it)",
            )
        )
        return
    name = _relative(file, root)
    data = _read_capped(file, _link_name(file, root) if file.is_symlink() else name, result, max_bytes)
    if data is None:
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
