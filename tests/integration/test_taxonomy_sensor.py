"""The taxonomy sensor asks for one load per version of the file (its `run_key`) and none while a load
runs: a slow first load (ESCO's label vectors) used to pile up a run a minute, 4 for one demo taxonomy.
A failed load is tried again after a wait, a few times: a daemon killed mid-load must not leave the
taxonomy unloaded for good."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, SensorResult, SkipReason, build_sensor_context
from dagster._core.storage.tags import RUN_KEY_TAG
from dagster._core.test_utils import create_run_for_test

from appdb.database import migrate, session_scope
from plugins.postings import taxonomy_sensor
from plugins.postings.store.taxonomy import load_taxonomy
from plugins.postings.taxonomy_resource import TaxonomyResource
from plugins.postings.taxonomy_sensor import skills_taxonomy_job, skills_taxonomy_sensor
from resources.app_database import AppDatabase
from tests.support.taxonomy_files import URI, write_taxonomy


def tick(instance: DagsterInstance, url: str, path: Path, cursor: str | None) -> SensorResult | SkipReason:
    resources = {"app_db": AppDatabase(url=url), "taxonomy": TaxonomyResource(path=str(path))}
    with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as context:
        return skills_taxonomy_sensor(context)


def test_one_load_per_taxonomy_version_and_none_while_one_runs(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate(sqlite_url)
    path = write_taxonomy(tmp_path / "skills.csv", [[URI + "python", "Python", "", "skill", ""]])
    with DagsterInstance.ephemeral() as instance:
        first = tick(instance, sqlite_url, path, None)
        assert isinstance(first, SensorResult) and len(first.run_requests) == 1
        [request] = first.run_requests
        assert request.run_key and request.run_key.startswith("taxonomy-")

        # the daemon launched it; it is still loading (nothing in the tables yet): no second request
        load = create_run_for_test(
            instance,
            job_name=skills_taxonomy_job.name,
            tags={RUN_KEY_TAG: request.run_key, **request.tags},
            status=DagsterRunStatus.STARTED,
        )
        waiting = tick(instance, sqlite_url, path, first.cursor)
        assert isinstance(waiting, SkipReason) and "under way" in waiting.skip_message

        # it failed (a bad file, or the daemon killed mid-load): tried again at the next tick, under a
        # new run key; a second failure waits a minute; a version is tried at most three times
        instance.report_run_failed(instance.get_run_by_id(load.run_id))
        retry = tick(instance, sqlite_url, path, first.cursor)
        assert isinstance(retry, SensorResult) and len(retry.run_requests) == 1
        assert retry.run_requests[0].run_key != request.run_key
        second = create_run_for_test(
            instance,
            job_name=skills_taxonomy_job.name,
            tags=dict(request.tags),
            status=DagsterRunStatus.STARTED,
        )
        instance.report_run_failed(instance.get_run_by_id(second.run_id))
        again = tick(instance, sqlite_url, path, first.cursor)
        assert isinstance(again, SkipReason) and "trying again in" in again.skip_message
        now = time.time()
        monkeypatch.setattr(taxonomy_sensor.time, "time", lambda: now + 61)
        third = tick(instance, sqlite_url, path, first.cursor)
        assert isinstance(third, SensorResult) and len(third.run_requests) == 1
        failed = create_run_for_test(
            instance,
            job_name=skills_taxonomy_job.name,
            tags=dict(request.tags),
            status=DagsterRunStatus.STARTED,
        )
        instance.report_run_failed(instance.get_run_by_id(failed.run_id))
        monkeypatch.setattr(taxonomy_sensor.time, "time", lambda: now + 3600)
        given_up = tick(instance, sqlite_url, path, first.cursor)
        assert isinstance(given_up, SensorResult) and not given_up.run_requests
        assert "failed 3 times" in given_up.skip_reason.skip_message

        # a changed file is a new version: one load of it
        write_taxonomy(path, [[URI + "sql", "SQL", "", "skill", ""]])
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
        changed = tick(instance, sqlite_url, path, first.cursor)
        assert isinstance(changed, SensorResult) and len(changed.run_requests) == 1
        assert changed.run_requests[0].run_key != request.run_key

        # loaded and unchanged: nothing to do
        with session_scope(sqlite_url) as session:
            load_taxonomy(session, path)
        done = tick(instance, sqlite_url, path, changed.cursor)
        assert isinstance(done, SkipReason) and "unchanged and loaded" in done.skip_message


def test_a_load_killed_with_its_host_is_failed_and_tried_again(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load whose process died before its first beat stays STARTED for ever under Dagster's default
    launcher: waiting for it left the taxonomy unloaded and skill resolution stuck after a host loss."""
    migrate(sqlite_url)
    path = write_taxonomy(tmp_path / "skills.csv", [[URI + "python", "Python", "", "skill", ""]])
    with DagsterInstance.ephemeral() as instance:
        first = tick(instance, sqlite_url, path, None)
        [request] = first.run_requests
        killed = create_run_for_test(
            instance,
            job_name=skills_taxonomy_job.name,
            tags={RUN_KEY_TAG: request.run_key, **request.tags},
            status=DagsterRunStatus.STARTED,
        )
        young = tick(instance, sqlite_url, path, first.cursor)  # just started: it may still be loading
        assert isinstance(young, SkipReason) and "under way" in young.skip_message

        now = time.time()
        monkeypatch.setattr(taxonomy_sensor.time, "time", lambda: now + 120)  # never beat, 2 min on
        retry = tick(instance, sqlite_url, path, first.cursor)
        assert isinstance(retry, SensorResult) and len(retry.run_requests) == 1
        assert instance.get_run_by_id(killed.run_id).status == DagsterRunStatus.FAILURE
