"""`benchmarks.daemon_throughput` against a checkout of 96769ae, where issue 41 was measured.

    python -m benchmarks.daemon_throughput_96769ae --project-root WORKTREE_OF_96769ae [its options]

That commit's tables name the subject `posting_key` (now `subject_key`) and it has no `run_heartbeats`
table, so today's benchmark could not read its databases for the CPU accounting. This maps the column
for the benchmark's own reads and lets runs go unmatched to their processes (matched by start time
instead); everything else is the benchmark as it is. Used for docs/performance.md's "the issue's
table again" (2026-12-06).
"""

from __future__ import annotations

import sys

from sqlalchemy.exc import DBAPIError

import benchmarks.daemon_throughput as bench
from appdb.models import Interaction, UseCaseOutput, WorkItem

_RUN_PIDS = bench.run_pids


def _run_pids_if_recorded(app_url: str) -> dict[str, int]:
    """Each run's process id where the checkout records it; none where it has no heartbeat table."""
    try:
        return _RUN_PIDS(app_url)
    except DBAPIError:
        return {}


def main(argv: list[str] | None = None) -> int:
    for model in (Interaction, UseCaseOutput, WorkItem):
        model.__table__.c.subject_key.name = "posting_key"
    bench.run_pids = _run_pids_if_recorded
    return bench.main(argv)


if __name__ == "__main__":
    sys.exit(main())
