"""Skills end to end with a fake LLM: one run per model group loads the model once; skills are
grounded; the script use case resolves them to concepts without a model; postings can be
found by concept; a changed taxonomy makes resolutions stale."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from dagster import AssetKey, DagsterInstance
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
from sqlalchemy import select

from appdb import discovery
from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput, WorkItem
from assets.factory import build_work_groups
from domain.language.llm_types import Generation
from pipeline_defs.cli.in_process_runs import load_reference_data, run_pending
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.postings.plugin import PLUGIN as POSTINGS_PLUGIN
from plugins.postings.store.tables import PostingSkillConcept
from plugins.postings.use_cases.posting_skills import POSTING_SKILLS_LLM, ground_skill_mentions
from resources.app_database import AppDatabase
from resources.llm import LLMResource
from tests.support.postings import POSTINGS, seed_postings

PYTHON_URI = "https://posting-enrichment.example/skill/python"

# What the fake model "extracts" per posting title: one mention is not in the posting text.
FAKE_SKILLS = {
    "Data Engineer": [("Python and SQL", "knowledge"), ("dbt", "knowledge"), ("Kubernetes", "knowledge")],
    "Registered Nurse": [("administer medication", "skill"), ("keep accurate records", "skill")],
    "Electrician": [("Install cabling", "skill"), ("test them safely", "skill")],
}


class FakeModel(LLMResource):
    """Answers summary and skills prompts from the last posting in the prompt; counts model loads."""

    loads: ClassVar[list[str]] = []

    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        FakeModel.loads.append(model)
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        title = prompt.rsplit("Title: ", 1)[1].split("\n", 1)[0]
        if prompt.rstrip().endswith("Answer:"):
            mentions = FAKE_SKILLS.get(title, [])
            text = json.dumps(
                {
                    "knowledge": [m for m, kind in mentions if kind == "knowledge"],
                    "skills": [m for m, kind in mentions if kind == "skill"],
                }
            )
        else:
            text = json.dumps({"summary": f"A {title} role, summarized for the test."})
        return Generation(text=text, prompt_tokens=100, completion_tokens=20, latency_ms=1.0)


@pytest.fixture
def two_runs_at_once_instance(tmp_path: Path) -> Iterator[DagsterInstance]:
    """A Dagster instance on SQLite files, for tests that run two in-process runs at once (a run in a
    thread, another in the test). The ephemeral instance keeps its runs in in-memory SQLite in shared-cache
    mode, where a write meeting another thread's write fails at once with "database table is locked:
    runs" (SQLITE_LOCKED gets no busy wait): seen under load (issue 64); file SQLite waits its turn."""
    noop_logs = {"module": "dagster._core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"}
    home = tmp_path / "dagster"
    home.mkdir()
    with DagsterInstance.local_temp(str(home), overrides={"compute_logs": noop_logs}) as instance:
        yield instance


@pytest.fixture
def pipeline_of_concurrent_runs(app_db_url: str, tmp_path: Path, two_runs_at_once_instance: DagsterInstance):  # noqa: ANN201
    return _pipeline(app_db_url, tmp_path, two_runs_at_once_instance)


@pytest.fixture
def pipeline(app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance):  # noqa: ANN201
    return _pipeline(app_db_url, tmp_path, dagster_instance)


def _pipeline(app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance):  # noqa: ANN202
    FakeModel.loads.clear()
    seed_postings(app_db_url, tmp_path)
    # the fake model extracts skills by title: the prompt style (the CPU tagger has its own tests)
    settings = Settings.from_env().changed(database_url=app_db_url, skills_style="llm")
    built = build_use_cases(settings)
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups, llm=FakeModel())
    return defs, groups, dagster_instance, app_db_url


