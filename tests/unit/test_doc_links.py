"""Every link between the project's Markdown pages resolves: the file exists and, when the link names
a section (`page.md#section`), the page has a heading with that anchor, as GitHub makes them.

History moves from the "where things stand" pages to docs/results-log.md, and their sections' anchors
move with it; a link left pointing at the old page fails here, naming the page and the link.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    return sorted([ROOT / "README.md", ROOT / "TODO.md", *(ROOT / "docs").glob("*.md")])


def prose_lines(path: Path) -> list[str]:
    """The page's lines outside fenced code blocks (a `# comment` in a shell block is no heading)."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        lines.append("" if fenced else line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept),
    spaces made hyphens; inline code and link targets count by their text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").lower()
    kept = "".join(char for char in text if char in " -_" or unicodedata.category(char)[0] in ("L", "N"))
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor on the page; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_slugs_are_githubs() -> None:
    assert slug("The issue's table again, on a quiet machine (2026-12-06, b34506f against 96769ae)") == (
        "the-issues-table-again-on-a-quiet-machine-2026-12-06-b34506f-against-96769ae"
    )
    assert slug("The daemon path (`pipeline ui`)") == "the-daemon-path-pipeline-ui"
    assert slug("1,000 postings on a quiet machine") == "1000-postings-on-a-quiet-machine"


def test_every_link_between_the_pages_resolves() -> None:
    dead = []
    cache: dict[Path, set[str]] = {}
    for page in pages():
        for number, line in enumerate(prose_lines(page), start=1):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto: are not ours to check
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(ROOT)}:{number}: {target}"
                if not linked.exists():
                    dead.append(f"{where} (no such file)")
                elif anchor and linked.suffix == ".md":
                    known = cache.setdefault(linked, anchors(linked))
                    if anchor not in known:
                        dead.append(f"{where} (no such section in {linked.relative_to(ROOT)})")
    assert not dead, "dead links:\n" + "\n".join(dead)
