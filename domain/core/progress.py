"""Progress of long work, told by the work and shown by whoever runs it.

Embedding a taxonomy's labels, scanning a tree of files, reading a large ingest file: the code doing it
opens a `progress_task` and advances it; it does not know whether a terminal, a log or nobody is
watching. The reporter decides: by default a log line when the task starts (with what it will cost)
and at most every `LOG_EVERY_SECONDS` after; the `pipeline` command line installs one that draws a
line with counts, rate and time left on the terminal (`console.progress`).

The reporter is one per process (`use_reporter`), not passed through every call: a run that
`pipeline run` executes in this process reaches the terminal without Dagster knowing of it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

LOG_EVERY_SECONDS = 30.0
logger = logging.getLogger(__name__)


@dataclass
class ProgressTask:
    """A task's counts: `done` of `total` (None: not known) `unit`s, since `started` (monotonic)."""

    label: str
    total: int | None
    unit: str
    note: str = ""
    done: int = 0
    started: float = field(default_factory=time.monotonic)
    reporter: ProgressReporter | None = field(default=None, repr=False)

    def advance(self, count: int = 1) -> None:
        self.update(self.done + count)

    def update(self, done: int) -> None:
        """`done` so far (when the work counts in its own terms, e.g. the line a file is read to)."""
        self.done = done
        if self.reporter is not None:
            self.reporter.advanced(self)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def describe(self) -> str:
        """`embedding labels 4,096/98,318 labels (410/s, 3m50s left)`: done of total, rate, time left."""
        total = self.total if self.total is not None and self.total >= self.done else None
        text = f"{self.label} {self.done:,}" + (f"/{total:,}" if total is not None else "") + f" {self.unit}"
        elapsed = self.elapsed()
        if not self.done or elapsed <= 0:
            return text
        rate = self.done / elapsed
        shown_rate = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2f}"
        if total is None:
            return f"{text} ({shown_rate}/s)"
        if self.done >= total:
            return f"{text} ({shown_rate}/s, done)"
        return f"{text} ({shown_rate}/s, {duration((total - self.done) / rate)} left)"


class ProgressReporter(Protocol):
    """Shows tasks: told when one starts, advances and ends (from the thread doing the work)."""

    def started(self, task: ProgressTask) -> None: ...

    def advanced(self, task: ProgressTask) -> None: ...

    def finished(self, task: ProgressTask) -> None: ...


class LoggingReporter:
    """The default: a log line at the start (with the task's note), at most every `every` seconds while
    it runs, and at the end. What a daemon's or a benchmark's log shows."""

    def __init__(self, every: float = LOG_EVERY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._last: dict[int, float] = {}

    def started(self, task: ProgressTask) -> None:
        self._last[id(task)] = self.clock()
        logger.info("%s%s", task.label, f": {task.note}" if task.note else "")

    def advanced(self, task: ProgressTask) -> None:
        now = self.clock()
        if now - self._last.get(id(task), 0.0) >= self.every:
            self._last[id(task)] = now
            logger.info("%s", task.describe())

    def finished(self, task: ProgressTask) -> None:
        self._last.pop(id(task), None)
        logger.info("%s in %s", task.describe(), duration(task.elapsed()))


_reporter: ProgressReporter = LoggingReporter()
_lock = threading.Lock()


def watched() -> bool:
    """Whether the counts are shown as they change (a terminal): work may skip counting its total
    (a pass over the input) when nobody watches."""
    return bool(getattr(_reporter, "watched", False))


def use_reporter(reporter: ProgressReporter) -> ProgressReporter:
    """Make `reporter` show every task started from now on; returns the one it replaces."""
    global _reporter
    with _lock:
        previous, _reporter = _reporter, reporter
    return previous


@contextlib.contextmanager
def reporting_to(reporter: ProgressReporter) -> Iterator[ProgressReporter]:
    """`use_reporter` for the body only."""
    previous = use_reporter(reporter)
    try:
        yield reporter
    finally:
        use_reporter(previous)


@contextlib.contextmanager
def progress_task(
    label: str, total: int | None, unit: str, note: str = "", started: float | None = None
) -> Iterator[ProgressTask]:
    """A task shown by the current reporter while the body runs; the body calls `advance`. `started`:
    when the work began (`time.monotonic()`), if before the task (the rate counts from it)."""
    reporter = _reporter
    task = ProgressTask(label, total, unit, note, reporter=reporter)
    if started is not None:
        task.started = started
    reporter.started(task)
    try:
        yield task
    finally:
        reporter.finished(task)


def duration(seconds: float) -> str:
    """`45s`, `3m05s`, `1h02m`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