def test_one_run_per_model_does_summary_and_skills_then_entities_need_no_model(pipeline) -> None:
    defs, groups, instance, url = pipeline
    assert [group.name for group in groups] == ["gemma3_270m", "skill_entities"]
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)

    reports = run_pending(defs, groups, instance, AppDatabase(url=url), source="test")

    assert [len(report.runs) for report in reports] == [1, 1]
    assert FakeModel.loads == ["gemma3:270m"]  # one load for both LLM use cases; none for the script
    with session_scope(url) as session:
        outputs = {(o.use_case, o.subject_key): o for o in session.scalars(select(UseCaseOutput))}
        runs = {o.use_case: o.run_id for o in outputs.values()}
        by_concept = session.scalars(
            select(PostingSkillConcept.posting_key).where(PostingSkillConcept.concept_uri == PYTHON_URI)
        ).all()
        script_calls = session.scalars(select(Interaction).where(Interaction.backend == "script")).all()
    keys = [posting["key"] for posting in POSTINGS]
    for use_case in ("posting_summary", "posting_skills", "skill_entities"):
        assert {key for (name, key) in outputs if name == use_case} == set(keys)
    assert runs["posting_summary"] == runs["posting_skills"] != runs["skill_entities"]
    # In the model's run the skills go first: resolution may start on them while summaries are written.
    written = {
        use_case: max(o.updated_at for (name, _), o in outputs.items() if name == use_case)
        for use_case in ("posting_skills", "posting_summary")
    }
    first_summary = min(o.updated_at for (name, _), o in outputs.items() if name == "posting_summary")
    assert written["posting_skills"] <= first_summary

    skills = outputs[("posting_skills", "p-1")].value
    assert [s["mention"] for s in skills["skills"]] == ["Python and SQL", "dbt"]
    assert skills["ungrounded"] == ["Kubernetes"]  # not in p-1's text: kept out, counted
    assert skills["skills"][0]["evidence"].startswith("Build Python and SQL pipelines")

    entities = outputs[("skill_entities", "p-1")].value["entities"]
    resolved = {e["mention"]: (e["concept_label"], e["stage"]) for e in entities}
    assert resolved["Python"] == ("Python", "exact") and resolved["SQL"] == ("SQL", "exact")
    assert all(e["source_mention"] == "Python and SQL" for e in entities if e["mention"] in ("Python", "SQL"))
    assert by_concept == ["p-1"]  # postings are queryable by concept
    assert len(script_calls) == 3 and all(c.model == "script:resolve_skill_mentions" for c in script_calls)


def test_a_changed_taxonomy_makes_resolutions_stale(pipeline, tmp_path: Path) -> None:
    defs, groups, instance, url = pipeline
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
    run_pending(defs, groups, instance, AppDatabase(url=url), source="test")
    entities = groups[1].members[0]
    with session_scope(url) as session:
        assert discovery.find_pending_work(session, entities.spec) == []

    assert load_reference_data(
        defs, instance, POSTINGS_PLUGIN.reference_jobs
    )  # same file: nothing becomes stale
    with session_scope(url) as session:
        assert discovery.find_pending_work(session, entities.spec) == []

    from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH, load_taxonomy

    changed = tmp_path / "taxonomy.csv"
    changed.write_text(DEMO_TAXONOMY_PATH.read_text().replace("Python,", "Python (computer programming),", 1))
    with session_scope(url) as session:
        assert load_taxonomy(session, changed).changed
    with session_scope(url) as session:
        assert sorted(discovery.find_pending_work(session, entities.spec)) == ["p-1", "p-2", "p-3"]


