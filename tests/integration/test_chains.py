"""Multi-step use cases: first-match branching, budgets, batching by step, template variables,
per-step traces. Runs through Dagster with a fake backend that serves two models and counts
every load and call."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest
from dagster import AssetKey, DagsterInstance
from sqlalchemy import Engine, event, select

from appdb import pauses
from appdb.database import session_scope
from appdb.models import Interaction, UseCaseOutput, WorkItem
from domain.language.declaration import UseCase
from domain.language.declaration_parts import DeclarationError
from domain.language.llm_types import BackendUnavailable, Generation
from domain.language.steps import END, Chain, LLMStep, Marker, Route, ScriptStep
from pipeline_defs.cli.trace_report import render_text, trace_blocks
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from plugins.postings.store.postings_kind import POSTINGS as POSTINGS_KIND
from resources.llm import LLMResource
from tests.support.postings import POSTINGS, database_goes_away_on, run_use_case, seed_postings

DRAFT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
GRADE_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer"}, "passed": {"type": "boolean"}},
    "required": ["score", "passed"],
}


class TwoModels(LLMResource):
    """Serves any model; answers with `respond(step, title, prompt)`; records loads and calls."""

    loads: ClassVar[list[str]] = []
    calls: ClassVar[list[tuple[str, str, str]]] = []  # (model, step, title)
    prompts: ClassVar[list[str]] = []
    respond: ClassVar[Callable[[str, str, str], str]] = staticmethod(lambda step, title, prompt: "{}")

    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        TwoModels.loads.append(model)
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        step = prompt.split("\n", 1)[0].removeprefix("STEP ")
        title = re.search(r"Title: (.*)", prompt).group(1)
        TwoModels.calls.append((model, step, title))
        TwoModels.prompts.append(prompt)
        return Generation(TwoModels.respond(step, title, prompt), 50, 10, 1.0)


@pytest.fixture
def fake_llm() -> type[TwoModels]:
    TwoModels.loads.clear()
    TwoModels.calls.clear()
    TwoModels.prompts.clear()
    return TwoModels


def _prompt(step: str, body: str = "") -> str:
    return f"STEP {step}\nTitle: {{title}}\n{body}Answer:"


def _run(url: str, instance: DagsterInstance, use_cases: list[UseCase], keys: list[str], name: str):  # noqa: ANN202
    defs = build_definitions(
        Settings.from_env().changed(database_url=url), use_cases=use_cases, llm=TwoModels()
    )
    return run_use_case(defs, instance, keys, use_case=name)


def _interactions(url: str, use_case: str) -> list[Interaction]:
    with session_scope(url) as session:
        rows = list(
            session.scalars(
                select(Interaction).where(Interaction.use_case == use_case).order_by(Interaction.id)
            )
        )
        session.expunge_all()
    return rows


def _outputs(url: str, use_case: str) -> dict[str, dict]:
    with session_scope(url) as session:
        return {
            row.subject_key: row.value
            for row in session.scalars(select(UseCaseOutput).where(UseCaseOutput.use_case == use_case))
        }


# --- routing: first match by priority, default, terminal ------------------------------------------


def _router(*routes: Route) -> tuple[Chain, Any]:
    chain = Chain(
        steps=(
            ScriptStep("grade", lambda inputs, context: {}, routes=routes),
            *(ScriptStep(name, lambda inputs, context: {}) for name in ("publish", "celebrate", "improve")),
        )
    )
    return chain, chain.step("grade")


def test_the_first_matching_route_by_priority_wins_and_only_one_is_taken() -> None:
    chain, grade = _router(
        Route("improve"),  # the default, declared first, is still tried last
        Route("publish", when="grade.score >= 4", priority=1),
        Route("celebrate", when="grade.passed == true", priority=2),
    )
    both = {"grade": {"score": 5, "passed": True}}
    assert chain.decide(grade, both, "", {"grade": 1}, 1).to == "celebrate"
    only_score = {"grade": {"score": 4, "passed": False}}
    decision = chain.decide(grade, only_score, "", {"grade": 1}, 1)
    assert (decision.to, decision.rule) == ("publish", "grade.score >= 4")
    neither = {"grade": {"score": 1, "passed": False}}
    assert chain.decide(grade, neither, "", {"grade": 1}, 1).rule == "default"
    assert chain.decide(grade, neither, "", {"grade": 1}, 1).to == "improve"
    # equal priority: declared order decides
    chain, grade = _router(
        Route("publish", when="grade.passed == true"),
        Route("celebrate", when="grade.passed == true"),
        Route(END),
    )
    assert chain.decide(grade, both, "", {"grade": 1}, 1).to == "publish"


def test_a_marker_in_the_raw_response_routes_to_the_terminal() -> None:
    chain, grade = _router(Route(END, when=Marker("[SKIP]"), priority=5), Route("improve"))
    assert chain.decide(grade, {"grade": {}}, "[SKIP] nothing to do", {"grade": 1}, 1).to == END
    assert chain.decide(grade, {"grade": {}}, "[RUN]", {"grade": 1}, 1).to == "improve"


def test_a_missing_field_or_a_true_against_one_never_matches() -> None:
    chain, grade = _router(Route("publish", when="grade.passed == true"), Route("improve"))
    assert chain.decide(grade, {"grade": {}}, "", {"grade": 1}, 1).to == "improve"
    assert chain.decide(grade, {"grade": {"passed": 1}}, "", {"grade": 1}, 1).to == "improve"


# --- declaration load: structure, conditions, template variables ----------------------------------


def _use_case(chain: Chain, upstream: tuple[str, ...] = ()) -> UseCase:
    return UseCase(
        subject=POSTINGS_KIND,
        name="chained",
        version="2026-11-22.1",
        output_schema=DRAFT_SCHEMA,
        steps=chain,
        upstream=upstream,
    )


def _llm(name: str, body: str = "", **kwargs: Any) -> LLMStep:
    kwargs.setdefault("output_schema", DRAFT_SCHEMA)
    return LLMStep(name, kwargs.pop("model", "model-a"), _prompt(name, body), **kwargs)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Chain((_llm("draft", routes=(Route("grde"),)),)), "routes to 'grde', which is not a step"),
        (lambda: Chain((_llm("draft"), _llm("orphan"))), "orphan cannot be reached from draft"),
        (
            lambda: Chain((_llm("draft", "{notes.text}\n"),)),
            "{notes.text}, which is neither an earlier step's",
        ),
        (
            lambda: Chain(
                (
                    _llm("draft", routes=(Route("polish", when='draft.text == ""'), Route("review"))),
                    _llm("review", routes=(Route("polish"),)),
                    _llm("polish", "{review.text}\n"),
                )
            ),
            "'review' is not set on every path that reaches polish",
        ),
        (
            lambda: Chain((_llm("draft", routes=(Route("polish"),)), _llm("polish", "{draft.txt}\n"))),
            "the output 'draft' has no field 'txt'",
        ),
        (
            lambda: Chain(
                (_llm("draft", routes=(Route("grade"),)), _llm("grade", routes=(Route("draft"),))),
                fallback="grade",
            ),
            "fallback step grade must end the chain",
        ),
        (
            lambda: Chain((_llm("draft", routes=(Route(END, when="draft.score >= 3"), Route(END))),)),
            "no field 'score'",
        ),
        (
            lambda: Chain(
                (
                    _llm("draft", routes=(Route("grade"),)),
                    _llm(
                        "grade",
                        output_schema=GRADE_SCHEMA,
                        routes=(Route(END, when='grade.passed == "yes"'), Route(END)),
                    ),
                )
            ),
            "compares a boolean field with a string",
        ),
    ],
)
def test_a_chain_that_cannot_work_fails_when_the_declaration_loads(build, message: str) -> None:  # noqa: ANN001
    with pytest.raises(DeclarationError, match=re.escape(message)):
        _use_case(build())


def test_conditions_and_routes_are_checked_as_they_are_declared() -> None:
    with pytest.raises(DeclarationError, match="is not `output.field <op> value`"):
        Route("x", when="grade.passed is true")
    with pytest.raises(DeclarationError, match="needs a number"):
        Route("x", when='grade.score > "high"')
    with pytest.raises(DeclarationError, match="need a default route"):
        _llm("draft", routes=(Route("x", when='draft.text == "a"'),))
    with pytest.raises(DeclarationError, match="more than one default"):
        _llm("draft", routes=(Route("x"), Route(END)))


def test_variables_resolve_from_chain_state_then_upstream_then_posting_fields_at_load() -> None:
    # draft's output is set on every path to polish; notes is an upstream use case; title a posting field
    chain = Chain(
        (
            _llm("draft", "{notes.text}\n", routes=(Route("polish"),)),
            _llm("polish", "{draft.text}\n{notes.text}\n{description}\n"),
        )
    )
    assert _use_case(chain, upstream=("notes",)).model == "model-a"


# --- end to end through Dagster with the fake backend ---------------------------------------------


def _grading_chain(*, fallback: str | None = "final", improve_visits: int = 2) -> Chain:
    return Chain(
        steps=(
            _llm("draft", output_name="current", routes=(Route("grade"),)),
            _llm(
                "grade",
                "Draft: {current.text}\n",
                model="model-b",
                output_schema=GRADE_SCHEMA,
                max_visits=5,
                routes=(
                    Route(END, when=Marker("[SKIP]"), priority=9),
                    Route("final", when="grade.passed == true", priority=2),
                    Route("final", when="grade.score >= 4", priority=1),
                    Route("improve"),
                ),
            ),
            _llm(
                "improve",
                "Draft: {current.text}\nScore: {grade.score}\n",
                output_name="current",
                max_visits=improve_visits,
                routes=(Route("grade"),),
            ),
            ScriptStep("final", _keep_best, output_schema=DRAFT_SCHEMA),
        ),
        max_steps_per_subject=12,
        fallback=fallback,
    )


def _keep_best(inputs: dict, context) -> dict:  # noqa: ANN001
    graded, latest = [], None
    for record in context.history:
        if record.output_name == "current":
            latest = record.value["text"]
        elif record.output_name == "grade":
            graded.append((record.value["score"], latest))
    best = max(score for score, _ in graded)
    return {"text": next(text for score, text in graded if score == best) + f" [best of {len(graded)}]"}


def _chain_use_case(chain: Chain, **kwargs: Any) -> UseCase:
    return UseCase(
        subject=POSTINGS_KIND,
        name="refined",
        version="2026-11-22.1",
        output_schema=DRAFT_SCHEMA,
        steps=chain,
        **kwargs,
    )


def _scripted(grades: dict[str, list[dict | str]]) -> Callable[[str, str, str], str]:
    """Drafts say which visit made them; grades come from a per-title list, one per grade visit."""
    seen: dict[str, int] = {}

    def respond(step: str, title: str, prompt: str) -> str:
        if step in ("draft", "improve"):
            seen[title] = seen.get(title, 0) + 1
            return json.dumps({"text": f"{title} v{seen[title]}"})
        grade = grades[title].pop(0)
        return grade if isinstance(grade, str) else json.dumps(grade)

    return respond


def test_branching_loops_and_budgets_end_on_the_fallback_and_record_why(
    app_db_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(app_db_url, tmp_path)
    fake_llm.respond = _scripted(
        {
            "Data Engineer": [{"score": 2, "passed": False}, {"score": 5, "passed": True}],  # improved once
            "Registered Nurse": [
                {"score": 3, "passed": False},
                {"score": 2, "passed": False},
                {"score": 1, "passed": False},
            ],
            "Electrician": [{"score": 0, "passed": False, "note": "[SKIP] not a posting to summarize"}],
        }
    )
    result = _run(
        app_db_url, dagster_instance, [_chain_use_case(_grading_chain())], ["p-1", "p-2", "p-3"], "refined"
    )

    assert result.success
    outputs = _outputs(app_db_url, "refined")
    assert outputs["p-1"] == {"text": "Data Engineer v2 [best of 2]"}
    # p-2: never passed; improve's budget (2 visits) ran out; final kept the best-graded draft (v1, score 3)
    assert outputs["p-2"] == {"text": "Registered Nurse v1 [best of 3]"}
    # p-3: the [SKIP] marker routes to END at once; the grade is the chain's output only if it fits the
    # schema, and it does not, so the posting fails saying why
    assert "p-3" not in outputs
    by_posting: dict[str, list[dict]] = {}
    for row in _interactions(app_db_url, "refined"):
        by_posting.setdefault(row.subject_key, []).append(row.options["chain"])
    path = [(step["step"], step["route"], step["rule"]) for step in by_posting["p-1"]]
    assert path == [
        ("draft", "grade", "default"),
        ("grade", "improve", "default"),
        ("improve", "grade", "default"),
        ("grade", "final", "grade.passed == true"),  # both final routes match; only the first is taken
        ("final", END, "no routes"),
    ]
    assert by_posting["p-1"][-1]["ended"] == "final is a last step"
    nurse = by_posting["p-2"]
    assert [step["step"] for step in nurse] == [
        "draft",
        "grade",
        "improve",
        "grade",
        "improve",
        "grade",
        "final",
    ]
    assert nurse[-2]["budget_exhausted"] == "improve reached its limit of 2 visits"
    assert nurse[-2]["route"] == "final"
    assert nurse[-1]["ended"].startswith("fallback final after the budget ran out: improve reached its limit")
    assert [(s["step"], s["visit"], s["step_number"]) for s in nurse[-3:]] == [
        ("improve", 2, 5),
        ("grade", 3, 6),
        ("final", 1, 7),
    ]
    skip = by_posting["p-3"]
    assert [(s["step"], s["route"], s["rule"]) for s in skip] == [
        ("draft", "grade", "default"),
        ("grade", END, "marker [SKIP]"),
    ]
    with session_scope(app_db_url) as session:
        item = session.get(WorkItem, ("refined", "p-3"))
        assert item.status == "pending" and "output schema" in item.last_error


def test_without_a_fallback_an_exhausted_budget_fails_the_posting_naming_the_budget(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])
    fake_llm.respond = _scripted({"Data Engineer": [{"score": 1, "passed": False}] * 3})
    chain = _grading_chain(fallback=None, improve_visits=1)
    result = _run(sqlite_url, dagster_instance, [_chain_use_case(chain)], ["p-1"], "refined")

    assert result.success  # a failed posting is retried later; the run itself completes
    with session_scope(sqlite_url) as session:
        item = session.get(WorkItem, ("refined", "p-1"))
        assert item.attempts == 1
        assert item.last_error == (
            "budget exhausted after step grade: improve reached its limit of 1 visits "
            "(the chain declares no fallback)"
        )
    steps = [row.options["chain"] for row in _interactions(sqlite_url, "refined")]
    assert [s["step"] for s in steps] == ["draft", "grade", "improve", "grade"]
    assert steps[-1]["route"] is None and steps[-1]["ended"].startswith("failed: budget exhausted")


def test_the_step_budget_per_posting_ends_a_loop_too(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])
    fake_llm.respond = _scripted({"Data Engineer": [{"score": 1, "passed": False}] * 5})
    chain = replace(_grading_chain(improve_visits=10), max_steps_per_subject=4)
    result = _run(sqlite_url, dagster_instance, [_chain_use_case(chain)], ["p-1"], "refined")

    assert result.success
    steps = [row.options["chain"] for row in _interactions(sqlite_url, "refined")]
    assert [s["step"] for s in steps] == ["draft", "grade", "improve", "grade", "final"]
    assert steps[3]["budget_exhausted"] == "the limit of 4 steps per run was reached"


def test_postings_are_batched_by_step_with_each_model_loaded_once(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(sqlite_url, tmp_path)
    fake_llm.respond = _scripted(
        {
            "Data Engineer": [{"score": 1, "passed": False}, {"score": 5, "passed": True}],
            "Registered Nurse": [{"score": 5, "passed": True}],
            "Electrician": [{"score": 1, "passed": False}, {"score": 5, "passed": True}],
        }
    )
    result = _run(
        sqlite_url, dagster_instance, [_chain_use_case(_grading_chain())], ["p-1", "p-2", "p-3"], "refined"
    )

    assert result.success and sorted(_outputs(sqlite_url, "refined")) == ["p-1", "p-2", "p-3"]
    assert sorted(fake_llm.loads) == ["model-a", "model-b"]  # each model loaded once in the run
    # waves: every posting at a step is called before any posting moves on, so the calls come
    # in runs of one step (and one model), never alternating posting by posting
    assert [(model, step) for model, step, _ in fake_llm.calls] == [
        *[("model-a", "draft")] * 3,
        *[("model-b", "grade")] * 3,
        *[("model-a", "improve")] * 2,
        *[("model-b", "grade")] * 2,
    ]
    switches = sum(1 for a, b in zip(fake_llm.calls, fake_llm.calls[1:], strict=False) if a[0] != b[0])
    assert switches == 3  # one per wave boundary, not one per posting and step


def test_an_unresolved_variable_is_an_item_error_naming_it_and_no_prompt_is_sent(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[:2])

    def hints(inputs: dict, context) -> dict:  # noqa: ANN001 - no hint for the nurse posting
        return {"hint": "mention Dagster"} if inputs["title"] == "Data Engineer" else {}

    chain = Chain((ScriptStep("prep", hints, routes=(Route("write"),)), _llm("write", "Hint: {prep.hint}\n")))
    fake_llm.respond = lambda step, title, prompt: json.dumps({"text": f"{title} written"})
    result = _run(sqlite_url, dagster_instance, [_chain_use_case(chain)], ["p-1", "p-2"], "refined")

    assert result.success
    assert _outputs(sqlite_url, "refined") == {"p-1": {"text": "Data Engineer written"}}
    assert [title for _, _, title in fake_llm.calls] == ["Data Engineer"]
    assert all("{" not in prompt for prompt in fake_llm.prompts)
    with session_scope(sqlite_url) as session:
        error = session.get(WorkItem, ("refined", "p-2")).last_error
    assert error == "step write: template variable {prep.hint} has no value for this subject"
    failed = [row for row in _interactions(sqlite_url, "refined") if row.subject_key == "p-2"][-1]
    assert (failed.status, failed.prompt, failed.options["chain"]["step"]) == ("item_error", "", "write")


def test_chain_state_shadows_upstream_outputs_which_shadow_posting_fields(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])
    notes = UseCase(
        subject=POSTINGS_KIND,
        name="notes",
        version="2026-11-22.1",
        model="model-a",
        prompt=_prompt("notes"),
        output_schema=DRAFT_SCHEMA,
    )
    chain = Chain(
        (
            _llm("first", "Notes: {notes.text}\nCompany: {company}\n", routes=(Route("rename"),)),
            ScriptStep(
                "rename",
                lambda inputs, context: {"text": "chain notes"},
                output_name="notes",
                routes=(Route("second"),),
            ),
            _llm("second", "Notes: {notes.text}\nCompany: {company}\n"),
        )
    )
    fake_llm.respond = lambda step, title, prompt: json.dumps({"text": f"{step} answer"})
    use_cases = [notes, _chain_use_case(chain, upstream=("notes",))]
    assert _run(sqlite_url, dagster_instance, use_cases, ["p-1"], "notes").success
    assert _run(sqlite_url, dagster_instance, use_cases, ["p-1"], "refined").success

    prompts = {row.options["chain"]["step"]: row.prompt for row in _interactions(sqlite_url, "refined")}
    assert "Notes: notes answer\nCompany: Brightwave Energy" in prompts["first"]  # upstream, posting field
    assert "Notes: chain notes\n" in prompts["second"]  # the chain's own "notes" wins over the upstream


def test_trace_shows_the_path_a_posting_took_through_the_chain(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(sqlite_url, tmp_path, POSTINGS[1:2])
    fake_llm.respond = _scripted(
        {"Registered Nurse": [{"score": 3, "passed": False}, {"score": 4, "passed": False}]}
    )
    use_case = _chain_use_case(_grading_chain(improve_visits=1))
    assert _run(sqlite_url, dagster_instance, [use_case], ["p-2"], "refined").success

    with session_scope(sqlite_url) as session:
        text = render_text(list(trace_blocks(session, "p-2", [POSTINGS_KIND], [])))
    path = text[text.index("chain path") :].splitlines()[:6]
    assert path[1:] == [
        "  1. draft [visit 1/1, step 1/12] → grade (default)",
        "  2. grade [visit 1/5, step 2/12] → improve (default)",
        "  3. improve [visit 1/1, step 3/12] → grade (default)",
        "  4. grade [visit 2/5, step 4/12] → final (grade.score >= 4)",
        "  5. final [visit 1/1, step 5/12] → END (no routes)",
    ]
    assert "ended: final is a last step" in text
    assert "step improve #1" in text  # each interaction is labelled with its step and visit


def test_an_outage_mid_chain_stops_the_run_spends_no_attempts_and_pauses_the_use_case(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, fake_llm
) -> None:
    seed_postings(sqlite_url, tmp_path)

    def respond(step: str, title: str, prompt: str) -> str:
        if step == "grade":  # model-b's server went away after the drafts were written
            raise BackendUnavailable("connection refused by http://gpu-box:11434")
        return json.dumps({"text": f"{title} draft"})

    fake_llm.respond = respond
    result = _run(
        sqlite_url, dagster_instance, [_chain_use_case(_grading_chain())], ["p-1", "p-2", "p-3"], "refined"
    )

    assert not result.success
    assert [step for _, step, _ in fake_llm.calls] == ["draft", "draft", "draft", "grade"]  # stopped at once
    with session_scope(sqlite_url) as session:
        items = list(session.scalars(select(WorkItem).where(WorkItem.use_case == "refined")))
        active = pauses.active_pauses(session)
    assert [(item.status, item.attempts) for item in items] == [("pending", 0)] * 3
    assert "refined" in active and "unavailable" in active["refined"].reason
    assert _outputs(sqlite_url, "refined") == {}


# --- storing a step's results: a group per transaction ----------------------------------------------


def _two_script_steps() -> UseCase:
    return _chain_use_case(
        Chain(
            (
                ScriptStep(
                    "tag", lambda inputs, context: {"text": inputs["title"]}, routes=(Route("final"),)
                ),
                ScriptStep("final", lambda inputs, context: {"text": f"{inputs['tag']['text']} tagged"}),
            )
        )
    )


@contextmanager
def _app_db_commits(url: str) -> Iterator[list[int]]:
    """A list that counts every commit on the application database while the block runs."""
    commits: list[int] = []

    def counted(connection: Any) -> None:
        if str(connection.engine.url) == url:
            commits.append(1)

    event.listen(Engine, "commit", counted)
    try:
        yield commits
    finally:
        event.remove(Engine, "commit", counted)


@contextmanager
def _app_db_writes(url: str) -> Iterator[list[str]]:
    """A list of every INSERT, UPDATE and DELETE statement sent to the application database (an
    executemany counts once) while the block runs."""
    writes: list[str] = []

    def counted(connection: Any, cursor: Any, statement: str, *args: Any) -> None:
        if str(connection.engine.url) == url and statement.lstrip().split(" ", 1)[0] in WRITE_VERBS:
            writes.append(statement)

    event.listen(Engine, "before_cursor_execute", counted)
    try:
        yield writes
    finally:
        event.remove(Engine, "before_cursor_execute", counted)


WRITE_VERBS = ("INSERT", "UPDATE", "DELETE")


def test_a_step_stores_the_postings_it_holds_in_one_transaction_not_one_each(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    """Five postings through two steps take as many commits as one posting does: each step writes
    its postings' interactions (and at the end their outputs) together, not a transaction per posting
    per step (which on PostgreSQL cost the skills' chain more than the tagging); and within a
    transaction a statement for all of them, not one per posting each."""
    five = [{**POSTINGS[0], "key": f"p-{n}", "title": f"Data Engineer {n}"} for n in range(1, 6)]
    seed_postings(sqlite_url, tmp_path, five)
    use_case = _two_script_steps()
    with _app_db_commits(sqlite_url) as commits, _app_db_writes(sqlite_url) as writes:
        assert _run(sqlite_url, dagster_instance, [use_case], ["p-1"], "refined").success
        one_posting = len(commits), len(writes)
        commits.clear()
        writes.clear()
        assert _run(sqlite_url, dagster_instance, [use_case], ["p-2", "p-3", "p-4", "p-5"], "refined").success
        four_postings = len(commits), len(writes)
    assert _outputs(sqlite_url, "refined")["p-5"] == {"text": "Data Engineer 5 tagged"}
    assert len(_interactions(sqlite_url, "refined")) == 10  # every step of every posting is traced
    assert four_postings == one_posting


def test_a_script_use_case_stores_four_postings_in_as_many_statements_as_one(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance
) -> None:
    """A use case of one call per posting (here a script, as skill resolution is) stores its group the
    same way: the statements a run writes do not grow with its postings."""
    five = [{**POSTINGS[0], "key": f"p-{n}", "title": f"Data Engineer {n}"} for n in range(1, 6)]
    seed_postings(sqlite_url, tmp_path, five)
    use_case = UseCase(
        subject=POSTINGS_KIND,
        name="titled",
        version="2026-11-28.1",
        output_schema=DRAFT_SCHEMA,
        function=lambda inputs, context: {"text": inputs["title"].upper()},
    )
    with _app_db_writes(sqlite_url) as writes:
        assert _run(sqlite_url, dagster_instance, [use_case], ["p-1"], "titled").success
        one_posting = len(writes)
        writes.clear()
        assert _run(sqlite_url, dagster_instance, [use_case], ["p-2", "p-3", "p-4", "p-5"], "titled").success
        four_postings = len(writes)
    assert _outputs(sqlite_url, "titled")["p-5"] == {"text": "DATA ENGINEER 5"}
    assert len(_interactions(sqlite_url, "titled")) == 5
    assert four_postings == one_posting


def test_a_write_failing_mid_group_keeps_the_postings_stored_before_it(
    sqlite_url: str, tmp_path: Path, dagster_instance: DagsterInstance, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group is stored again one posting at a time: those before the failing one are kept (and
    Dagster hears of them), the failing one stops the run and the rest are given back, no attempt spent."""

    seed_postings(sqlite_url, tmp_path)
    database_goes_away_on(monkeypatch, "p-2")
    result = _run(sqlite_url, dagster_instance, [_two_script_steps()], ["p-1", "p-2", "p-3"], "refined")

    assert not result.success
    assert _outputs(sqlite_url, "refined") == {"p-1": {"text": "Data Engineer tagged"}}
    with session_scope(sqlite_url) as session:
        items = list(session.scalars(select(WorkItem).where(WorkItem.use_case == "refined")))
    states = {item.subject_key: (item.status, item.attempts) for item in items}
    assert states == {"p-1": ("done", 0), "p-2": ("pending", 0), "p-3": ("pending", 0)}
    assert dagster_instance.get_materialized_partitions(AssetKey("refined")) == {"p-1"}
