"""How failures and outages are paced: attempts, backoff, lease and pause, apart from the store.

A use case may declare its own (`UseCase(retry=RetryPolicy(max_attempts=5))`); the claims and pauses
statements take the policy as an argument and keep no rules of their own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """max_attempts: failed attempts before an item is parked (`pipeline retry` re-queues it).
    backoff_*: exponential backoff between attempts, with full jitter between half and all of the step.
    lease_seconds: how long a claim holds without renewal (a live run renews it as it goes).
    pause_*: how long a use case pauses after its backend failed; doubles while the outage lasts."""

    max_attempts: int = 3
    backoff_base_seconds: float = 30
    backoff_max_seconds: float = 3600
    lease_seconds: int = 600
    pause_base_seconds: float = 300
    pause_max_seconds: float = 3600

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"a retry policy needs at least 1 attempt, not {self.max_attempts}")

    def backoff_seconds(self, attempts: int) -> float:
        """Wait before the next attempt after `attempts` failures: exponential, with full jitter."""
        step = min(self.backoff_max_seconds, self.backoff_base_seconds * 2 ** (attempts - 1))
        return step * random.uniform(0.5, 1.0)

    def pause_seconds(self, trips: int) -> float:
        """A pause after the `trips`-th outage in a row: doubling, up to the maximum."""
        return min(self.pause_max_seconds, self.pause_base_seconds * 2 ** (trips - 1))


DEFAULT_RETRY_POLICY = RetryPolicy()
