"""What failed, counted by subject and said in one line per error: what `pipeline run` and `pipeline
status` print under a use case whose attempts failed.

A failed attempt stores no output: the subject waits for a retry (with backoff) or, after the retry
policy's last attempt, is parked. Errors are grouped by their head, the text before the first ": "
("blocked by check summary_faithful", "the response is not valid JSON", "FileNotFoundError"), so 25
blocked summaries that each name another word are one line, with the first one's reason as the example.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from appdb.run_progress import FailedAttempt, FailureCounts
from console.terminal import clip, safe_text

ERROR_WIDTH = 160
KEYS_SHOWN = 5


def error_head(error: str) -> str:
    """What groups an error with others like it: its first line up to the first ": "."""
    first = (error.strip().splitlines() or [""])[0]
    return first.split(": ", 1)[0].strip()


def describe_failures(counts: FailureCounts) -> str:
    """`5 failed (4 wait for a retry after 20:26:27 UTC, 1 parked ...)`: the count and what happens to
    them next."""
    next_steps = []
    if counts.waiting:
        first = f" after {counts.next_retry:%H:%M:%S} UTC" if counts.next_retry else ""
        next_steps.append(f"{counts.waiting} wait for a retry{first}")
    if counts.due:
        next_steps.append(f"{counts.due} due for a retry by the next run")
    if counts.parked:
        next_steps.append(f"{counts.parked} parked after their last attempt: `pipeline retry` re-queues them")
    return f"{counts.failed} failed" + (f" ({', '.join(next_steps)})" if next_steps else "")


def error_lines(attempts: Sequence[FailedAttempt], noun: str, total: int, indent: str = "  ") -> list[str]:
    """One line per error head, the commonest first: how many, the first one's error, which subjects.
    `attempts` may be a sample of the `total` failed (the newest): the lines then say so."""
    groups: dict[str, list[FailedAttempt]] = defaultdict(list)
    for attempt in attempts:
        groups[error_head(attempt.error)].append(attempt)
    lines = []
    for head, same in sorted(groups.items(), key=lambda group: len(group[1]), reverse=True):
        same = sorted(same, key=lambda attempt: attempt.key)
        shown = ", ".join(safe_text(attempt.key) for attempt in same[:KEYS_SHOWN])
        more = f" and {len(same) - KEYS_SHOWN} more" if len(same) > KEYS_SHOWN else ""
        plural = noun if len(same) == 1 else f"{noun}s"
        first = same[0]
        if all(attempt.error == first.error for attempt in same):  # one error: said once, whole
            lines.append(f"{indent}{len(same)} {plural}: {clip(first.error, ERROR_WIDTH)} ({shown}{more})")
        else:  # the same kind, each its own reason: the first one's, named
            reason = first.error.strip().split(": ", 1)[-1]
            example = clip(f"{first.key}: {reason}", ERROR_WIDTH)
            lines.append(f"{indent}{len(same)} {plural}: {safe_text(head)} ({shown}{more}), e.g. {example}")
    if total > len(attempts):
        lines.append(f"{indent}(errors grouped over the newest {len(attempts)} of the {total})")
    return lines
