"""What every command prints with: exit codes, tables, clipped text, times, pauses."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from appdb.models import utcnow
from appdb.pauses import Pause

EXIT_OK = 0
EXIT_REJECTED = 1  # ingest: some rows were rejected (the good ones went in)
EXIT_DIFFERENT = 1  # discover --expect: discovery differs from the expected work
EXIT_ERROR = 2
SHOWN_KEYS = 20
ERROR_CHARS = 100


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def key_list(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (f" ... and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


def describe_pause(pause: Pause) -> str:
    minutes = max(0, round((pause.resume_at - utcnow()).total_seconds() / 60))
    trips = f", trip {pause.consecutive_trips} in a row" if pause.consecutive_trips > 1 else ""
    return f"paused until {when(pause.resume_at)} (in {minutes} min{trips}): {pause.reason}"
