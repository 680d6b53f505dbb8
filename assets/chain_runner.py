"""Runs a multi-step use case (`domain/language/steps.py`) over the subjects a run holds.

Batching stays by step ("waves"): all subjects currently at the same step are
processed together, with that step's model loaded once, before the chain moves on;
never one subject through the whole chain at a time. The next wave is the earliest
declared step that has subjects waiting, so subjects that finish a loop early wait at
a later step and join the others in one wave. Consecutive calls of one step also
share their few-shot prefix, which llama.cpp evaluates once. A step's results are stored a group
at a time, as a single call's are (`assets/write_groups.py`): one transaction per group, not one per
subject per step.

Every step call is a row in `interactions` (use_case = the use case's name); its
`options` hold, under "chain", the step, its visit number, the route taken and the
rule that chose it, the budget state and, on the last step, why the chain ended.
`pipeline trace` reads them back as the subject's path. A subject's chain state lives
for one run: a subject whose run died starts its chain again in the next one.
"""

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import jsonschema
from dagster import AssetMaterialization

from appdb import inputs, interactions
from assets.batch_state import BatchRun, ClaimLost
from assets.event_batches import asset_events_in_batches
from assets.llm_calls import LLMRequest, generate_in_ready_groups
from assets.outputs import (
    NewOutput,
    call_fields,
    keep_unchanged,
    output_materialization,
    record_failure,
    store_outputs,
)
from assets.write_groups import WRITES_PER_TRANSACTION, in_write_groups
from domain.language.chat_prompts import CHAT_STYLE, messages_text
from domain.language.declaration import SCRIPT_BACKEND, UseCase
from domain.language.declaration_parts import ScriptContext, validate_json
from domain.language.llm_types import BackendUnavailable, Generation, ItemError
from domain.language.output_parsing import final_output, parse_output
from domain.language.steps import END, Chain, Decision, Step, StepContext, StepRecord
from domain.language.templates import TemplateVariableError


@dataclass
class SubjectChain:
    """One subject's way through the chain in this run: where it is, what it has, what it spent."""

    key: str
    input_hash: str
    at: str
    visits: Counter = field(default_factory=Counter)
    steps_taken: int = 0
    state: dict[str, Any] = field(default_factory=dict)  # output_name -> latest value
    history: list[StepRecord] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    ending: str | None = None  # set when a budget ran out and the subject went to the fallback
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0


@dataclass(frozen=True)
class _StepCall:
    prompt: str
    system_prompt: str
    truncated: dict[str, int]
    generation: Generation | None = None
    error: Exception | None = None
    value: Any = None  # a script step's output (an LLM step's is parsed from the generation)
    chat: bool = False  # sent in chat form: `prompt` holds the messages


