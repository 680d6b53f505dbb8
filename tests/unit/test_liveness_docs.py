"""The liveness page states the timeout the code uses: it said a run is dead after 6 beats (60 s)
while the code declared it dead after 5 (50 s) (issue 66, item 8)."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline_defs.settings import PROJECT_ROOT
from resources.run_heartbeat import DEAD_AFTER_BEATS, DEFAULT_HEARTBEAT_SECONDS, dead_after_seconds

DOCS = PROJECT_ROOT / "docs"
NUMBER_WORDS = {"four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "ten": 10}


def stated_timeouts(page: Path) -> list[tuple[int, int]]:
    """Every "N beats (S s)" / "N missed beats (S s)" / "N heartbeats (S s)" the page states."""
    found = []
    pattern = r"\*{0,2}(\d+|[a-z]+)\*{0,2}\s+(?:missed\s+)?(?:heart)?beats\*{0,2}\s+\((\d+) s"
    for count, seconds in re.findall(pattern, page.read_text(encoding="utf-8")):
        beats = int(count) if count.isdigit() else NUMBER_WORDS.get(count)
        if beats is not None:
            found.append((beats, int(seconds)))
    return found


def test_the_docs_state_the_dead_after_timeout_the_code_uses() -> None:
    expected = (DEAD_AFTER_BEATS, int(dead_after_seconds(DEFAULT_HEARTBEAT_SECONDS)))
    stated = {page.name: stated_timeouts(page) for page in (DOCS / "liveness.md", DOCS / "known-limits.md")}
    assert stated["liveness.md"], "docs/liveness.md no longer states the timeout: update this test"
    assert {name: [t for t in found if t != expected] for name, found in stated.items()} == {
        name: [] for name in stated
    }
