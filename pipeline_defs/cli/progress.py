"""Progress in the terminal while `pipeline run` and `pipeline demo` work: per use case the subjects
done of those planned, the rate and the time left, on one line redrawn in place.

The counts come from the application database (`appdb.run_progress.finished_since`), polled from a
thread while Dagster executes the run in this process, so nothing in the run itself changes. The line
goes to stderr (stdout keeps the results) and only when stderr is a terminal, unless `--progress
always` forces it (or `never` silences it): redirected output and CI logs get no redrawn lines.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TextIO

from appdb.database import session_scope
from appdb.models import utcnow
from appdb.run_progress import finished_since
from pipeline_defs.cli.terminal import one_line

PROGRESS_MODES = ("auto", "always", "never")
POLL_SECONDS = 0.5
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
    declared use-case names are written to it."""
    return getattr(sys.stderr, "inner", sys.stderr)


def progress_wanted(mode: str, stream: TextIO) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


@dataclass
class UseCaseProgress:
    name: str
    total: int
    done: int = 0

    def describe(self, elapsed: float, unit: str) -> str:
        """`posting_summary 10/25 (0.5 postings/s, 30s left)`: done of planned, rate, time left."""
        total = max(self.total, self.done)
        text = f"{self.name} {self.done}/{total}"
        if not self.done or elapsed <= 0:
            return text + (" (starting)" if self.done < total else "")
        rate = self.done / elapsed
        if self.done >= total:
            return text + f" ({rate:.2f} {unit}/s, done)"
        return text + f" ({rate:.2f} {unit}/s, {duration((total - self.done) / rate)} left)"


class ProgressLine:
    """One line on a terminal, redrawn in place; clipped to its width so it never wraps."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def show(self, text: str) -> None:
        width = shutil.get_terminal_size((120, 24)).columns - 1
        text = text if len(text) <= width else text[: width - 1] + "…"
        self.stream.write("\r" + text + CLEAR_TO_END)
        self.stream.flush()

    def finish(self, text: str) -> None:
        self.show(text)
        self.stream.write("\n")
        self.stream.flush()


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
        self.line = ProgressLine(stream or terminal_stream())
        self.poll_seconds = poll_seconds
        self.clock = clock

    @contextlib.contextmanager
    def track(self, group: str, totals: Mapping[str, int], unit: str) -> Iterator[None]:
        """While the body runs the group's batches: the line updated every `poll_seconds`, and the
        final counts left on screen after it."""
        if not self.enabled or not totals:
            yield
            return
        since, started = utcnow(), self.clock()
        counts = [UseCaseProgress(one_line(name), total) for name, total in totals.items()]
        unit = one_line(unit)
        stop = threading.Event()

        def render() -> str:
            with session_scope(self.database_url) as session:
                done = finished_since(session, list(totals), since)
            for count, name in zip(counts, totals, strict=True):
                count.done = done.get(name, 0)
            elapsed = self.clock() - started
            return f"{one_line(group)}: " + " · ".join(count.describe(elapsed, unit) for count in counts)

        def poll() -> None:
            while not stop.wait(self.poll_seconds):
                with contextlib.suppress(Exception):  # a busy database skips a redraw, no more
                    self.line.show(render())

        self.line.show(render())
        thread = threading.Thread(target=poll, name="run-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            with contextlib.suppress(Exception):
                self.line.finish(f"{render()} in {duration(self.clock() - started)}")
