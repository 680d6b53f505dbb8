"""Runs a multi-step use case (`pipeline_defs/steps.py`) over the postings a run holds.

Batching stays by step ("waves"): all postings currently at the same step are
processed together, with that step's model loaded once, before the chain moves on;
never one posting through the whole chain at a time. The next wave is the earliest
declared step that has postings waiting, so postings that finish a loop early wait at
a later step and join the others in one wave. Consecutive calls of one step also
share their few-shot prefix, which llama.cpp evaluates once.

Every step call is a row in `interactions` (use_case = the use case's name); its
`options` hold, under "chain", the step, its visit number, the route taken and the
rule that chose it, the budget state and, on the last step, why the chain ended.
`pipeline trace` reads them back as the posting's path. A posting's chain state lives
for one run: a posting whose run died starts its chain again in the next one.
"""

import hashlib
import json
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from dagster import AssetExecutionContext, AssetMaterialization

from appdb import work
from appdb.models import utcnow
from assets.llm_use_case import (
    LEASE_RENEW_SECONDS,
    BatchOutcome,
    _existing_outputs,
    _keep_unchanged,
    _load_inputs,
    output_preview,
    parse_output,
    record_failure,
    store_output,
)
from domain.language.declaration import SCRIPT_BACKEND, UseCase, model_label
from domain.language.declaration_parts import ScriptContext, validate_json
from domain.language.llm_types import BackendUnavailable, Generation, ItemError
from domain.language.steps import END, Decision, LLMStep, Step, StepContext, StepRecord
from domain.language.templates import POSTING_VARIABLES, TemplateVariableError
from domain.quality.output_checks import first_blocking_failure
from resources.app_database import AppDatabase
from resources.llm import LLMResource


@dataclass
class PostingChain:
    """One posting's way through the chain in this run: where it is, what it has, what it spent."""

    key: str
    input_hash: str
    at: str
    visits: Counter = field(default_factory=Counter)
    steps_taken: int = 0
    state: dict[str, Any] = field(default_factory=dict)  # output_name -> latest value
    history: list[StepRecord] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    ending: str | None = None  # set when a budget ran out and the posting went to the fallback
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


