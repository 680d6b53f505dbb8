"""The litmus test of the work core: with the postings plugin left out, the engine still runs autodo
items from pending to done (discovery, claims, retries, traces, checks, partitions per kind, the
sensor), and `pipeline autodo scope` stores each item's scope, traced like every call."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, build_sensor_context
from sqlalchemy import select

from appdb import discovery
from appdb.database import session_scope
from appdb.models import Interaction, WorkItem
from assets.factory import build_work_groups
from domain.language.declaration import UseCase
from domain.language.declaration_parts import DeclarationError
from domain.language.llm_types import Generation
from domain.language.steps import Chain, LLMStep, Route
from pipeline_defs.cli.in_process_runs import run_pending
from pipeline_defs.cli.main import main
from pipeline_defs.cli.subject_runs import run_subjects
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from pipeline_defs.wiring import build_use_cases
from plugins.autodo import autodo_store as store
from plugins.autodo import service
from plugins.autodo.autodo_kind import AUTODO
from plugins.autodo.autodo_use_cases import AUTODO_SCOPE
from plugins.postings.store.tables import Posting
from resources.app_database import AppDatabase
from resources.llm import LLMResource
from sensors.discovery_sensor import build_discovery_sensor
from tests.support.autodo_tree import write_sample_tree


class FakeScoper(LLMResource):
    """Answers every scope prompt with the first file the prompt's code names; a FIXME gets bad JSON."""

    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        item = prompt.rsplit("Item: ", 1)[1].split("\n", 1)[0]
        if "whitespace" in item:
            return Generation("I think this is hard", 50, 5, 1.0)
        code = prompt.rsplit("Code:\n", 1)[1]
        first_file = code.split(":", 1)[0] if ":" in code.split("\n", 1)[0] else ""
        answer = {
            "files_to_change": [first_file] if first_file else [],
            "effort": "S",
            "first_step": f"Do: {item}",
        }
        return Generation(json.dumps(answer), 120, 20, 1.0)


@pytest.fixture
def scanned(app_db_url: str, tmp_path: Path) -> Path:
    tree = write_sample_tree(tmp_path)
    reader = tree / "src" / "reader.py"
    reader.write_text(reader.read_text() + "\n\n# TODO: cap `parse_text` at 1 MB\ndef parse_text(): ...\n")
    with session_scope(app_db_url) as session:
        service.scan(session, [tree / "docs" / "ROADMAP.md", tree / "src" / "reader.py"], tree)
    return tree


def autodo_only(url: str) -> Settings:
    return Settings.from_env().changed(database_url=url, domains=("autodo",))


def test_without_the_postings_plugin_the_engine_runs_autodo_items_to_done(
    app_db_url: str, scanned: Path, dagster_instance: DagsterInstance
) -> None:
    settings = autodo_only(app_db_url)
    built = build_use_cases(settings)
    assert [item.use_case.name for item in built] == ["autodo_context", "autodo_scope"]
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups, llm=FakeScoper())
    asset_keys = {key.to_user_string() for key in defs.resolve_asset_graph().get_all_asset_keys()}
    assert asset_keys == {"autodo", "autodo_context", "autodo_scope"}  # no postings, no taxonomy
    assert defs.resolve_job_def("autodo_scope_job")  # the asset's partitions are autodo's own
    spec = next(item.spec for item in built if item.use_case.name == "autodo_scope")

    # The sensor finds the work, adds autodo partitions and asks for runs, as for postings.
    sensor = build_discovery_sensor(groups[0], 30)
    with build_sensor_context(
        instance=dagster_instance, resources={"app_db": defs.resources["app_db"]}
    ) as ctx:
        result = sensor(ctx)
    assert len(result.run_requests) == 1
    assert len(dagster_instance.get_dynamic_partitions("autodo")) == 9

    runs, failed = run_subjects(settings, "autodo", None, llm=FakeScoper(), instance=dagster_instance)
    assert len(runs) == 2 and len(failed) == 0  # one run per group; the bad answer is an item error
    with session_scope(app_db_url) as session:
        items = store.stored_items(session)
        scopes = {key: store.outputs_of(session, key).get("autodo_scope") for key in items}
        pending = discovery.find_pending_work(session, spec)
        work = dict(
            session.execute(
                select(WorkItem.subject_key, WorkItem.status).where(WorkItem.use_case == "autodo_scope")
            ).all()
        )
        calls = session.scalars(select(Interaction).where(Interaction.use_case == "autodo_scope")).all()
        assert session.scalar(select(Posting.id)) is None  # not a posting in sight
    by_text = {item.text: key for key, item in items.items()}
    bom = by_text["handle a BOM at the start of the file"]
    whitespace = by_text["strips meaningful whitespace too"]
    assert scopes[bom]["first_step"] == "Do: handle a BOM at the start of the file"
    assert scopes[whitespace] is None and work[whitespace] == "pending"  # a retry is due later
    assert sum(status == "done" for status in work.values()) == 8
    assert pending == []  # the failed one backs off; everything else is current
    assert len(calls) == 9 and {call.source for call in calls} == {"cli"}
    # The context script found the code the item mentions (the item's own file, by its words).
    with session_scope(app_db_url) as session:
        context = store.outputs_of(session, by_text["cap `parse_text` at 1 MB"])["autodo_context"]
        scope = store.outputs_of(session, by_text["cap `parse_text` at 1 MB"])["autodo_scope"]
    assert context["symbols"] == ["parse_text"] and context["searched_with"] in ("ripgrep", "python")
    assert context["hits"] == [{"file": "src/reader.py", "line": 14}]  # line 15 is shown around it
    assert scope["files_to_change"] == ["src/reader.py"]  # the fake model names the first file it was shown