def chain_input_hash(use_case: UseCase, values: Mapping[str, Any]) -> str:
    """Identity of a chain's input: its version, models, the subject's fields and upstream outputs."""
    payload = json.dumps(
        [
            use_case.name,
            use_case.version,
            list(use_case.steps.models),
            {name: values.get(name) for name in (*use_case.subject_variables, *use_case.upstream)},
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def run_chain(run: BatchRun, held: Sequence[str]) -> Iterator[AssetMaterialization]:
    """Take every held subject through the chain, wave by wave; yields materializations.

    `run.remaining` (the keys still held) shrinks as subjects finish, so the caller can give the rest
    back if the backend goes away mid-run.
    """
    use_case, outcome = run.use_case, run.outcome
    chain = use_case.steps
    with run.app_db.session() as session:
        subjects, values = inputs.load_inputs(
            session, use_case.subject.table, held, use_case.subject_variables, use_case.upstream
        )
        existing = inputs.existing_outputs(session, use_case.name, held)
    outcome.subjects.update(subjects)  # a run going on adds each batch's to the earlier ones
    outcome.inputs.update(values)
    active: dict[str, SubjectChain] = {}
    for key in held:
        input_hash = chain_input_hash(use_case, values[key])
        previous = existing.get(key)
        if previous is not None and previous.input_hash == input_hash and not run.force:
            keep_unchanged(run, key, previous)
            continue
        active[key] = SubjectChain(key, input_hash, chain.start)

    script_context = ScriptContext(resources=run.context.resources, app_db=run.app_db, log=run.log)
    wave = 0
    with asset_events_in_batches(run.context.instance) as flush:
        while active:
            wave += 1
            yield from _wave(run, chain, active, values, script_context, flush, wave)


def _wave(
    run: BatchRun,
    chain: Chain,
    active: dict[str, SubjectChain],
    values: Mapping[str, Mapping[str, Any]],
    script_context: ScriptContext,
    flush: Callable[..., None],
    wave: int,
) -> Iterator[AssetMaterialization]:
    """One step for every subject that is at it; the materializations of those the step ends.

    The step's results are stored a group at a time (`assets/write_groups.py`). If storing a group
    fails, its subjects are stored again one at a time, so those before the failing one are kept and
    the failing one stops the run as it would have alone."""
    use_case, outcome = run.use_case, run.outcome
    step = next(step for step in chain.steps if any(p.at == step.name for p in active.values()))
    batch = [subject for subject in active.values() if subject.at == step.name]
    started = time.perf_counter()
    if not step.is_script:
        run.load_model(step.model)
    for answered in _step_groups(run, step, batch, values, script_context):
        group = [(subject, call) for subject, call in answered if not _fenced(run, subject, call, active)]
        if not group:
            continue
        if isinstance(group[0][1].error, BackendUnavailable):
            raise group[0][1].error  # it comes alone: what was answered before it is stored already
        run.renew_claims_if_due()  # between transactions: the renewal must not wait on this run's own
        settled = [_settle(run, step, subject, call, values) for subject, call in group]
        try:
            committed: Iterable[list[tuple[_Settled, tuple[int, bool] | None]]] = [
                _store_settled(run, settled)
            ]
        except Exception:
            if len(settled) == 1:
                raise
            committed = (_store_settled(run, [one]) for one in settled)  # each announced before the next
        for written in committed:
            for done, stored in written:
                subject = done.subject
                if subject.at == END:
                    del active[subject.key]
                    run.finished(subject.key)
                event = _materialization(run, done, stored)
                if event is not None:
                    run.note_served()
                    yield event
        flush()  # the group's materializations, in one write
    run.log.info(
        f"{use_case.name}: wave {wave}: step {step.name} for {len(batch)} {use_case.subject.plural} in "
        f"{time.perf_counter() - started:.1f}s; {len(outcome.done)} done, {len(outcome.failed)} failed, "
        f"{len(active)} still in the chain"
    )


def _step_groups(
    run: BatchRun,
    step: Step,
    batch: Sequence[SubjectChain],
    values: Mapping[str, Mapping[str, Any]],
    script_context: ScriptContext,
) -> Iterator[list[tuple[SubjectChain, _StepCall]]]:
    """Run one step for every subject of the wave; yields (subject, call) in order, in the groups that
    share a transaction (a `BackendUnavailable` comes alone)."""
    if step.is_script:
        prepare = getattr(step, "prepare", None)
        if prepare is not None:
            try:
                prepare([_inputs(values[subject.key], subject) for subject in batch])
            except Exception as exc:  # only a shortcut: each subject's call still does its own work
                run.log.warning(f"step {step.name}: preparing the wave failed ({type(exc).__name__}: {exc})")
        calls = (
            (subject, _call_script(step, subject, values[subject.key], script_context)) for subject in batch
        )
        yield from in_write_groups(calls)
        return
    chat = (
        step.chat is not None and run.llm.resolve_style(step.model, run.use_case.prompt_style) == CHAT_STYLE
    )
    ready: list[tuple[tuple[SubjectChain, _StepCall], LLMRequest]] = []
    unrendered: list[tuple[SubjectChain, _StepCall]] = []
    for subject in batch:
        inputs = _inputs(values[subject.key], subject)
        messages = None
        try:
            if chat:
                messages, truncated = step.render_chat(inputs)
                prompt, system_prompt = messages_text(messages), ""
            else:
                prompt, system_prompt, truncated = step.render(inputs)
        except TemplateVariableError as exc:  # never send a prompt with a literal {placeholder}
            unrendered.append((subject, _StepCall("", "", {}, error=ItemError(f"step {step.name}: {exc}"))))
            continue
        request = LLMRequest(step.model, prompt, system_prompt, step.output_schema, step.options, messages)
        ready.append(((subject, _StepCall(prompt, system_prompt, truncated, chat=chat)), request))
    yield from in_write_groups(unrendered)
    fence = lambda item: run.fence(item[0].key)  # noqa: E731 - (subject, call) -> the subject's claim
    for group in generate_in_ready_groups(run.llm, ready, WRITES_PER_TRANSACTION, fence=fence):
        yield [
            (
                subject,
                replace(call, generation=result)
                if isinstance(result, Generation)
                else replace(call, error=result),
            )
            for (subject, call), result in group
        ]


def _fenced(run: BatchRun, subject: SubjectChain, call: _StepCall, active: dict[str, SubjectChain]) -> bool:
    """Whether the step was not called because the claim is lost: the subject leaves the chain."""
    if not isinstance(call.error, ClaimLost):
        return False
    active.pop(subject.key, None)
    run.drop_lost_claim(subject.key)
    return True


def _inputs(values: Mapping[str, Any], subject: SubjectChain) -> dict[str, Any]:
    """Template variables by precedence: chain state, then upstream outputs, then subject fields."""
    return {**values, **subject.state}


def _call_script(
    step: Step, subject: SubjectChain, values: Mapping[str, Any], script_context: ScriptContext
) -> _StepCall:
    step_context = StepContext(
        resources=script_context.resources,
        app_db=script_context.app_db,
        log=script_context.log,
        history=tuple(subject.history),
        visits=dict(subject.visits),
        ending=subject.ending,
    )
    prompt = json.dumps(subject.state, ensure_ascii=False, sort_keys=True, default=str)
    started = time.perf_counter()
    try:
        value = step.function(_inputs(values, subject), step_context)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    except Exception as exc:  # a failing script is this subject's error, never a crashed run
        return _StepCall(prompt, "", {}, error=ItemError(f"step {step.name}: {type(exc).__name__}: {exc}"))
    generation = Generation(text, None, None, (time.perf_counter() - started) * 1000)
    return _StepCall(prompt, "", {}, generation=generation, value=value)


def _parse(step: Step, call: _StepCall, inputs: Mapping[str, Any]) -> Any:
    """The step's output value; raises ItemError saying what is wrong."""
    if step.is_script:
        if step.output_schema is not None:
            try:
                validate_json(call.value, step.output_schema)
            except jsonschema.ValidationError as exc:
                raise ItemError(f"step {step.name}: the output breaks its schema: {exc.message}") from exc
        return call.value
    if step.output_schema is None:
        text = call.generation.text.strip()
        if not text:
            raise ItemError(f"step {step.name}: the model returned an empty response")
        return text
    try:
        return parse_output(step, call.generation.text, inputs)
    except ItemError as exc:
        raise ItemError(f"step {step.name}: {exc}") from exc


@dataclass
class _Routed:
    """What one finished step comes to: its parsed value, its own error, where the chain goes next, why
    the subject fails (the step's error, a spent budget, an unusable final output) and the final output."""

    value: Any = None
    step_error: str | None = None
    decision: Decision | None = None
    failure: str | None = None
    final: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Settled:
    """A step done and routed for one subject, before it is stored: its visit number and why the
    chain ends (None while it goes on)."""

    subject: SubjectChain
    step: Step
    call: _StepCall
    visit: int
    routed: _Routed
    ended: str | None


def _settle(
    run: BatchRun,
    step: Step,
    subject: SubjectChain,
    call: _StepCall,
    values: Mapping[str, Mapping[str, Any]],
) -> _Settled:
    """Count the step, parse and route its answer, and move the subject on (to END when it fails)."""
    visit = _count_step(run, step, subject, call)
    routed = _route(run, step, subject, call, values)
    ended = _ending(step, subject, routed.decision, routed.failure)
    if routed.failure is not None:
        subject.at = END
    else:
        if routed.decision.fallback_reason is not None:
            subject.ending = routed.decision.fallback_reason
        subject.at = routed.decision.to
    return _Settled(subject, step, call, visit, routed, ended)


def _store_settled(
    run: BatchRun, settled: Sequence[_Settled]
) -> list[tuple[_Settled, tuple[int, bool] | None]]:
    """Store a group's steps in one transaction: each step's interaction (one statement for all), and
    where the chain ends the output (the interaction id and whether the claim held) or the failure."""
    use_case = run.use_case
    with run.app_db.session() as session:
        ids = interactions.record_interactions(session, [_step_call(run, done) for done in settled])
        ending: list[tuple[_Settled, int]] = []
        for done, interaction_id in zip(settled, ids, strict=True):
            if done.routed.failure is not None:
                record_failure(session, run, done.subject.key, done.routed.failure)
            elif done.routed.decision.to == END:
                ending.append((done, interaction_id))
        outputs = [
            NewOutput(
                done.subject.key,
                done.routed.final,
                done.subject.input_hash,
                run.outcome.subjects[done.subject.key]["content_hash"],
                interaction_id,
            )
            for done, interaction_id in ending
        ]
        stored = store_outputs(
            session, use_case, run.run_id, outputs, backend=run.backend, step_process=run.step_process
        )
    ended = {id(done): (interaction_id, done.subject.key in stored) for done, interaction_id in ending}
    return [(done, ended.get(id(done))) for done in settled]


def _step_call(run: BatchRun, done: _Settled) -> dict[str, Any]:
    """A subject's step as its interaction records it: what was sent, answered and decided."""
    use_case, subject, step, call, routed = run.use_case, done.subject, done.step, done.call, done.routed
    return call_fields(
        run,
        subject.key,
        use_case=use_case.name,
        model=step.model,
        backend=SCRIPT_BACKEND if step.is_script else run.llm.backend_name,
        prompt=call.prompt,
        system_prompt=call.system_prompt,
        options=_step_options(
            step, subject, call, done.visit, routed.decision, done.ended, use_case.steps.max_steps_per_subject
        ),
        generation=call.generation,
        parsed=routed.value if routed.step_error is None and isinstance(routed.value, dict) else None,
        error=routed.failure,
        status="ok" if routed.step_error is None else "item_error",
    )


def _materialization(
    run: BatchRun, done: _Settled, stored: tuple[int, bool] | None
) -> AssetMaterialization | None:
    """After the commit: count the chain's output (or the lost claim) and the materialization that logs it."""
    subject, final = done.subject, done.routed.final
    if stored is None or not run.outcome.record_stored(subject.key, final, stored[1]):
        return None
    return output_materialization(
        run,
        subject.key,
        final,
        input_hash=subject.input_hash,
        interaction_id=stored[0],
        prompt_tokens=subject.prompt_tokens,
        completion_tokens=subject.completion_tokens,
        latency_ms=subject.latency_ms,
        extra={
            "chain_path": " → ".join([*subject.path, END]),
            "chain_steps": subject.steps_taken,
            "chain_end": done.ended,
        },
    )


def _count_step(run: BatchRun, step: Step, subject: SubjectChain, call: _StepCall) -> int:
    """Count the step against the subject's budgets and its time and tokens; the step's visit number."""
    subject.visits[step.name] += 1
    subject.steps_taken += 1
    subject.path.append(step.name)
    generation = call.generation
    if generation is not None:
        subject.latency_ms += generation.latency_ms
        subject.prompt_tokens += generation.prompt_tokens or 0
        subject.completion_tokens += generation.completion_tokens or 0
        if not step.is_script:
            run.outcome.llm_ms += generation.latency_ms
    return subject.visits[step.name]


def _route(
    run: BatchRun,
    step: Step,
    subject: SubjectChain,
    call: _StepCall,
    values: Mapping[str, Mapping[str, Any]],
) -> _Routed:
    """Parse the step's answer, keep it in the subject's chain state and decide where it goes next."""
    use_case = run.use_case
    routed = _Routed()
    if call.error is not None:
        error = call.error
        routed.step_error = (
            str(error)
            if isinstance(error, ItemError)
            else f"step {step.name}: {type(error).__name__}: {error}"
        )
    else:
        try:
            routed.value = _parse(step, call, _inputs(values[subject.key], subject))
        except ItemError as exc:
            routed.step_error = str(exc)
    routed.failure = routed.step_error
    if routed.step_error is not None:
        return routed
    subject.state[step.output_name] = routed.value
    subject.history.append(StepRecord(step.name, step.output_name, subject.visits[step.name], routed.value))
    decision = use_case.steps.decide(
        step, subject.state, call.generation.text, subject.visits, subject.steps_taken
    )
    routed.decision = decision
    if decision.failed:
        routed.failure = (
            f"budget exhausted after step {step.name}: {decision.fallback_reason} "
            "(the chain declares no fallback)"
        )
    elif decision.to == END:
        try:
            routed.final = final_output(use_case, routed.value, values[subject.key])
        except ItemError as exc:
            routed.failure = str(exc)
    return routed


def _step_options(
    step: Step,
    subject: SubjectChain,
    call: _StepCall,
    visit: int,
    decision: Decision | None,
    ended: str | None,
    max_steps: int,
) -> dict[str, Any]:
    """The interaction's options: the step's own, and the chain record `pipeline trace` reads the path
    from (its visit, the route taken and the rule that chose it, the budget state, why it ended)."""
    chain_record = {
        "step": step.name,
        "visit": visit,
        "max_visits": step.max_visits,
        "step_number": subject.steps_taken,
        "max_steps": max_steps,
        "route": decision.to if decision is not None and not decision.failed else None,
        "rule": decision.rule if decision is not None else None,
        "budget_exhausted": decision.fallback_reason if decision is not None else None,
        "ended": ended,
    }
    options = {**getattr(step, "options", {}), "chain": chain_record}
    if call.truncated:
        options["truncated_chars"] = call.truncated
    if call.chat:
        options["prompt_style"] = CHAT_STYLE
    return options


def _ending(step: Step, subject: SubjectChain, decision: Decision | None, failure: str | None) -> str | None:
    """Why the chain ends after this step (None while it goes on)."""
    if failure is not None:
        return f"failed: {failure}"
    if decision.to != END:
        return None
    if subject.ending is not None:
        return f"fallback {step.name} after the budget ran out: {subject.ending}"
    if decision.rule == "no routes":
        return f"{step.name} is a last step"
    return f"route {decision.rule} to END"