def chain_input_hash(use_case: UseCase, values: Mapping[str, Any]) -> str:
    """Identity of a chain's input: its version, models, the posting's fields and upstream outputs."""
    payload = json.dumps(
        [
            use_case.name,
            use_case.version,
            list(use_case.steps.models),
            {name: values.get(name) for name in (*POSTING_VARIABLES, *use_case.upstream)},
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def run_chain(
    context: AssetExecutionContext,
    use_case: UseCase,
    app_db: AppDatabase,
    llm: LLMResource | None,
    held: Sequence[str],
    remaining: set[str],
    run_id: str,
    source: str,
    force: bool,
    outcome: BatchOutcome,
) -> Iterator[Any]:
    """Take every held posting through the chain, wave by wave; yields materializations.

    `remaining` (the keys still held) shrinks as postings finish, so the caller can give
    the rest back if the backend goes away mid-run.
    """
    chain = use_case.steps
    with app_db.session() as session:
        postings, values = _load_inputs(session, use_case, held)
        existing = _existing_outputs(session, use_case.name, held)
    outcome.postings, outcome.inputs = postings, values
    active: dict[str, PostingChain] = {}
    for key in held:
        input_hash = chain_input_hash(use_case, values[key])
        previous = existing.get(key)
        if previous is not None and previous.input_hash == input_hash and not force:
            _keep_unchanged(app_db, use_case, key, run_id, previous, postings[key], outcome)
            remaining.discard(key)
            continue
        active[key] = PostingChain(key, input_hash, chain.start)

    script_context = ScriptContext(resources=context.resources, app_db=app_db, log=context.log)
    last_renewal = time.monotonic()
    wave = 0
    while active:
        step = next(step for step in chain.steps if any(p.at == step.name for p in active.values()))
        batch = [posting for posting in active.values() if posting.at == step.name]
        wave += 1
        started = time.perf_counter()
        if not step.is_script and llm.ensure_loaded(step.model):
            context.log.info(
                f"Loaded {step.model} on the {llm.backend_name} backend "
                f"in {time.perf_counter() - started:.1f}s"
            )
        calls = _call_step(llm, step, batch, values, script_context)
        for posting, call in calls:
            if isinstance(call.error, BackendUnavailable):
                raise call.error
            event = _finish_step(app_db, use_case, llm, step, posting, call, values, run_id, source, outcome)
            if posting.at == END:
                del active[posting.key]
                remaining.discard(posting.key)
            if event is not None:
                if len(outcome.done) == 1:  # the backend serves again: reset the breaker's trip count
                    with app_db.session() as session:
                        work.clear_pause(session, use_case.name)
                yield event
            if time.monotonic() - last_renewal > LEASE_RENEW_SECONDS:
                with app_db.session() as session:
                    work.renew_claims(session, use_case.name, sorted(remaining), run_id)
                last_renewal = time.monotonic()
        context.log.info(
            f"{use_case.name}: wave {wave}: step {step.name} for {len(batch)} postings in "
            f"{time.perf_counter() - started:.1f}s; {len(outcome.done)} done, {len(outcome.failed)} failed, "
            f"{len(active)} still in the chain"
        )
    return outcome


def _call_step(
    llm: LLMResource | None,
    step: Step,
    batch: Sequence[PostingChain],
    values: Mapping[str, Mapping[str, Any]],
    script_context: ScriptContext,
) -> Iterator[tuple[PostingChain, _StepCall]]:
    """Run one step for every posting of the wave; yields (posting, call) in order."""
    if step.is_script:
        for posting in batch:
            yield posting, _call_script(step, posting, values[posting.key], script_context)
        return
    ready: list[tuple[PostingChain, _StepCall]] = []
    for posting in batch:
        try:
            prompt, system_prompt, truncated = step.render(_inputs(values[posting.key], posting))
        except TemplateVariableError as exc:  # never send a prompt with a literal {placeholder}
            yield posting, _StepCall("", "", {}, error=ItemError(f"step {step.name}: {exc}"))
            continue
        ready.append((posting, _StepCall(prompt, system_prompt, truncated)))

    def generate(item: tuple[PostingChain, _StepCall]) -> tuple[PostingChain, _StepCall]:
        posting, call = item
        try:
            generation = llm.generate(
                step.model, call.prompt, call.system_prompt, _grammar(step), dict(step.options)
            )
        except Exception as exc:  # every failure becomes a recorded outcome, never a crashed run
            return posting, _StepCall(call.prompt, call.system_prompt, call.truncated, error=exc)
        return posting, _StepCall(call.prompt, call.system_prompt, call.truncated, generation=generation)

    if llm.max_in_flight <= 1:
        yield from map(generate, ready)
        return
    with ThreadPoolExecutor(max_workers=llm.max_in_flight) as pool:  # at most max_in_flight open at once
        window: deque[Future] = deque()
        for item in ready:
            window.append(pool.submit(generate, item))
            if len(window) >= llm.max_in_flight:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def _grammar(step: LLMStep) -> dict[str, Any] | None:
    return dict(step.output_schema) if step.output_schema is not None else None


def _inputs(values: Mapping[str, Any], posting: PostingChain) -> dict[str, Any]:
    """Template variables by precedence: chain state, then upstream outputs, then posting fields."""
    return {**values, **posting.state}


def _call_script(
    step: Step, posting: PostingChain, values: Mapping[str, Any], script_context: ScriptContext
) -> _StepCall:
    step_context = StepContext(
        resources=script_context.resources,
        app_db=script_context.app_db,
        log=script_context.log,
        history=tuple(posting.history),
        visits=dict(posting.visits),
        ending=posting.ending,
    )
    prompt = json.dumps(posting.state, ensure_ascii=False, sort_keys=True, default=str)
    started = time.perf_counter()
    try:
        value = step.function(_inputs(values, posting), step_context)
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    except Exception as exc:  # a failing script is this posting's error, never a crashed run
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


def _finish_step(
    app_db: AppDatabase,
    use_case: UseCase,
    llm: LLMResource | None,
    step: Step,
    posting: PostingChain,
    call: _StepCall,
    values: Mapping[str, Mapping[str, Any]],
    run_id: str,
    source: str,
    outcome: BatchOutcome,
) -> AssetMaterialization | None:
    """Record the step's interaction, route the posting, and store the output when the chain ends."""
    chain = use_case.steps
    posting.visits[step.name] += 1
    posting.steps_taken += 1
    posting.path.append(step.name)
    visit = posting.visits[step.name]
    generation = call.generation
    if generation is not None:
        posting.latency_ms += generation.latency_ms
        posting.prompt_tokens += generation.prompt_tokens or 0
        posting.completion_tokens += generation.completion_tokens or 0
        if not step.is_script:
            outcome.llm_ms += generation.latency_ms

    step_error: str | None = None
    value: Any = None
    decision: Decision | None = None
    if call.error is not None:
        error = call.error
        step_error = (
            str(error)
            if isinstance(error, ItemError)
            else f"step {step.name}: {type(error).__name__}: {error}"
        )
    else:
        try:
            value = _parse(step, call, _inputs(values[posting.key], posting))
        except ItemError as exc:
            step_error = str(exc)
    failure = step_error
    if step_error is None:
        posting.state[step.output_name] = value
        posting.history.append(StepRecord(step.name, step.output_name, visit, value))
        decision = chain.decide(step, posting.state, generation.text, posting.visits, posting.steps_taken)
        if decision.failed:
            failure = (
                f"budget exhausted after step {step.name}: {decision.fallback_reason} "
                "(the chain declares no fallback)"
            )
    final: dict[str, Any] | None = None
    if decision is not None and decision.to == END and failure is None:
        try:
            final = _final_output(use_case, value, values[posting.key])
        except ItemError as exc:
            failure = str(exc)
    ended = _ending(step, posting, decision, failure)
    chain_record = {
        "step": step.name,
        "visit": visit,
        "max_visits": step.max_visits,
        "step_number": posting.steps_taken,
        "max_steps": chain.max_steps_per_posting,
        "route": decision.to if decision is not None and not decision.failed else None,
        "rule": decision.rule if decision is not None else None,
        "budget_exhausted": decision.fallback_reason if decision is not None else None,
        "ended": ended,
    }
    options = {**getattr(step, "options", {}), "chain": chain_record}
    if call.truncated:
        options["truncated_chars"] = call.truncated
    backend = SCRIPT_BACKEND if step.is_script else llm.backend_name
    with app_db.session() as session:
        interaction_id = work.record_interaction(
            session,
            use_case=use_case.name,
            use_case_version=use_case.version,
            posting_key=posting.key,
            backend=backend,
            model=step.model,
            prompt=call.prompt,
            system_prompt=call.system_prompt,
            options=options,
            raw_response=generation.text if generation is not None else None,
            parsed_output=value if step_error is None and isinstance(value, dict) else None,
            prompt_tokens=generation.prompt_tokens if generation is not None else None,
            completion_tokens=generation.completion_tokens if generation is not None else None,
            latency_ms=generation.latency_ms if generation is not None else None,
            status="ok" if step_error is None else "item_error",
            error=failure,
            source=source,
            run_id=run_id,
            finished_at=utcnow(),
        )
        if failure is not None:
            posting.at = END
            record_failure(session, use_case, posting.key, run_id, failure, outcome)
            return None
        if decision.fallback_reason is not None:
            posting.ending = decision.fallback_reason
        posting.at = decision.to
        if decision.to != END:
            return None
        stored = store_output(
            session,
            use_case,
            posting.key,
            run_id,
            final,
            backend=llm.backend_name if llm is not None and chain.models else SCRIPT_BACKEND,
            input_hash=posting.input_hash,
            posting_hash=outcome.postings[posting.key]["content_hash"],
            interaction_id=interaction_id,
        )
    if not outcome.record_stored(posting.key, final, stored):
        return None
    return AssetMaterialization(
        asset_key=use_case.name,
        partition=posting.key,
        metadata={
            "model": model_label(use_case),
            "use_case_version": use_case.version,
            "chain_path": " → ".join([*posting.path, END]),
            "chain_steps": posting.steps_taken,
            "chain_end": ended,
            "prompt_tokens": posting.prompt_tokens,
            "completion_tokens": posting.completion_tokens,
            "latency_ms": round(posting.latency_ms, 1),
            "preview": output_preview(use_case, final),
            "interaction_id": interaction_id,
            "input_hash": posting.input_hash,
            "source": source,
        },
    )


def _final_output(use_case: UseCase, value: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The last step's output, through the use case's postprocess and output schema."""
    if use_case.postprocess is not None:
        try:
            value = use_case.postprocess(value, inputs)
        except ValueError as exc:
            raise ItemError(f"chain output: {exc}") from exc
        except Exception as exc:  # a bug in a declared postprocess is this item's error, not a crash
            raise ItemError(f"chain output: postprocess failed: {type(exc).__name__}: {exc}") from exc
    try:
        use_case.validate_output(value)
    except jsonschema.ValidationError as exc:
        raise ItemError(f"chain output breaks the use case's output schema: {exc.message}") from exc
    blocked = first_blocking_failure(use_case.checks, value, inputs)
    if blocked is not None:  # the gym's blocking checks apply to a chain's result as to any output
        raise blocked
    return value


def _ending(step: Step, posting: PostingChain, decision: Decision | None, failure: str | None) -> str | None:
    """Why the chain ends after this step (None while it goes on)."""
    if failure is not None:
        return f"failed: {failure}"
    if decision.to != END:
        return None
    if posting.ending is not None:
        return f"fallback {step.name} after the budget ran out: {posting.ending}"
    if decision.rule == "no routes":
        return f"{step.name} is a last step"
    return f"route {decision.rule} to END"
