"""What an LLM call returns, and the two kinds of failure the engine tells apart.

- `ItemError`: this item's call went wrong (context overflow, unusable output); it counts
  against the item's attempts.
- `BackendUnavailable`: the backend itself is down, the model is missing, or the call timed
  out against a dead server; it spends no attempts and ends the run early.
"""

from __future__ import annotations

from dataclasses import dataclass

from appdb.redaction import redact


class LLMError(Exception):
    """Base of the errors raised by LLM backends. The message is redacted as it is made: it travels
    into stored errors and pause reasons, Dagster's event log and the terminal, and a backend's
    message may carry a server URL with credentials."""

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(redact(str(message)), *args)


class ItemError(LLMError):
    """The call failed because of this input or its output; counts as a failed attempt."""


class BackendUnavailable(LLMError):
    """The backend or model cannot serve now; no attempt is spent on it."""


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_ms: float
