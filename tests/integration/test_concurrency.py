"""Several runs pulling the same work at once: every posting is done exactly once, none is lost.

Four worker processes (`tests/support/claim_worker.py`, the real claim protocol) race over
2,000 postings, released together from a start line.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import func, select

from appdb import claims, discovery
from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput, WorkItem
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from plugins.postings.store.tables import Posting
from tests.support.claim_worker import USE_CASE_VERSION, finish, start_together
from tests.support.postings import seed_postings

USE_CASE = "posting_summary"
ITEMS = 2000
WORKERS = 4


def postings(count: int) -> list[dict[str, str]]:
    return [
        {"key": f"job-{index:05d}", "title": f"Job {index}", "description": f"Do task number {index} well."}
        for index in range(count)
    ]


def test_concurrent_workers_process_every_posting_exactly_once(app_db_url: str, tmp_path: Path) -> None:
    seed_postings(app_db_url, tmp_path, postings(ITEMS))
    worker_ids = [f"worker-{index}" for index in range(WORKERS)]

    started = time.perf_counter()
    workers = start_together(app_db_url, USE_CASE, worker_ids, tmp_path / "go", "--chunk", "20")
    summaries = [finish(worker) for worker in workers]
    seconds = time.perf_counter() - started

    with session_scope(app_db_url) as session:
        posting_count = session.scalar(select(func.count(Posting.id)))
        outputs = dict(session.execute(select(UseCaseOutput.subject_key, UseCaseOutput.run_id)).all())
        calls_per_posting = dict(
            session.execute(
                select(Interaction.subject_key, func.count(Interaction.id)).group_by(Interaction.subject_key)
            ).all()
        )
        interaction_runs = dict(session.execute(select(Interaction.subject_key, Interaction.run_id)).all())
        statuses = dict(
            session.execute(select(WorkItem.status, func.count()).group_by(WorkItem.status)).all()
        )
    duplicates = sum(count - 1 for count in calls_per_posting.values() if count > 1)
    lost = posting_count - len(outputs)
    claimed = {summary["worker"]: summary["claimed"] for summary in summaries}
    print(
        f"\nconcurrency [{app_db_url.split(':', 1)[0]}]: items={posting_count} workers={WORKERS} "
        f"claimed={claimed} sum={sum(claimed.values())} duplicates={duplicates} lost={lost} "
        f"lost_claims={sum(s['lost_claims'] for s in summaries)} "
        f"contended_claims={sum(s['contended_claims'] for s in summaries)} seconds={seconds:.1f}"
    )

    assert posting_count == ITEMS
    assert len(outputs) == ITEMS and lost == 0  # every posting has its one output
    assert duplicates == 0 and len(calls_per_posting) == ITEMS  # and was generated exactly once
    assert statuses == {"done": ITEMS}  # nothing left claimed or pending
    assert sum(claimed.values()) == ITEMS  # no posting was claimed by two workers
    assert sum(summary["completed"] for summary in summaries) == ITEMS
    assert all(summary["lost_claims"] == 0 for summary in summaries)
    # each output was written by the worker whose generation it records
    assert all(outputs[key] == interaction_runs[key] for key in outputs)
    # the workers really ran side by side (a serial run would prove nothing about claims)
    assert sum(1 for count in claimed.values() if count) >= 2


def test_a_posting_finished_after_another_run_s_discovery_is_not_claimed_again(
    app_db_url: str, tmp_path: Path
) -> None:
    """The race the workers above hit: run B discovered p-1, run A finished it, then B claims."""
    seed_postings(app_db_url, tmp_path)
    spec = discovery.WorkSpec(
        use_case=USE_CASE, version=USE_CASE_VERSION, upstream_versions={}, subjects=POSTINGS_TABLE
    )
    with session_scope(app_db_url) as session:
        seen_by_b = discovery.find_pending_work(session, spec)
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, USE_CASE, ["p-1"], "run-a", spec=spec) == ["p-1"]
    with session_scope(app_db_url) as session:
        digest = session.scalar(select(Posting.content_hash).where(Posting.key == "p-1"))
        output = {"value": {"summary": "s"}, "model": "m", "backend": "b", "input_hash": "h"}
        output |= {"use_case_version": USE_CASE_VERSION, "subject_hash": digest}
        assert claims.complete_item(session, USE_CASE, "p-1", "run-a", output)

    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, USE_CASE, seen_by_b, "run-b", spec=spec) == ["p-2", "p-3"]
    with session_scope(app_db_url) as session:  # a forced run redoes current outputs on purpose
        assert claims.claim_items(session, USE_CASE, ["p-1"], "run-f", include_parked=True, spec=spec) == [
            "p-1"
        ]
    newer = discovery.WorkSpec(
        use_case=USE_CASE, version="2026-12-01.1", upstream_versions={}, subjects=POSTINGS_TABLE
    )
    with session_scope(app_db_url) as session:  # and a new version makes the done item claimable again
        assert claims.release_items(session, USE_CASE, ["p-1"], "run-f") == 1
        assert claims.claim_items(session, USE_CASE, ["p-1"], "run-c", spec=newer) == ["p-1"]