def test_an_edited_item_is_stale_and_rescoped(
    app_db_url: str, scanned: Path, dagster_instance: DagsterInstance
) -> None:
    settings = autodo_only(app_db_url)
    run_subjects(settings, "autodo", None, llm=FakeScoper(), instance=dagster_instance)
    roadmap = scanned / "docs" / "ROADMAP.md"
    roadmap.write_text(
        roadmap.read_text().replace("Pace the remote Ollama hosts", "Pace remote Ollama hosts")
    )
    with session_scope(app_db_url) as session:
        service.scan(session, [roadmap], scanned)
        context_spec = build_use_cases(settings)[0].spec
        assert discovery.find_pending_work(session, context_spec) == ["WI-042"]  # its content changed
    run_subjects(settings, "autodo", ["WI-042"], llm=FakeScoper(), instance=dagster_instance)
    with session_scope(app_db_url) as session:
        assert (
            store.outputs_of(session, "WI-042")["autodo_scope"]["first_step"]
            == "Do: Pace remote Ollama hosts"
        )


def test_scope_from_the_cli_with_the_default_domains(
    app_db_url: str,
    scanned: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.setattr("pipeline_defs.cli.subject_runs.build_definitions", _with_fake_llm)
    assert main(["autodo", "scope", "WI-042"]) == 0
    out = capsys.readouterr().out
    assert "WI-042: effort S; files:" in out and "first step: Do: Pace the remote Ollama hosts" in out
    assert main(["autodo", "scope", "WI-999"]) == 2
    assert AUTODO_SCOPE.subject_kind == "autodo"
    # The item shows what its scope cost: 120 prompt and 20 completion tokens at 1.0 and 2.0 per 1,000.
    assert main(["autodo", "show", "WI-042"]) == 0
    assert "autodo_scope cost: 1 LLM call, 140 tokens, 0.1600" in capsys.readouterr().out


def test_a_command_started_in_the_background_still_stops_on_sigterm_after_its_runs(
    app_db_url: str,
    scanned: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`pipeline autodo scope ... &` gets SIGINT ignored; Dagster's in-process run copies SIGINT's
    handler onto SIGTERM, which must not leave the command (or what it starts) deaf to `kill`."""
    monkeypatch.setenv("PIPELINE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PIPELINE_DATABASE_URL", app_db_url)
    monkeypatch.setattr("pipeline_defs.cli.subject_runs.build_definitions", _with_fake_llm)
    before = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert main(["autodo", "scope", "WI-042"]) == 0
        assert "WI-042: effort S" in capsys.readouterr().out  # a Dagster run did happen in process
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # the caller's own handler back
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


class PaidScoper(FakeScoper):
    """The fake scoper as a paid remote backend."""

    @property
    def is_local(self) -> bool:
        return False


def _with_fake_llm(settings, **kwargs):  # noqa: ANN001, ANN003, ANN202
    llm = PaidScoper(prices={AUTODO_SCOPE.model: [1.0, 2.0]})
    return build_definitions(settings, **{**kwargs, "llm": llm})


PLAN_SCHEMA = {
    "type": "object",
    "properties": {"plan": {"type": "string"}},
    "required": ["plan"],
    "additionalProperties": False,
}


def _two_step_chain(second_prompt: str) -> UseCase:
    """A chain on autodo items: a first step drafts from the item's text, a second plans from the draft."""
    chain = Chain(
        steps=(
            LLMStep("draft", "fake", "STEP draft\nItem: {text}\nAnswer:", None, routes=(Route("plan"),)),
            LLMStep("plan", "fake", second_prompt, PLAN_SCHEMA),
        )
    )
    return UseCase(
        name="autodo_plan",
        version="2026-11-24.1",
        output_schema=PLAN_SCHEMA,
        steps=chain,
        subject=AUTODO,
    )


class ChainAnswers(FakeScoper):
    """The draft step echoes the item; the plan step names the draft and the item's file."""

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        if prompt.startswith("STEP draft"):
            return Generation("draft of " + prompt.split("Item: ", 1)[1].split("\n", 1)[0], 10, 5, 1.0)
        draft = prompt.split("Draft: ", 1)[1].split("\n", 1)[0]
        where = prompt.split("File: ", 1)[1].split("\n", 1)[0]
        return Generation(json.dumps({"plan": f"{draft} in {where}"}), 10, 5, 1.0)


def test_a_multi_step_chain_runs_on_autodo_items(
    app_db_url: str, scanned: Path, dagster_instance: DagsterInstance
) -> None:
    # A step may name the subject kind's own fields ({file}), not only a posting's.
    use_case = _two_step_chain("STEP plan\nDraft: {draft}\nFile: {file}\nAnswer:")
    with pytest.raises(DeclarationError, match=r"nor an autodo item field \(key, text, file, heading"):
        _two_step_chain("STEP plan\nDraft: {draft}\nTitle: {title}\nAnswer:")
    settings = autodo_only(app_db_url)
    built = build_use_cases(settings, [use_case])
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups, llm=ChainAnswers())
    reports = run_pending(defs, groups, dagster_instance, AppDatabase(url=app_db_url))
    assert sum(len(report.runs) for report in reports) == 1
    with session_scope(app_db_url) as session:
        items = store.stored_items(session)
        plans = {key: store.outputs_of(session, key).get("autodo_plan") for key in items}
    bom = next(key for key, item in items.items() if item.text == "handle a BOM at the start of the file")
    assert plans[bom] == {"plan": f"draft of handle a BOM at the start of the file in {items[bom].file}"}
    assert all(plan is not None for plan in plans.values())
