"""Progress in the terminal: counts, rate and time left, on one line redrawn in place.

Two sources share the line (`StatusLine`). `pipeline run` and `pipeline demo` poll the application
database for the subjects each use case finished (`RunProgress`, from a thread while Dagster executes
the run in this process, so nothing in the run changes). Work below the command line (ingest, export,
reprocess, autodo scan, the first embedding of a taxonomy's labels) reports through
`domain.core.progress`, which `install_reporter` points at the same line.

The line goes to stderr (stdout keeps the results) and only when stderr is a terminal, unless
`--progress always` forces it (or `never` silences it): redirected output and CI logs get no redrawn
lines, only a task's one-line note of what it will cost (`NotesReporter`).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import TextIO

from console.terminal import one_line
from domain.core.progress import ProgressReporter, ProgressTask, duration, use_reporter

PROGRESS_MODES = ("auto", "always", "never")
POLL_SECONDS = 0.5
REDRAW_SECONDS = 0.2  # a task advancing faster than this redraws at most this often
SHOW_AFTER = 0.5  # a task (without a note) shows its counts once it has run this long
CLEAR_TO_END = "\x1b[K"


def add_progress_argument(parser: object) -> None:
    """`--progress auto|always|never` on a command that shows progress."""
    parser.add_argument(  # type: ignore[attr-defined]
        "--progress",
        choices=PROGRESS_MODES,
        default="auto",
        help="progress line on stderr: auto (when stderr is a terminal, the default), always, never",
    )


def terminal_stream() -> TextIO:
    """The real stderr: the progress line redraws itself with a carriage return and an erase-line
    sequence, which `SafeStream` (rightly) drops from everything else printed. Only numbers and
    declared names pass through `one_line` before they are written to it."""
    return getattr(sys.stderr, "inner", sys.stderr)


def progress_wanted(mode: str, stream: TextIO) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@dataclass
class UseCaseProgress:
    name: str
    total: int
    done: int = 0
    failed: int = 0  # attempts that failed: through with for this run, but not done

    def describe(self, elapsed: float, unit: str) -> str:
        """`posting_summary 10/25, 2 failed (0.5 postings/s, 26s left)`: done of planned, failed, rate
        (of both), time left (for the rest)."""
        through = self.done + self.failed
        total = max(self.total, through)
        text = f"{self.name} {self.done}/{total}" + (f", {self.failed} failed" if self.failed else "")
        if not through or elapsed <= 0:
            return text + (" (starting)" if through < total else "")
        rate = through / elapsed
        if through >= total:  # "done" only when nothing failed: a failed attempt is not done
            return text + f" ({rate:.2f} {unit}/s, {'finished' if self.failed else 'done'})"
        return text + f" ({rate:.2f} {unit}/s, {duration((total - through) / rate)} left)"


class StatusLine:
    """The terminal's last line, redrawn in place from its parts (a run's counts, a task's), joined by
    " · " and clipped to the width so it never wraps; a finished part is printed above it for good."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._parts: dict[Hashable, str] = {}
        self._lock = threading.RLock()

    def show(self, key: Hashable, text: str) -> None:
        with self._lock:
            self._parts[key] = one_line(text)
            self._draw()

    def finish(self, key: Hashable, text: str, clipped: bool = True) -> None:
        """Print `text` as the part's last state, on a line of its own; the other parts redraw below."""
        with self._lock:
            self._parts.pop(key, None)
            self._write(text, clipped)
            self.stream.write("\n")
            if self._parts:
                self._draw()
            self.stream.flush()

    def say(self, text: str) -> None:
        """A plain line above the progress (a task's note), whole: it may wrap, it is not redrawn."""
        self.finish(object(), text, clipped=False)

    def _draw(self) -> None:
        try:
            self._write(" · ".join(self._parts.values()))
            self.stream.flush()
        except (OSError, ValueError):  # a closed or gone terminal: the progress line, never the work, stops
            pass

    def _write(self, text: str, clipped: bool = True) -> None:
        width = shutil.get_terminal_size((120, 24)).columns - 1
        text = one_line(text)
        text = text if len(text) <= width or not clipped else text[: width - 1] + "…"
        self.stream.write("\r" + text + CLEAR_TO_END)


