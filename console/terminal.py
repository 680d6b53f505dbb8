"""What every command prints with: exit codes, safe text, tables, clipped text, times, pauses.

Postings and model output are data from strangers: `safe_text` is the one helper every command's
output goes through (explicitly where data is printed, and `SafeStream` around stdout and stderr for
the rest). It drops terminal control sequences (ANSI colours, screen clears, OSC 8 hyperlinks, title
changes), other control characters and bidirectional overrides, and redacts credentials
(`appdb.redaction.redact`).
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from appdb.redaction import redact

if TYPE_CHECKING:
    from appdb.pauses import Pause

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and something failed (a run's work, a closed output pipe)
EXIT_REJECTED = 1  # ingest: some rows were rejected (the good ones went in)
EXIT_DIFFERENT = 1  # discover --expect: discovery differs from the expected work
EXIT_ERROR = 2

DETAILS = (
    "the details: `pipeline events --kind error` (errors by class), `pipeline trace KEY --full` (the "
    "prompt, the answer and the error), `pipeline failures` (parked ones)"
)
"""Where a failed piece of work is explained, for the line that says work failed."""
SHOWN_KEYS = 20
JSON_HELP = "print the result as JSON (for scripts): the same facts, nothing clipped"
ERROR_CHARS = 100


# ESC [ ... final (CSI), ESC ] ... BEL or ESC \\ (OSC, also unterminated), ESC P/X/^/_ ... ESC \\ (DCS and
# other strings), any other two-character ESC sequence, the 8-bit CSI/OSC forms
_CONTROL_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|\x9d[^\x07\x1b\x9c]*(?:\x07|\x9c)?"
)
# C0 and C1 controls but tab and newline; bidi overrides and isolates (text that reads backwards)
_CONTROL_CHARACTER = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
REPLACEMENT = "\ufffd"
# a file inside a Dagster package (dagster/, dagster_postgres/, dagster_shared/, ...)
_DAGSTER_PACKAGE_FILE = re.compile(r"[/\\]dagster(?:_[a-z]+)?[/\\]")


def safe_text(text: str) -> str:
    """`text` fit for a terminal: no control sequences (dropped) or control characters (shown as
    U+FFFD), CRLF as a newline, credentials redacted. Idempotent, so printing twice through it is fine."""
    text = _CONTROL_SEQUENCE.sub("", text.replace("\r\n", "\n"))
    return redact(_CONTROL_CHARACTER.sub(REPLACEMENT, text))


class SafeStream:
    """A text stream that writes everything through `safe_text`: the catch-all around stdout and
    stderr while a command runs (log lines, errors, anything not printed through a helper)."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(safe_text(text))
        return len(text)

    def __getattr__(self, name: str):  # noqa: ANN204 - flush, fileno, isatty, encoding ... of the stream
        return getattr(self.inner, name)


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")
_BACKTICK_RUN = re.compile(r"`+")


def _dagster_warning(category: type[Warning], filename: str) -> bool:
    """A warning Dagster raises about itself: one of its own categories (superseded, beta, preview,
    config), or any warning raised from a file of a Dagster package."""
    return category.__module__.startswith("dagster") or bool(_DAGSTER_PACKAGE_FILE.search(filename))


def hide_dagster_warnings() -> Callable[[], None]:
    """Stop printing Dagster's warnings about its own APIs (`pipeline ui` printed "Function
    `dev_command` is superseded ... Use 'dg dev' instead" on every start: advice about Dagster's CLI
    that no user of `pipeline` can act on). `--verbose` keeps them. Other warnings still print.
    Returns the undo."""
    shown = warnings.showwarning

    def show_unless_dagster(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001, ANN202
        if not _dagster_warning(category, filename):
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show_unless_dagster

    def undo() -> None:
        warnings.showwarning = shown

    return undo


def markdown_text(text: str) -> str:
    """Quoted text inside Markdown prose (a heading, a line): safe, one line, HTML and Markdown syntax
    escaped, so a posting's `<script>` or `[link](...)` shows as written instead of acting."""
    escaped = one_line(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", escaped)


def markdown_code_block(text: str) -> str:
    """Verbatim text as a fenced code block whose fence is longer than any run of backticks inside,
    so no line of it can close the block (HTML inside a code block is shown, not rendered)."""
    longest = max((len(run) for run in _BACKTICK_RUN.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{safe_text(text)}\n{fence}"


def one_line(text: str) -> str:
    """Safe text with its line breaks as spaces (a table cell, a list entry)."""
    text = safe_text(text)
    return " ".join(text.split()) if "\n" in text or "\t" in text else text


def clip(text: str, width: int) -> str:
    """Safe text on one line, cut to `width` characters."""
    text = one_line(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    headers = [one_line(cell) for cell in headers]
    rows = [[one_line(cell) for cell in row] for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def key_list(keys: Sequence[str]) -> str:
    shown = safe_text(", ".join(keys[:SHOWN_KEYS]))
    return shown + (f" ... and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


def describe_pause(pause: Pause) -> str:
    from appdb.models import utcnow  # SQLAlchemy's models: not for `pipeline --help`

    minutes = max(0, round((pause.resume_at - utcnow()).total_seconds() / 60))
    trips = f", trip {pause.consecutive_trips} in a row" if pause.consecutive_trips > 1 else ""
    return f"paused until {when(pause.resume_at)} (in {minutes} min{trips}): {safe_text(pause.reason)}"


def print_json(value: object) -> None:
    """A listing as JSON for scripts. ASCII-escaped, so a posting's control characters reach the reader as
    `\\u001b` escapes, not as terminal sequences (and `SafeStream` has nothing to drop)."""
    print(json.dumps(value, indent=2, default=str))


def pause_json(pause: Pause) -> dict[str, object]:
    return {
        "use_case": pause.use_case,
        "paused_at": pause.paused_at.isoformat(),
        "resume_at": pause.resume_at.isoformat(),
        "consecutive_trips": pause.consecutive_trips,
        "reason": redact(pause.reason),
    }
