"""How many results share a transaction, for single calls and chain steps alike.

On PostgreSQL the commit and the connection's round trips of a transaction cost more than resolving a
subject, so results are stored a group at a time: a script's, which come milliseconds apart, up to
`WRITES_PER_TRANSACTION` or until `SCRIPT_WRITE_WAIT_SECONDS` have passed since the group's first; an
LLM's, those answered by the time the first of them is (`assets/llm_calls.py: generate_in_ready_groups`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

Result = TypeVar("Result")

WRITES_PER_TRANSACTION = 50
SCRIPT_WRITE_WAIT_SECONDS = 0.5  # a slow script's outputs still land within this long


def in_write_groups(results: Iterable[Result], size: int = WRITES_PER_TRANSACTION) -> Iterator[list[Result]]:
    """The results in groups of up to `size`, each written in one transaction; a group closes early
    once `SCRIPT_WRITE_WAIT_SECONDS` have passed since its first result."""
    group: list[Result] = []
    opened = 0.0
    for result in results:
        if not group:
            opened = time.monotonic()
        group.append(result)
        if len(group) >= size or time.monotonic() - opened >= SCRIPT_WRITE_WAIT_SECONDS:
            yield group
            group = []
    if group:
        yield group


__all__ = ["SCRIPT_WRITE_WAIT_SECONDS", "WRITES_PER_TRANSACTION", "in_write_groups"]
