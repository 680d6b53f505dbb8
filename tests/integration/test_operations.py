"""Operations: parked items and retries, circuit-breaker pauses, and shadow discovery (writes nothing)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from appdb import claims, discovery, pauses, retry_policy
from appdb.database import session_scope
from appdb.models import Base, UseCasePause, WorkItem, utcnow
from pipeline_defs.cli.main import main
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from tests.support.postings import POSTINGS, seed_postings

SUMMARY = discovery.WorkSpec(
    use_case="posting_summary", version="2026-11-22.1", upstream_versions={}, subjects=POSTINGS_TABLE
)


def park(url: str, use_case: str, key: str, error: str) -> None:
    """Fail the item once with max_attempts=1, which parks it at once."""
    with session_scope(url) as session:
        assert claims.claim_items(session, use_case, [key], "run-park") == [key]
        assert (
            claims.fail_item(
                session, use_case, key, "run-park", error, policy=retry_policy.RetryPolicy(max_attempts=1)
            )
            == "failed"
        )


@pytest.fixture
def cli_env(app_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the CLI at this test's database and data directory (no Ollama)."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.delenv("PIPELINE_BATCH_SIZE", raising=False)
    return app_db_url


# --- failures and retry ------------------------------------------------------------------------


def test_parked_items_are_listed_with_their_last_error_and_leave_discovery(
    app_db_url: str, tmp_path: Path
) -> None:
    seed_postings(app_db_url, tmp_path)
    park(app_db_url, "posting_summary", "p-2", "the response is not valid JSON")
    park(app_db_url, "posting_seniority", "p-3", "the response breaks the output schema")
    with session_scope(app_db_url) as session:
        parked = claims.list_failures(session)
        only_summary = claims.list_failures(session, "posting_summary")
        pending = discovery.find_pending_work(session, SUMMARY)
    assert [(item.use_case, item.subject_key) for item in parked] == [
        ("posting_summary", "p-2"),
        ("posting_seniority", "p-3"),
    ]
    [nurse] = only_summary
    assert (nurse.attempts, nurse.last_error) == (
        1,
        "the response is not valid JSON",
    )
    assert pending == ["p-1", "p-3"]


def test_requeue_by_posting_by_use_case_and_all(app_db_url: str, tmp_path: Path) -> None:
    seed_postings(app_db_url, tmp_path)
    for key in ("p-1", "p-2"):
        park(app_db_url, "posting_summary", key, f"bad output for {key}")
    park(app_db_url, "posting_seniority", "p-3", "bad level")
    with session_scope(app_db_url) as session:
        assert claims.requeue_failed(session, subject_keys=["p-1", "no-such-posting"]) == 1
        assert discovery.find_pending_work(session, SUMMARY) == ["p-1", "p-3"]
        item = session.get(WorkItem, ("posting_summary", "p-1"))
        assert (item.status, item.attempts, item.next_attempt_at) == ("pending", 0, None)
        assert item.last_error == "bad output for p-1"  # kept for history
    with session_scope(app_db_url) as session:
        assert claims.requeue_failed(session, use_case="posting_seniority") == 1
        assert [item.subject_key for item in claims.list_failures(session)] == ["p-2"]
        assert claims.requeue_failed(session, subject_keys=[]) == 0
        assert claims.requeue_failed(session) == 1
        assert claims.list_failures(session) == []
        assert discovery.find_pending_work(session, SUMMARY) == ["p-1", "p-2", "p-3"]


def test_cli_failures_and_retry(cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed_postings(cli_env, tmp_path)
    assert main(["failures"]) == 0
    assert "no parked items" in capsys.readouterr().out

    park(cli_env, "posting_summary", "p-1", "the response breaks the output schema: " + "x" * 300)
    park(cli_env, "posting_summary", "p-2", "the model returned an empty response")
    assert main(["failures", "--use-case", "posting_summary"]) == 0
    out = capsys.readouterr().out
    assert "Data Engineer" in out and "the model returned an empty response" in out
    assert "x" * 200 not in out and "…" in out  # a long error is cut, not dumped
    assert "2 parked items" in out
    assert main(["failures", "--use-case", "posting_seniority"]) == 0
    assert "no parked items for posting_seniority" in capsys.readouterr().out

    with pytest.raises(SystemExit) as usage:
        main(["retry"])  # one of --all, --use-case, --posting is required
    assert usage.value.code == 2
    capsys.readouterr()
    assert main(["retry", "--posting", "p-2"]) == 0
    assert "re-queued 1 parked items" in capsys.readouterr().out
    assert main(["retry", "--posting", "p-2"]) == 0
    assert "no parked items matched" in capsys.readouterr().out
    assert main(["retry", "--all"]) == 0
    assert "re-queued 1 parked items" in capsys.readouterr().out
    with session_scope(cli_env) as session:
        assert claims.list_failures(session) == []


# --- pauses ------------------------------------------------------------------------------------


def _end_pauses_now(url: str) -> None:
    """Let the pauses run out (as if their resume time had passed)."""
    with session_scope(url) as session:
        session.execute(update(UseCasePause).values(resume_at=utcnow() - timedelta(seconds=1)))


def _pause_seconds(url: str, use_case: str) -> float:
    with session_scope(url) as session:
        pause = session.get(UseCasePause, use_case)
        return (pause.resume_at - pause.paused_at).total_seconds()


def test_a_pause_doubles_when_the_use_case_trips_again_after_resuming(app_db_url: str) -> None:
    with session_scope(app_db_url) as session:
        resume_at = pauses.pause_use_cases(session, ["posting_summary", "posting_seniority"], "Ollama down")
        active = pauses.active_pauses(session)
    assert sorted(active) == ["posting_seniority", "posting_summary"]
    assert active["posting_summary"].reason == "Ollama down"
    assert active["posting_summary"].resume_at == resume_at
    assert _pause_seconds(app_db_url, "posting_summary") == 300

    with session_scope(app_db_url) as session:  # a concurrent run hits the same outage: no doubling
        assert pauses.pause_use_cases(session, ["posting_summary"], "still down") == resume_at
        assert pauses.active_pauses(session)["posting_summary"].consecutive_trips == 1

    durations = []
    for _ in range(4):
        _end_pauses_now(app_db_url)
        with session_scope(app_db_url) as session:
            assert pauses.active_pauses(session) == {}
            pauses.pause_use_cases(
                session,
                ["posting_summary"],
                "down again",
                policy=retry_policy.RetryPolicy(pause_max_seconds=2000),
            )
        durations.append(_pause_seconds(app_db_url, "posting_summary"))
    assert durations == [600, 1200, 2000, 2000]  # doubled, then capped

    with session_scope(app_db_url) as session:
        assert pauses.clear_pause(session, "posting_summary")  # a generation succeeded
        assert not pauses.clear_pause(session, "posting_summary")
        pauses.pause_use_cases(session, ["posting_summary"], "down once more")
    assert _pause_seconds(app_db_url, "posting_summary") == 300


def test_manual_resume_ends_active_pauses(app_db_url: str) -> None:
    with session_scope(app_db_url) as session:
        pauses.pause_use_cases(session, ["posting_summary", "posting_seniority"], "model missing")
    with session_scope(app_db_url) as session:
        assert pauses.active_pauses(session, now=utcnow() + timedelta(hours=2)) == {}
        assert pauses.resume_use_cases(session, ["posting_summary"]) == 1
        assert list(pauses.active_pauses(session)) == ["posting_seniority"]
        assert pauses.resume_use_cases(session) == 1
        assert pauses.active_pauses(session) == {}
        assert pauses.resume_use_cases(session) == 0


def test_cli_pauses_status_and_resume(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_postings(cli_env, tmp_path)
    assert main(["pauses"]) == 0
    assert "no use case is paused" in capsys.readouterr().out
    with session_scope(cli_env) as session:
        pauses.pause_use_cases(session, ["posting_summary"], "cannot reach Ollama at http://gpu-box:11434")
    assert main(["pauses"]) == 0
    out = capsys.readouterr().out
    assert "posting_summary: paused until" in out and "cannot reach Ollama at http://gpu-box:11434" in out
    assert main(["status"]) == 0
    assert "posting_summary: paused until" in capsys.readouterr().out
    assert main(["resume", "--use-case", "posting_summary"]) == 0
    assert "resumed posting_summary" in capsys.readouterr().out
    assert main(["resume"]) == 0
    assert "no use case was paused" in capsys.readouterr().out
    assert main(["status"]) == 0
    assert "paused until" not in capsys.readouterr().out


# --- shadow discovery --------------------------------------------------------------------------


def _snapshot(url: str) -> tuple[dict[str, int], list[tuple], list[tuple]]:
    """Row counts of every table, and the full work state and pauses: equal snapshots, nothing written."""
    with session_scope(url) as session:
        counts = {
            table.name: session.scalar(select(func.count()).select_from(table))
            for table in Base.metadata.sorted_tables
        }
        items = sorted(tuple(row) for row in session.execute(select(WorkItem.__table__)))
        pauses = sorted(tuple(row) for row in session.execute(select(UseCasePause.__table__)))
    return counts, items, pauses


def test_shadow_discovery_shows_the_work_and_writes_nothing(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_postings(cli_env, tmp_path)
    park(cli_env, "posting_summary", "p-2", "bad output")
    with session_scope(cli_env) as session:
        claims.claim_items(
            session,
            "posting_summary",
            ["p-3"],
            "run-elsewhere",
            policy=retry_policy.RetryPolicy(lease_seconds=-60),
        )  # expired
        pauses.pause_use_cases(session, ["posting_summary"], "Ollama down")
    before = _snapshot(cli_env)

    assert main(["discover", "--shadow", "--use-case", "posting_summary"]) == 0
    out = capsys.readouterr().out
    assert "nothing is claimed or written" in out
    assert "posting_summary (version" in out and "2 postings would be processed now" in out
    assert "p-1, p-3" in out
    assert "paused until" in out and "Ollama down" in out
    assert main(["discover", "--shadow"]) == 0  # every declared use case
    capsys.readouterr()
    assert _snapshot(cli_env) == before


def test_shadow_discovery_as_json_lists_every_key(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{**POSTINGS[0], "key": f"k-{index:02d}"} for index in range(23)]
    seed_postings(cli_env, tmp_path, rows)
    assert main(["discover", "--shadow", "--use-case", "posting_summary"]) == 0
    assert "k-19 ... and 3 more" in capsys.readouterr().out
    assert main(["discover", "--shadow", "--use-case", "posting_summary", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    summary = result["use_cases"]["posting_summary"]
    assert summary["count"] == 23 and summary["subject_keys"][-1] == "k-22"
    assert summary["paused_until"] is None


def test_shadow_discovery_compares_with_an_expected_list(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_postings(cli_env, tmp_path)
    before = _snapshot(cli_env)
    differing = tmp_path / "expected.csv"
    differing.write_text(
        "use_case,subject_key\nposting_summary,p-1\nposting_summary,p-2\nposting_summary,p-9\n"
    )
    assert main(["discover", "--shadow", "--use-case", "posting_summary", "--expect", str(differing)]) == 1
    out = capsys.readouterr().out
    assert "3 expected, 3 discovered: 1 missing, 1 unexpected" in out
    assert "missing (expected, not discovered): p-9" in out
    assert "unexpected (discovered, not expected): p-3" in out

    same = tmp_path / "expected.jsonl"
    same.write_text(
        "".join(
            json.dumps({"use_case": "posting_summary", "subject_key": key}) + "\n"
            for key in ("p-3", "p-1", "p-2")
        )
    )
    assert main(["discover", "--shadow", "--use-case", "posting_summary", "--expect", str(same)]) == 0
    out = capsys.readouterr().out
    assert "posting_summary: matches (3 postings)" in out and "discovery matches the expected work" in out

    assert (
        main(["discover", "--shadow", "--use-case", "posting_summary", "--expect", str(differing), "--json"])
        == 1
    )
    compared = json.loads(capsys.readouterr().out)["expect"]
    assert compared["matches"] is False
    assert compared["use_cases"]["posting_summary"]["missing"] == ["p-9"]
    assert _snapshot(cli_env) == before


def test_shadow_discovery_reports_bad_input_clearly(
    cli_env: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_postings(cli_env, tmp_path)
    assert main(["discover"]) == 2
    assert "needs --shadow" in capsys.readouterr().err
    assert main(["discover", "--shadow", "--use-case", "no_such_use_case"]) == 2
    assert "no use case 'no_such_use_case'" in capsys.readouterr().err
    broken = tmp_path / "expected.jsonl"
    broken.write_text(
        '{"use_case": "posting_summary", "subject_key": "p-1"}\n{"use_case": "posting_summary"}\n'
    )
    assert main(["discover", "--shadow", "--expect", str(broken)]) == 2
    assert f"{broken}:2: needs both use_case and subject_key" in capsys.readouterr().err
    headless = tmp_path / "expected.csv"
    headless.write_text("posting_summary,p-1\n")
    assert main(["discover", "--shadow", "--expect", str(headless)]) == 2
    assert "header must name use_case,subject_key" in capsys.readouterr().err


def test_shadow_discovery_does_not_create_a_missing_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "app.db"
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", f"sqlite:///{missing}")
    monkeypatch.setenv("PIPELINE_LLM_BACKEND", "embedded")
    assert main(["discover", "--shadow"]) == 2
    assert "no application database" in capsys.readouterr().err
    assert not missing.exists()
