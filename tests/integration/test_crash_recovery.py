"""A run killed mid-batch loses nothing: its claims wait out the lease, then another run finishes.

A worker with a short lease is killed with SIGKILL while it holds claimed postings. Its
claims must stay put while the lease runs (no one else takes them), the sweep the
sensor runs each tick must free them once it expired, and a second worker must finish
them without redoing what the dead worker completed. A late write from the dead run's
id must never overwrite a reclaimed posting.
"""

from __future__ import annotations

import signal
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select

from appdb import claims, discovery
from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput, WorkItem, utcnow
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from tests.support.claim_worker import USE_CASE_VERSION, finish, start_worker
from tests.support.postings import seed_postings

USE_CASE = "posting_summary"
SPEC = discovery.WorkSpec(
    use_case=USE_CASE, version=USE_CASE_VERSION, upstream_versions={}, subjects=POSTINGS_TABLE
)
ITEMS = 60
LEASE_SECONDS = 3
DEAD = "worker-killed"
RESCUER = "worker-rescue"
WAIT_LIMIT_SECONDS = 60  # a hang guard, not a speed expectation


def postings(count: int) -> list[dict[str, str]]:
    return [
        {"key": f"job-{index:03d}", "title": f"Job {index}", "description": f"Do task number {index} well."}
        for index in range(count)
    ]


def _outputs_by(url: str, run_id: str) -> set[str]:
    with session_scope(url) as session:
        return set(session.scalars(select(UseCaseOutput.subject_key).where(UseCaseOutput.run_id == run_id)))


def _held_by(url: str, run_id: str) -> dict[str, object]:
    with session_scope(url) as session:
        rows = session.execute(
            select(WorkItem.subject_key, WorkItem.lease_expires_at).where(
                WorkItem.status == "claimed", WorkItem.claimed_by == run_id
            )
        )
        return dict(rows.all())


def _late_output(subject_hash: str) -> dict[str, object]:
    return {
        "value": {"summary": "written by a run that was declared dead"},
        "model": "fake-model",
        "backend": "fake",
        "use_case_version": USE_CASE_VERSION,
        "input_hash": "late",
        "subject_hash": subject_hash,
    }


def test_a_killed_worker_s_claims_return_after_the_lease_and_are_finished_once(
    app_db_url: str, tmp_path: Path
) -> None:
    seed_postings(app_db_url, tmp_path, postings(ITEMS))
    slow = ("--chunk", "20", "--sleep-per-item", "0.1", "--lease-seconds", str(LEASE_SECONDS))
    dead = start_worker(app_db_url, USE_CASE, DEAD, *slow)
    deadline = time.monotonic() + WAIT_LIMIT_SECONDS
    while len(_outputs_by(app_db_url, DEAD)) < 5:
        assert dead.poll() is None, dead.communicate()
        assert time.monotonic() < deadline, "the worker never completed 5 postings"
        time.sleep(0.02)
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    killed_at = time.perf_counter()

    done_by_dead = _outputs_by(app_db_url, DEAD)
    held = _held_by(app_db_url, DEAD)
    assert held, "the worker was killed while holding no claim"
    assert not held.keys() & done_by_dead

    # While the lease runs, the claims stay with the dead run: the sweep leaves them and discovery skips them.
    live = {key for key, expires in held.items() if expires > utcnow() + timedelta(seconds=1)}
    assert live, "the leases ran out before the test could look (the machine stalled for seconds)"
    with session_scope(app_db_url) as session:
        claims.release_expired_claims(session)
    with session_scope(app_db_url) as session:
        assert not live & set(discovery.find_pending_work(session, SPEC))
    assert live <= _held_by(app_db_url, DEAD).keys()

    # Once the lease expired, the sweep frees exactly the dead run's claims, spending no attempt.
    freed = 0
    while _held_by(app_db_url, DEAD):
        assert time.monotonic() < deadline + LEASE_SECONDS, "the expired claims were never freed"
        with session_scope(app_db_url) as session:
            freed += claims.release_expired_claims(session)
        time.sleep(0.05)
    assert freed == len(held)
    with session_scope(app_db_url) as session:
        items = {item.subject_key: item for item in session.scalars(select(WorkItem))}
        assert {(items[key].status, items[key].attempts) for key in held} == {("pending", 0)}
        assert set(held) <= set(discovery.find_pending_work(session, SPEC))

    # A late write from the dead run, after another run reclaimed the posting, is refused.
    reclaimed = sorted(held)[0]
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, USE_CASE, [reclaimed], "run-reclaimer") == [reclaimed]
    with session_scope(app_db_url) as session:
        assert not claims.complete_item(session, USE_CASE, reclaimed, DEAD, _late_output("x"))
        assert claims.fail_item(session, USE_CASE, reclaimed, DEAD, "late failure") is None
    with session_scope(app_db_url) as session:
        assert session.get(UseCaseOutput, (USE_CASE, reclaimed)) is None
        assert claims.release_items(session, USE_CASE, [reclaimed], "run-reclaimer") == 1

    rescuer = finish(start_worker(app_db_url, USE_CASE, RESCUER, "--chunk", "20"))
    recovery_seconds = time.perf_counter() - killed_at

    with session_scope(app_db_url) as session:
        outputs = {row.subject_key: row for row in session.scalars(select(UseCaseOutput))}
        calls = dict(
            session.execute(
                select(Interaction.subject_key, func.count(Interaction.id)).group_by(Interaction.subject_key)
            ).all()
        )
        calls_by_dead = set(
            session.scalars(select(Interaction.subject_key).where(Interaction.run_id == DEAD))
        )
        statuses = dict(
            session.execute(select(WorkItem.status, func.count()).group_by(WorkItem.status)).all()
        )
    print(
        f"\ncrash recovery [{app_db_url.split(':', 1)[0]}]: items={ITEMS} "
        f"done before kill={len(done_by_dead)} "
        f"held at kill={len(held)} freed by sweep={freed} finished by rescuer={rescuer['completed']} "
        f"recovery (kill -> all done)={recovery_seconds:.1f}s with a {LEASE_SECONDS}s lease"
    )
    assert len(outputs) == ITEMS and statuses == {"done": ITEMS}
    assert set(calls.values()) == {1}  # one generation per posting: nothing redone, nothing half-recorded
    assert calls_by_dead == done_by_dead  # the call killed mid-transaction left no trace
    assert {key for key, row in outputs.items() if row.run_id == DEAD} == done_by_dead
    assert rescuer["completed"] == ITEMS - len(done_by_dead) and rescuer["lost_claims"] == 0

    # Even after the rescuer's output is stored, the dead run can neither overwrite nor fail it.
    before = outputs[reclaimed]
    with session_scope(app_db_url) as session:
        assert not claims.complete_item(session, USE_CASE, reclaimed, DEAD, _late_output(before.subject_hash))
        assert claims.fail_item(session, USE_CASE, reclaimed, DEAD, "late failure") is None
    with session_scope(app_db_url) as session:
        after = session.get(UseCaseOutput, (USE_CASE, reclaimed))
        assert (after.run_id, after.value, after.input_hash) == (RESCUER, before.value, before.input_hash)
        assert session.get(WorkItem, (USE_CASE, reclaimed)).status == "done"