class TerminalReporter:
    """Shows `domain.core.progress` tasks on the status line: the note first, on a line of its own, then
    the counts redrawn at most every `redraw_seconds`, and the final counts left on screen. A task done
    within `show_after` seconds shows nothing (a small file's ingest needs no progress bar)."""

    watched = True

    def __init__(
        self, line: StatusLine, redraw_seconds: float = REDRAW_SECONDS, show_after: float | None = None
    ) -> None:
        self.line = line
        self.redraw_seconds = redraw_seconds
        self.show_after = SHOW_AFTER if show_after is None else show_after
        self._drawn: dict[int, float] = {}  # task -> when its counts were last drawn

    def started(self, task: ProgressTask) -> None:
        if task.note:
            self.line.say(f"{task.label}: {task.note}")
        self.advanced(task)

    def advanced(self, task: ProgressTask) -> None:
        now = time.monotonic()
        if task.elapsed() < self.show_after and not task.note:
            return
        if now - self._drawn.get(id(task), 0.0) >= self.redraw_seconds:
            self._drawn[id(task)] = now
            self.line.show(id(task), task.describe())

    def finished(self, task: ProgressTask) -> None:
        if self._drawn.pop(id(task), None) is not None:
            self.line.finish(id(task), f"{task.describe()} in {duration(task.elapsed())}")


class NotesReporter:
    """Progress when no terminal watches: only a task's note (what it will cost), one plain line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def started(self, task: ProgressTask) -> None:
        if task.note:
            print(f"{task.label}: {task.note}", file=self.stream, flush=True)

    def advanced(self, task: ProgressTask) -> None:
        pass

    def finished(self, task: ProgressTask) -> None:
        pass


_status_line: StatusLine | None = None


def status_line(stream: TextIO | None = None) -> StatusLine:
    """The one status line of this process on the terminal's stderr (or on `stream`, for tests)."""
    global _status_line
    if stream is not None:
        return StatusLine(stream)
    if _status_line is None or _status_line.stream is not terminal_stream():
        _status_line = StatusLine(terminal_stream())
    return _status_line


def install_reporter(mode: str = "auto", stream: TextIO | None = None) -> ProgressReporter:
    """Point `domain.core.progress` at the terminal (a status line) or, when progress is not wanted,
    at a reporter that prints only the notes. Returns the reporter it replaced."""
    shown = stream or terminal_stream()
    if progress_wanted(mode, shown):
        return use_reporter(TerminalReporter(status_line(stream)))
    return use_reporter(NotesReporter(sys.stderr if stream is None else stream))


class RunProgress:
    """Progress of the in-process runs of one command, a line per work group (`track`)."""

    def __init__(
        self,
        database_url: str,
        *,
        enabled: bool,
        stream: TextIO | None = None,
        poll_seconds: float = POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.database_url = database_url
        self.enabled = enabled
        self.line = status_line(stream)
        self.poll_seconds = poll_seconds
        self.clock = clock

    @contextlib.contextmanager
    def track(self, group: str, totals: Mapping[str, int], unit: str) -> Iterator[None]:
        """While the body runs the group's batches: the line updated every `poll_seconds`, and the
        final counts left on screen after it."""
        if not self.enabled or not totals:
            yield
            return
        from appdb.database import session_scope  # SQLAlchemy: only when a run shows progress
        from appdb.models import utcnow
        from appdb.run_progress import finished_since

        since, started = utcnow(), self.clock()
        counts = [UseCaseProgress(one_line(name), total) for name, total in totals.items()]
        unit = one_line(unit)
        stop = threading.Event()
        key = ("run", group)

        def render() -> str:
            with session_scope(self.database_url) as session:
                done = finished_since(session, list(totals), since)
            for count, name in zip(counts, totals, strict=True):
                count.done, count.failed = done[name].done, done[name].failed
            elapsed = self.clock() - started
            return f"{one_line(group)}: " + " · ".join(count.describe(elapsed, unit) for count in counts)

        def poll() -> None:
            while not stop.wait(self.poll_seconds):
                with contextlib.suppress(Exception):  # a busy database skips a redraw, no more
                    self.line.show(key, render())

        self.line.show(key, render())
        thread = threading.Thread(target=poll, name="run-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            with contextlib.suppress(Exception):
                self.line.finish(key, f"{render()} in {duration(self.clock() - started)}")
