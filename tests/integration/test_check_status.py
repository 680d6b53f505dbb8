"""What the asset page says of a check: a check that passed shows as passed, also when two runs of the
asset overlapped (the UI said "Not evaluated": Dagster showed the check of the run *started* last, which
had not made the asset's latest materialization)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance
from dagster._core.loader import LoadingContextForTest
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecord

from assets import batch_run
from assets.batch_run import ITEMS_OK_CHECK
from pipeline_defs.cli.in_process_runs import load_reference_data
from pipeline_defs.definitions import build_definitions
from plugins.postings.plugin import PLUGIN as POSTINGS_PLUGIN
from tests.support.gym_fakes import GYM_POSTINGS, GymFake, gym_settings
from tests.support.postings import run_use_case, seed_postings

NOT_EVALUATED = "Not evaluated"


def shown_as(instance: DagsterInstance, asset: str, check: str) -> str:
    """What the asset page shows for a check: its latest execution's status when that execution evaluated
    the asset's latest materialization, else "Not evaluated" (Dagster's `executionForLatestMaterialization`,
    which the asset page and its checks tab read)."""
    context = LoadingContextForTest(instance)

    async def status() -> str:
        record = await AssetCheckExecutionRecord.gen(context, AssetCheckKey(AssetKey(asset), check))
        if record is None or not await record.targets_latest_materialization(context):
            return NOT_EVALUATED
        return (await record.resolve_status(context)).value

    return asyncio.run(status())


def test_a_run_started_first_and_finished_last_leaves_its_checks_shown(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = [posting["key"] for posting in GYM_POSTINGS]
    seed_postings(sqlite_url, tmp_path, GYM_POSTINGS)
    defs = build_definitions(gym_settings(sqlite_url), llm=GymFake())
    process_held = batch_run._process_held
    with DagsterInstance.ephemeral() as instance:
        run_use_case(defs, instance, keys, use_case="posting_skills")
        assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
        overlapped: list[str] = []

        def another_run_first(run: Any, held: list[str]) -> Iterator[Any]:
            """Run A has started (its checks are planned); run B does all its work before A stores any."""
            if run.use_case.name == "skill_entities" and not overlapped:
                overlapped.append(run.run_id)
                assert run_use_case(defs, instance, keys[1:], use_case="skill_entities").success
            yield from process_held(run, held)

        monkeypatch.setattr(batch_run, "_process_held", another_run_first)
        assert run_use_case(defs, instance, keys[:1], use_case="skill_entities").success
        assert overlapped
        checks = [ITEMS_OK_CHECK, "resolution_coverage"]
        assert {check: shown_as(instance, "skill_entities", check) for check in checks} == dict.fromkeys(
            checks, "SUCCEEDED"
        )
