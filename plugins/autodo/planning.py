"""What to work on next, and the shape of the work: priorities, dependencies (never a cycle), the tree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

PRIORITIES = ("P0", "P1", "P2", "P3")
DEFAULT_PRIORITY = "P2"
OPEN, DONE, WONTFIX, STALE = "open", "done", "wontfix", "stale"
STATUSES = (OPEN, DONE, WONTFIX, STALE)
CLOSED = frozenset({DONE, WONTFIX})
STALE_AFTER_SCANS = 3


@dataclass(frozen=True)
class PlanItem:
    key: str
    text: str
    status: str
    priority: str
    created_at: datetime
    parent: str | None = None
    depends_on: tuple[str, ...] = ()
    file: str | None = None
    line: int | None = None


class DependencyError(ValueError):
    """A dependency that would make a cycle, or names an unknown item."""


def blockers(item: PlanItem, items: Mapping[str, PlanItem]) -> list[str]:
    """What `item` still waits for: dependencies not closed, and children not closed."""
    waiting = [key for key in item.depends_on if key in items and items[key].status not in CLOSED]
    waiting += [
        other.key for other in items.values() if other.parent == item.key and other.status not in CLOSED
    ]
    return waiting


def pick(items: Mapping[str, PlanItem], count: int = 1) -> list[PlanItem]:
    """The next `count` open, unblocked items: highest priority first, then oldest."""
    ready = [item for item in items.values() if item.status == OPEN and not blockers(item, items)]
    ready.sort(key=lambda item: (PRIORITIES.index(item.priority), item.created_at, item.key))
    return ready[:count]


def check_dependency(items: Mapping[str, PlanItem], item: str, depends_on: str) -> None:
    """Raise DependencyError unless `item` may depend on `depends_on` (both known, no cycle)."""
    for key in (item, depends_on):
        if key not in items:
            raise DependencyError(f"no item {key}")
    if item == depends_on:
        raise DependencyError(f"{item} cannot depend on itself")
    path = _path(items, depends_on, item)
    if path is not None:
        raise DependencyError(f"{item} -> {depends_on} would make a cycle: {' -> '.join([item, *path])}")


def _path(items: Mapping[str, PlanItem], start: str, goal: str) -> list[str] | None:
    """A dependency path from start to goal, if any (depth first)."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        key, path = stack.pop()
        if key == goal:
            return path
        if key in seen or key not in items:
            continue
        seen.add(key)
        stack.extend((dep, [*path, dep]) for dep in items[key].depends_on)
    return None


@dataclass
class TreeNode:
    item: PlanItem
    children: list[TreeNode] = field(default_factory=list)


def tree_lines(items: Mapping[str, PlanItem], root: str | None = None) -> list[str]:
    """The hierarchy (children under their parent) with each item's dependencies, as text lines."""
    children: dict[str | None, list[PlanItem]] = {}
    for item in sorted(items.values(), key=lambda i: (PRIORITIES.index(i.priority), i.created_at, i.key)):
        parent = item.parent if item.parent in items else None
        children.setdefault(parent, []).append(item)
    tops: Sequence[PlanItem] = [items[root]] if root is not None else children.get(None, [])
    lines: list[str] = []

    def walk(item: PlanItem, depth: int) -> None:
        mark = {OPEN: "[ ]", DONE: "[x]", WONTFIX: "[-]", STALE: "[?]"}[item.status]
        deps = f"  (after {', '.join(item.depends_on)})" if item.depends_on else ""
        lines.append(f"{'  ' * depth}{mark} {item.key} {item.priority} {item.text}{deps}")
        for child in children.get(item.key, []):
            walk(child, depth + 1)

    for item in tops:
        walk(item, 0)
    return lines
