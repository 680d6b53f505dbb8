"""Work state: claims are exclusive, failures count and park, outages spend nothing, dead claims return."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, select, text, update

from appdb import claims, discovery, retry_policy, subjects
from appdb.database import get_engine, session_scope
from appdb.models import WorkItem, utcnow
from plugins.autodo.autodo_kind import AUTODO
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from plugins.postings.store.tables import Posting
from tests.support.postings import seed_postings

SPEC = discovery.WorkSpec(
    use_case="posting_summary", version="2026-11-22.1", upstream_versions={}, subjects=POSTINGS_TABLE
)
KEYS = ["p-1", "p-2", "p-3"]


def _output(version: str = "2026-11-22.1") -> dict:
    return {
        "value": {"summary": "s"},
        "model": "m",
        "backend": "b",
        "use_case_version": version,
        "input_hash": "h",
        "subject_hash": "x",
    }


def test_a_claimed_item_is_held_by_one_run_only(app_db_url: str, tmp_path: Path) -> None:
    seed_postings(app_db_url, tmp_path)
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, SPEC.use_case, KEYS[:2], "run-a") == ["p-1", "p-2"]
    with session_scope(app_db_url) as session:
        assert claims.claim_items(session, SPEC.use_case, KEYS, "run-b") == ["p-3"]
        assert discovery.find_pending_work(session, SPEC) == []
    with session_scope(app_db_url) as session:
        # run-b never held p-1: it may not write its output
        assert not claims.complete_item(session, SPEC.use_case, "p-1", "run-b", _output())
        assert claims.complete_item(session, SPEC.use_case, "p-1", "run-a", _output())


def test_failures_back_off_then_park_after_max_attempts(app_db_url: str, tmp_path: Path) -> None:
    seed_postings(app_db_url, tmp_path)
    statuses = []
    for attempt in range(3):
        with session_scope(app_db_url) as session:
            assert claims.claim_items(session, SPEC.use_case, ["p-1"], f"run-{attempt}") == ["p-1"]
            statuses.append(claims.fail_item(session, SPEC.use_case, "p-1", f"run-{attempt}", "not JSON"))
        with session_scope(app_db_url) as session:
            assert "p-1" not in discovery.find_pending_work(session, SPEC)  # backing off or parked
            item = session.get(WorkItem, (SPEC.use_case, "p-1"))
            if item.status == "pending":
                assert item.next_attempt_at > utcnow()
                session.execute(update(WorkItem).values(next_attempt_at=utcnow() - timedelta(seconds=1)))
    assert statuses == ["pending", "pending", "failed"]
    with session_scope(app_db_url) as session:
        item = session.get(WorkItem, (SPEC.use_case, "p-1"))
        assert (item.status, item.attempts, item.last_error) == ("failed", 3, "not JSON")
        assert discovery.find_pending_work(session, SPEC) == ["p-2", "p-3"]


def test_released_claims_spend_no_attempt_and_expired_ones_are_freed(app_db_url: str, tmp_path: Path) -> None:
    seed_postings(app_db_url, tmp_path)
    with session_scope(app_db_url) as session:
        claims.claim_items(session, SPEC.use_case, KEYS, "run-a")
    with session_scope(app_db_url) as session:
        assert claims.release_items(session, SPEC.use_case, ["p-1"], "run-a") == 1
        assert session.get(WorkItem, (SPEC.use_case, "p-1")).attempts == 0
        session.execute(
            update(WorkItem)
            .where(WorkItem.subject_key == "p-2")
            .values(lease_expires_at=utcnow() - timedelta(1))
        )
    with session_scope(app_db_url) as session:
        assert claims.release_expired_claims(session) == 1
        assert discovery.find_pending_work(session, SPEC) == ["p-1", "p-2"]


def test_outputs_of_an_older_version_are_stale(app_db_url: str, tmp_path: Path) -> None:
    seed_postings(app_db_url, tmp_path)
    with session_scope(app_db_url) as session:
        claims.claim_items(session, SPEC.use_case, KEYS, "run-a")
        for key in KEYS:
            output = _output("2026-01-01.1")
            output["subject_hash"] = session.scalar(select(Posting.content_hash).where(Posting.key == key))
            claims.complete_item(session, SPEC.use_case, key, "run-a", output)
    with session_scope(app_db_url) as session:
        assert discovery.find_pending_work(session, SPEC) == KEYS
        old = discovery.WorkSpec(
            use_case="posting_summary", version="2026-01-01.1", upstream_versions={}, subjects=POSTINGS_TABLE
        )
        assert discovery.find_pending_work(session, old) == []


def test_forced_discovery_includes_parked_items_and_a_foreign_run_cannot_fail_or_renew_a_claim(
    app_db_url: str, tmp_path: Path
) -> None:
    seed_postings(app_db_url, tmp_path)
    with session_scope(app_db_url) as session:
        claims.claim_items(session, SPEC.use_case, ["p-1"], "run-a")
        assert claims.fail_item(session, SPEC.use_case, "p-1", "run-b", "boom") is None  # not run-b's claim
        assert claims.renew_claims(session, SPEC.use_case, ["p-1"], "run-b") == 0
        assert claims.renew_claims(session, SPEC.use_case, ["p-1"], "run-a") == 1
        assert (
            claims.fail_item(
                session,
                SPEC.use_case,
                "p-1",
                "run-a",
                "boom",
                policy=retry_policy.RetryPolicy(max_attempts=1),
            )
            == "failed"
        )
    with session_scope(app_db_url) as session:
        assert "p-1" not in discovery.find_pending_work(session, SPEC)
        assert "p-1" in discovery.find_pending_work(session, SPEC, include_current=True)
        assert claims.claim_items(session, SPEC.use_case, ["p-1"], "run-c", include_parked=True) == ["p-1"]


def test_the_change_marker_moves_when_a_retry_comes_due(sqlite_url: str, tmp_path: Path) -> None:
    import time

    seed_postings(sqlite_url, tmp_path)
    with session_scope(sqlite_url) as session:
        claims.claim_items(session, SPEC.use_case, ["p-1"], "run-a")
        claims.fail_item(session, SPEC.use_case, "p-1", "run-a", "boom")
        session.execute(update(WorkItem).values(next_attempt_at=utcnow() + timedelta(seconds=1)))
    with session_scope(sqlite_url) as session:
        before = discovery.change_marker(session, POSTINGS_TABLE)
        assert discovery.change_marker(session, POSTINGS_TABLE) == before
    time.sleep(1.2)
    with session_scope(sqlite_url) as session:
        assert discovery.change_marker(session, POSTINGS_TABLE) != before
        assert "p-1" in discovery.find_pending_work(session, SPEC)


@pytest.mark.postgres
def test_discovery_on_postgresql_leaves_the_planner_settings_of_the_transaction_as_they_were(
    postgres_url: str, tmp_path: Path
) -> None:
    """Discovery joins in the written order (`SET LOCAL join_collapse_limit`), then sets it back,
    so the claims and writes later in the same transaction are planned as usual."""
    seed_postings(postgres_url, tmp_path)
    with session_scope(postgres_url) as session:
        claims.claim_items(session, SPEC.use_case, ["p-1"], "run-a")
        output = _output()
        output["subject_hash"] = session.scalar(select(Posting.content_hash).where(Posting.key == "p-1"))
        claims.complete_item(session, SPEC.use_case, "p-1", "run-a", output)
    skills = discovery.WorkSpec(
        use_case="posting_skills",
        version="1",
        upstream_versions={SPEC.use_case: SPEC.version},
        subjects=POSTINGS_TABLE,
    )
    with session_scope(postgres_url) as session:
        before = session.scalar(text("SHOW join_collapse_limit"))
        assert discovery.find_pending_work(session, skills) == ["p-1"]  # only p-1 has its summary
        assert discovery.find_pending_work(session, skills, within=KEYS) == ["p-1"]
        assert session.scalar(text("SHOW join_collapse_limit")) == before


def test_a_discovery_condition_names_the_subject_in_any_kind(app_db_url: str, tmp_path: Path) -> None:
    """`discovery_where` may say `subject.<column>` for a posting or a subject of another kind;
    for postings the older `postings.<column>` still works."""
    seed_postings(app_db_url, tmp_path)
    with session_scope(app_db_url) as session:
        subjects.upsert_subjects(session, "autodo", {"a/1": {"text": "x"}, "b/2": {"text": "y"}})
    with session_scope(app_db_url) as session:
        for condition in ("subject.key <> 'p-2'", "postings.key <> 'p-2'"):
            spec = discovery.WorkSpec(
                SPEC.use_case, SPEC.version, {}, discovery_where=condition, subjects=POSTINGS_TABLE
            )
            assert discovery.find_pending_work(session, spec) == ["p-1", "p-3"], condition
        other = discovery.WorkSpec(
            "autodo_scope",
            "2026-11-24.1",
            {},
            discovery_where="subject.key LIKE 'a/%'",
            subjects=AUTODO.table,
        )
        assert discovery.find_pending_work(session, other) == ["a/1"]


def test_a_claim_taken_while_a_reader_asks_about_its_upstream_still_shows_work_coming(
    app_db_url: str, tmp_path: Path
) -> None:
    """A run waiting for its inputs asks whether its upstream is being made or still to make; a run
    claiming that upstream at that moment must not make it look done (the waiting run would end with
    its inputs on the way)."""
    seed_postings(app_db_url, tmp_path)
    engine = get_engine(app_db_url)
    claimed: list[str] = []

    def claim_in_another_run(*_: object) -> None:  # after the reader's first statement, once
        if not claimed:
            claimed.append("run-a")
            with session_scope(app_db_url) as other:
                assert claims.claim_items(other, SPEC.use_case, KEYS, "run-a") == KEYS

    event.listen(engine, "after_cursor_execute", claim_in_another_run)
    try:
        with session_scope(app_db_url) as session:
            _, coming = discovery.upstream_work(session, [SPEC])
    finally:
        event.remove(engine, "after_cursor_execute", claim_in_another_run)
    assert claimed  # the claim did land between the reader's look and its end
    assert coming  # unclaimed when asked, or held: either way on the way
    with session_scope(app_db_url) as session:  # and asked again: being made
        assert discovery.upstream_work(session, [SPEC]) == (True, True)