def test_a_database_error_in_a_resolution_write_leaves_no_posting_half_written(
    pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script's outputs share transactions: an error while writing one posting's concepts takes back
    the whole group (output, concepts, interaction, materialization), gives its claims back, and
    the next run does every posting."""
    import plugins.postings.use_cases.skill_entities as skill_entities_module
    from assets import write_groups

    defs, groups, instance, url = pipeline
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
    original = skill_entities_module.replace_posting_skill_concepts

    def fails_on_p3(session: Any, entities_by_posting: dict[str, list[dict[str, Any]]]) -> None:
        if "p-3" in entities_by_posting:
            raise RuntimeError("disk full")
        original(session, entities_by_posting)

    monkeypatch.setattr(skill_entities_module, "replace_posting_skill_concepts", fails_on_p3)
    # one group for all three, however slow the machine (a group also closes after a wait)
    monkeypatch.setattr(write_groups, "SCRIPT_WRITE_WAIT_SECONDS", 600.0)
    first = run_pending(defs, groups, instance, AppDatabase(url=url), source="test")
    assert len(first[1].failed_runs) == 1

    with session_scope(url) as session:
        resolved = session.scalars(
            select(UseCaseOutput.subject_key).where(UseCaseOutput.use_case == "skill_entities")
        ).all()
        concept_rows = session.scalars(select(PostingSkillConcept)).all()
        script_calls = session.scalars(select(Interaction).where(Interaction.backend == "script")).all()
        items = dict(
            session.execute(
                select(WorkItem.subject_key, WorkItem.status).where(WorkItem.use_case == "skill_entities")
            ).all()
        )
    assert resolved == [] and concept_rows == [] and script_calls == []  # p-1 and p-2 not kept half-way
    assert set(items.values()) == {"pending"}  # given back now, not after the lease
    partitions = instance.get_materialized_partitions(AssetKey("skill_entities"))
    assert partitions == set()  # Dagster was told of no output that was rolled back

    monkeypatch.setattr(skill_entities_module, "replace_posting_skill_concepts", original)
    again = run_pending(defs, groups, instance, AppDatabase(url=url), source="test")
    assert [len(report.runs) for report in again] == [0, 1] and not again[1].failed_runs
    with session_scope(url) as session:
        resolved = session.scalars(
            select(UseCaseOutput.subject_key).where(UseCaseOutput.use_case == "skill_entities")
        ).all()
    assert sorted(resolved) == ["p-1", "p-2", "p-3"]
    assert instance.get_materialized_partitions(AssetKey("skill_entities")) == {"p-1", "p-2", "p-3"}


def test_grounding_drops_and_counts_mentions_not_in_the_posting() -> None:
    inputs = {"title": "Cook", "description": "Prepare  MEALS for 200 guests.\nKeep the kitchen clean."}
    raw = {
        "knowledge": ["French cuisine"],  # not in the posting
        "skills": [
            "prepare meals",
            "Prepare meals",  # duplicate modulo case
            "keep the kitchen clean.",  # trailing punctuation trimmed
        ],
    }
    POSTING_SKILLS_LLM.validate_generation(raw)
    output = ground_skill_mentions(raw, inputs)
    # each mention as the posting writes it, at its offsets (on word boundaries), once
    assert [(s["mention"], s["kind"], s["start"]) for s in output["skills"]] == [
        ("Prepare  MEALS", "skill", 0),
        ("Keep the kitchen clean", "skill", 31),
    ]
    assert output["skills"][1]["evidence"] == "Keep the kitchen clean."
    assert output["ungrounded"] == ["French cuisine"]
    POSTING_SKILLS_LLM.validate_output(output)
    with pytest.raises(ValueError, match="none of the 1 mentions"):
        ground_skill_mentions({"knowledge": [], "skills": ["juggling"]}, inputs)


def test_a_run_over_a_range_tags_both_use_cases_with_the_same_run(pipeline) -> None:
    """Backfills of the group job: one run covers the partition range for every member."""
    defs, groups, instance, url = pipeline
    instance.add_dynamic_partitions("postings", [p["key"] for p in POSTINGS])
    job = defs.resolve_job_def(groups[0].job.name)
    result = job.execute_in_process(
        instance=instance,
        tags={ASSET_PARTITION_RANGE_START_TAG: "p-1", ASSET_PARTITION_RANGE_END_TAG: "p-2"},
        raise_on_error=False,
    )
    assert result.success
    materialized = {
        (e.asset_key.to_user_string(), e.partition) for e in result.get_asset_materialization_events()
    }
    assert materialized == {
        (name, key) for name in ("posting_summary", "posting_skills") for key in ("p-1", "p-2")
    }
    assert FakeModel.loads == ["gemma3:270m"]


def test_each_resolution_records_the_skills_output_it_read_so_the_ui_shows_it_fresh(pipeline) -> None:
    """Provenance is read per run in a few queries: each posting must still get its own input's
    version, or Dagster would show fresh partitions as stale (or stale ones as fresh)."""
    from dagster import AssetKey, DagsterEventType
    from dagster._core.definitions.data_version import (
        DATA_VERSION_TAG,
        StaleStatus,
        get_input_data_version_tag,
        get_input_event_pointer_tag,
    )
    from dagster._utils.test.data_versions import get_stale_status_resolver

    defs, groups, instance, url = pipeline
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
    run_pending(defs, groups, instance, AppDatabase(url=url), source="test")

    skills, entities = AssetKey("posting_skills"), AssetKey("skill_entities")
    kind = DagsterEventType.ASSET_MATERIALIZATION
    skills_events = instance.get_latest_storage_id_by_partition(skills, kind)
    assert len(skills_events) == 3 and len(set(skills_events.values())) == 3
    resolver = get_stale_status_resolver(instance, list(defs.resolve_asset_graph().assets_defs))
    for key, skills_event in skills_events.items():
        record = instance.get_latest_data_version_record(skills, False, key)
        entity_record = instance.get_latest_data_version_record(entities, False, key)
        tags = entity_record.event_log_entry.tags
        assert tags[get_input_event_pointer_tag(skills)] == str(skills_event)
        assert tags[get_input_data_version_tag(skills)] == record.event_log_entry.tags[DATA_VERSION_TAG]
        assert resolver.get_status(entities, key) == StaleStatus.FRESH


def test_resolution_waits_for_a_batch_while_upstream_still_writes_skills(pipeline, tmp_path: Path) -> None:
    """A few postings with skills while the skills runs go on: no run of their own yet (each run is a
    process loading the resolver); a full batch starts one, and so does the last of the skills being
    written (though the upstream run still calls the model for its summaries) or that run's end. Once
    every posting left is held by a running run, what is ready starts whenever no resolution run goes."""
    from dagster import DagsterRunStatus, SensorResult, SkipReason, build_sensor_context
    from dagster._core.test_utils import create_run_for_test

    from appdb import claims
    from sensors.discovery_sensor import build_discovery_sensor, feeding_jobs, feeding_specs

    defs, groups, instance, url = pipeline
    llm_group, entities = groups
    assert feeding_jobs(entities, groups) == [llm_group.job.name] and feeding_jobs(llm_group, groups) == []
    assert [spec.use_case for spec in feeding_specs(entities)] == ["posting_skills"]
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
    run_pending(defs, [llm_group], instance, AppDatabase(url=url), source="test")  # skills for 3 postings
    seed_postings(url, tmp_path, [{**POSTINGS[0], "key": "p-4"}])  # its skills still to write
    upstream = create_run_for_test(instance, job_name=llm_group.job.name, status=DagsterRunStatus.STARTED)

    def tick(group=entities):  # noqa: ANN001, ANN202
        context = build_sensor_context(instance=instance, resources={"app_db": AppDatabase(url=url)})
        return build_discovery_sensor(group, groups=groups)(context)

    waiting = tick()
    assert isinstance(waiting, SkipReason) and "3 postings ready; 3 of them, fewer than a batch" in (
        waiting.skip_message
    )
    # With batches of two, the full batch starts now and the odd posting waits for more.
    in_twos = replace(entities, batch_size=2)
    one_full = tick(in_twos)
    assert isinstance(one_full, SensorResult) and len(one_full.run_requests) == 1
    [request] = one_full.run_requests
    start, end = request.tags[ASSET_PARTITION_RANGE_START_TAG], request.tags[ASSET_PARTITION_RANGE_END_TAG]
    assert start != end  # a range of two postings

    # p-4's skills held by the running run, the last still to come, and a resolution run still goes:
    # the ready postings wait for that run.
    with session_scope(url) as session:
        assert claims.claim_items(session, "posting_skills", ["p-4"], upstream.run_id) == ["p-4"]
    own = create_run_for_test(instance, job_name=entities.job.name, status=DagsterRunStatus.STARTED)
    assert isinstance(tick(), SkipReason)
    # With no resolution run going they start now, so the last run holds only what is still coming.
    instance.report_run_canceled(instance.get_run_by_id(own.run_id))
    under_way = tick()
    assert isinstance(under_way, SensorResult) and len(under_way.run_requests) == 1
    # Another posting not yet taken up by a run: the part-filled batch waits again.
    seed_postings(url, tmp_path, [{**POSTINGS[2], "key": "p-6"}])
    assert isinstance(tick(), SkipReason)
    with session_scope(url) as session:
        assert claims.claim_items(session, "posting_skills", ["p-6"], upstream.run_id) == ["p-6"]
    # The run wrote p-4's skills (its summary step may still be going): nothing more is coming.
    with session_scope(url) as session:
        claims.release_items(session, "posting_skills", ["p-4", "p-6"], upstream.run_id)
    run_pending(defs, [llm_group], instance, AppDatabase(url=url), source="test")
    assert instance.get_run_by_id(upstream.run_id).status == DagsterRunStatus.STARTED
    written = tick()
    assert isinstance(written, SensorResult) and len(written.run_requests) == 1  # all five, one run

    instance.report_run_canceled(instance.get_run_by_id(upstream.run_id))
    seed_postings(url, tmp_path, [{**POSTINGS[1], "key": "p-5"}])  # pending skills, but no run writes them
    started = tick()
    assert isinstance(started, SensorResult) and len(started.run_requests) == 1
    assert len(tick(in_twos).run_requests) == 3  # upstream ended: the odd one goes too


def test_a_resolution_run_starts_while_an_upstream_run_is_making_the_skills(pipeline, monkeypatch) -> None:  # noqa: ANN001
    """With runs going on, the resolution sensor does not wait for the first skills to be stored (then
    the run's process start and the resolver's load would trail every posting): once an upstream run
    has just started or has claimed skills to make, it starts one run, over that run's postings; no more
    while it goes, none while no upstream run goes (a paused upstream), they are only queued or started
    long ago with nothing claimed, and it looks again on its next tick even when nothing changed in the
    database."""
    from dagster import (
        DagsterEvent,
        DagsterEventType,
        DagsterRunStatus,
        SensorResult,
        SkipReason,
        build_sensor_context,
    )
    from dagster._core.test_utils import create_run_for_test

    from appdb import claims
    from assets.run_tags import CONTINUE_TAG, partition_range_tags
    from sensors import discovery_sensor
    from sensors.discovery_sensor import build_discovery_sensor

    defs, groups, instance, url = pipeline
    llm_group, entities = groups
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
    sensor = build_discovery_sensor(entities, groups=groups, continue_seconds=600)
    cursor: list[str | None] = [None]

    def tick():  # noqa: ANN202
        context = build_sensor_context(
            instance=instance, resources={"app_db": AppDatabase(url=url)}, cursor=cursor[0]
        )
        result = sensor(context)
        cursor[0] = result.cursor if isinstance(result, SensorResult) else context.cursor
        return result

    idle = tick()  # skills to make, but no run makes them
    assert isinstance(idle, SkipReason)
    upstream = create_run_for_test(
        instance,
        job_name=llm_group.job.name,
        status=DagsterRunStatus.NOT_STARTED,  # as a queued run: not yet out of the queue
        tags=partition_range_tags("p-1", "p-3"),
    )
    not_yet = tick()  # the database did not change since the last tick: it looks all the same
    assert isinstance(not_yet, SkipReason) and "queued or have taken none up" in not_yet.skip_message
    instance.handle_run_event(  # out of the queue: the first skills are seconds away
        upstream.run_id,
        DagsterEvent(DagsterEventType.RUN_START.value, job_name=llm_group.job.name),
    )
    assert instance.get_run_by_id(upstream.run_id).status == DagsterRunStatus.STARTED
    with monkeypatch.context() as patched:  # started long ago and nothing claimed: waiting for something
        patched.setattr(discovery_sensor, "FRESH_UPSTREAM_SECONDS", -1.0)
        stale = tick()
    assert isinstance(stale, SkipReason) and "taken none up" in stale.skip_message
    ahead = tick()  # started just now, no claim yet
    assert isinstance(ahead, SensorResult) and len(ahead.run_requests) == 1
    [request] = ahead.run_requests
    assert request.tags[CONTINUE_TAG] == "600"
    assert (request.tags[ASSET_PARTITION_RANGE_START_TAG], request.tags[ASSET_PARTITION_RANGE_END_TAG]) == (
        "p-1",
        "p-3",
    )
    own = create_run_for_test(instance, job_name=entities.job.name, status=DagsterRunStatus.STARTED)
    assert isinstance(tick(), SkipReason)  # its run waits for the skills: no second one
    instance.report_run_canceled(instance.get_run_by_id(own.run_id))
    instance.report_run_canceled(instance.get_run_by_id(upstream.run_id))
    assert isinstance(tick(), SkipReason)  # work left, no upstream run going: nothing
    with session_scope(url) as session:  # a claim left by a run that is gone starts nothing either
        assert claims.claim_items(session, "posting_skills", ["p-1", "p-2"], upstream.run_id)
    gone = tick()
    assert isinstance(gone, SkipReason) and "no upstream run goes" in gone.skip_message
    with session_scope(url) as session:
        claims.release_items(session, "posting_skills", ["p-1", "p-2"], upstream.run_id)
    run_pending(defs, [llm_group], instance, AppDatabase(url=url), source="test")  # every skill written
    ready = tick()  # the usual way now: a run for the postings with skills
    assert isinstance(ready, SensorResult) and len(ready.run_requests) == 1
    assert ready.run_requests[0].tags[ASSET_PARTITION_RANGE_START_TAG] == "p-1"


def _resolution_run_ahead_of_held_skills(pipeline) -> tuple[Any, list[str], dict[str, Any]]:  # noqa: ANN001
    """Skills held by an upstream run, and a resolution run over p-1..p-3 started ahead of them in a
    thread (going on for up to 120 s): the thread, the keys, and where its result lands."""
    import threading

    from appdb import claims
    from assets.run_tags import CONTINUE_TAG, partition_range_tags

    defs, _, instance, url = pipeline
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
    keys = [posting["key"] for posting in POSTINGS]
    instance.add_dynamic_partitions("postings", keys)
    with session_scope(url) as session:  # an upstream run is making them
        assert claims.claim_items(session, "posting_skills", keys, "upstream-run") == keys
    job = defs.resolve_job_def("skill_entities_batch_job")
    outcome: dict[str, Any] = {}
    follower = threading.Thread(
        target=lambda: outcome.update(
            result=job.execute_in_process(
                instance=instance, tags={**partition_range_tags("p-1", "p-3"), CONTINUE_TAG: "120"}
            )
        )
    )
    follower.start()
    return follower, keys, outcome


def _skills_written_after_the_hold(pipeline, keys: list[str]) -> None:  # noqa: ANN001
    """The upstream run gives its claims back; the next one writes the skills."""
    from appdb import claims

    defs, (llm_group, _), instance, url = pipeline
    with session_scope(url) as session:
        claims.release_items(session, "posting_skills", keys, "upstream-run")
    run_pending(defs, [llm_group], instance, AppDatabase(url=url), source="test")


def _resolved_by(url: str) -> dict[str, str]:
    """Each resolved posting's run."""
    with session_scope(url) as session:
        return dict(
            session.execute(
                select(UseCaseOutput.subject_key, UseCaseOutput.run_id).where(
                    UseCaseOutput.use_case == "skill_entities"
                )
            ).all()
        )


def test_a_resolution_run_started_ahead_of_the_skills_resolves_them_as_they_are_written(
    pipeline_of_concurrent_runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run the sensor starts before any skills exist waits for them, past its idle limit while a
    running run holds them, loads the resolver meanwhile, and resolves every posting as the skills come;
    then, nothing more coming, it ends."""
    import time

    from assets import batch_run

    _, _, instance, url = pipeline_of_concurrent_runs
    monkeypatch.setattr(batch_run, "CONTINUE_IDLE_SECONDS", 0.5)
    monkeypatch.setattr(batch_run, "CONTINUE_POLL_SECONDS", 0.1)
    follower, keys, outcome = _resolution_run_ahead_of_held_skills(pipeline_of_concurrent_runs)
    time.sleep(3)  # six times its idle limit, the skills still held
    assert follower.is_alive()
    # released, they wait unclaimed for the next upstream run: its usual limit covers that run's start
    monkeypatch.setattr(batch_run, "CONTINUE_IDLE_SECONDS", 60.0)
    _skills_written_after_the_hold(pipeline_of_concurrent_runs, keys)
    follower.join(timeout=120)
    assert not follower.is_alive()
    result = outcome["result"]
    assert result.success
    assert _resolved_by(url) == dict.fromkeys(keys, result.run_id)  # every posting, by the run started ahead
    messages = [record.user_message for record in instance.all_logs(result.run_id) if record.user_message]
    assert any("warmed up while waiting for inputs" in message for message in messages)


def test_a_run_ahead_of_its_inputs_looks_once_more_when_they_are_done_even_if_the_marker_stayed(
    pipeline_of_concurrent_runs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery's change marker may stay put across a write (a transaction that stamped its rows
    before another, and committed after it): the run waiting for skills still finds them when it sees
    they are all made, instead of ending with nothing done."""
    import threading

    from appdb import discovery as discovery_module
    from assets import batch_run

    monkeypatch.setattr(batch_run, "CONTINUE_POLL_SECONDS", 0.1)
    looked = threading.Event()

    def marker_that_never_moves(session: Any, table: Any) -> str:
        if threading.current_thread() is not threading.main_thread():  # the resolution run's look
            looked.set()
        return "unchanged"

    monkeypatch.setattr(discovery_module, "change_marker", marker_that_never_moves)
    follower, keys, outcome = _resolution_run_ahead_of_held_skills(pipeline_of_concurrent_runs)
    assert looked.wait(timeout=120)  # it has looked once, found nothing: the skills are still held
    _skills_written_after_the_hold(pipeline_of_concurrent_runs, keys)
    follower.join(timeout=120)
    assert not follower.is_alive()
    assert _resolved_by(pipeline_of_concurrent_runs[3]) == dict.fromkeys(keys, outcome["result"].run_id)


def test_a_run_ahead_of_its_inputs_ends_at_once_when_none_are_coming(pipeline) -> None:
    """No skills to make and none being made: the resolution run finds no work and ends promptly."""
    import time

    from assets.run_tags import CONTINUE_TAG, partition_range_tags

    defs, groups, instance, url = pipeline
    llm_group, _ = groups
    assert load_reference_data(defs, instance, POSTINGS_PLUGIN.reference_jobs)
    run_pending(defs, groups, instance, AppDatabase(url=url), source="test")  # everything current
    instance.add_dynamic_partitions("postings", [posting["key"] for posting in POSTINGS])
    started = time.monotonic()
    result = defs.resolve_job_def("skill_entities_batch_job").execute_in_process(
        instance=instance, tags={**partition_range_tags("p-1", "p-3"), CONTINUE_TAG: "600"}
    )
    assert result.success and time.monotonic() - started < 30
    assert not result.get_asset_materialization_events()
