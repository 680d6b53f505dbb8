"""The asset every declared use case becomes: one run processes a batch of postings.

A run covers a range of posting partitions. Within it, the asset:
1. asks discovery which postings still need this use case (current ones are skipped),
2. claims them, so no other run works on the same posting at the same time,
3. for an LLM use case loads the model once (a script use case loads none), then for
   each posting renders the prompt (or gathers the script's inputs), calls the LLM
   (or the script), validates and stores the output with the exact interaction, and
   logs a materialization for that posting's partition (only postings actually done),
4. reports progress with an ETA, and evaluates the declared checks over the batch.

An unreachable backend or a missing model ends the run early, gives the claims back
and spends no attempts; a bad output counts against that posting only.
"""

import contextlib
import itertools
import json
import time
import warnings
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    BackfillPolicy,
    BetaWarning,
    Config,
    Failure,
    MetadataValue,
    asset,
)
from sqlalchemy import select

from appdb import work
from appdb.models import Posting, ReferenceData, UseCaseOutput, utcnow
from assets import gym
from assets.partitions import POSTING_PARTITIONS
from assets.provenance import provenance_for, with_provenance
from domain.language.declaration import SCRIPT_BACKEND, UseCase, model_label
from domain.language.declaration_parts import ScriptContext
from domain.language.llm_types import BackendUnavailable, Generation, ItemError
from domain.language.templates import POSTING_VARIABLES, TemplateVariableError
from domain.quality.output_checks import (
    BlockedOutput,
    blocked_postings,
    describe_check,
    first_blocking_failure,
)
from resources.app_database import AppDatabase
from resources.llm import LLMResource

# BackfillPolicy is beta in Dagster 1.13; we rely on it on purpose (UI backfills run in batches).
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=BetaWarning)

ITEMS_OK_CHECK = "outputs_valid"
PREVIEW_CHARS = 300
PROGRESS_EVERY_SECONDS = 5.0
LEASE_RENEW_SECONDS = work.DEFAULT_LEASE_SECONDS / 4
SOURCE_TAG = "pipeline/source"
PARKED_NOTE = "(parked after repeated failures)"
CLAIM_LOST = "claim lost (lease expired and taken by another run); output not written"
REQUEST_HANDOFF_SECONDS = 0.002


class UseCaseRunConfig(Config):
    """force: redo postings whose output is already current (and retry parked ones)."""

    force: bool = False


@dataclass
class BatchOutcome:
    done: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    postings: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped_current: int = 0
    skipped_held_elsewhere: int = 0
    llm_ms: float = 0.0
    check_failures: dict[str, dict[str, str]] = field(default_factory=dict)  # check -> posting -> reason

    def record_stored(self, key: str, value: dict[str, Any], stored: bool) -> bool:
        """Count a posting done, or failed when its claim was lost before the output was written."""
        if not stored:
            self.failed[key] = CLAIM_LOST
            return False
        self.done.append(key)
        self.outputs[key] = value
        return True


@dataclass(frozen=True)
class _Prepared:
    key: str
    prompt: str
    system_prompt: str
    input_hash: str
    truncated: dict[str, int]


def run_source(tags: Mapping[str, str]) -> str:
    """Where a run came from: sensor, backfill, cli/test (tagged by us), or the UI."""
    if tags.get(SOURCE_TAG):
        return tags[SOURCE_TAG]
    if tags.get("dagster/sensor_name"):
        return "sensor"
    if tags.get("dagster/backfill"):
        return "backfill"
    return "ui"


def build_use_case_asset(use_case: UseCase, spec: work.WorkSpec) -> AssetsDefinition:
    """The partitioned asset for one declared use case, with its checks."""
    check_specs = [
        AssetCheckSpec(
            ITEMS_OK_CHECK,
            asset=use_case.name,
            description="Every posting in the batch produced a valid output (names the failures).",
        ),
        *(
            # A blocking check gates each output (a failing one is rejected, not stored), so it is
            # not Dagster-blocking: that would fail the whole run and hold back the good outputs.
            AssetCheckSpec(check.name, asset=use_case.name, description=describe_check(check))
            for check in use_case.checks
        ),
        *gym.gym_check_specs(use_case),
    ]

    @asset(
        name=use_case.name,
        description=use_case.description,
        partitions_def=POSTING_PARTITIONS,
        deps=[
            AssetKey("postings"),
            *(AssetKey(name) for name in (*use_case.upstream, *use_case.reference_inputs)),
        ],
        code_version=code_version(use_case),
        output_required=False,
        backfill_policy=BackfillPolicy.multi_run(max_partitions_per_run=use_case.batch_size),
        check_specs=check_specs,
        pool=None if use_case.is_script else "llm",
        kinds={"python"},
        group_name="enrichment",
        required_resource_keys={
            "app_db",
            "gym",
            *use_case.resources,
            *(() if use_case.is_script else ("llm",)),
        },
        metadata={
            "model": model_label(use_case),
            "use_case_version": use_case.version,
            "batch_size": use_case.batch_size,
        },
    )
    def _use_case_asset(context: AssetExecutionContext, config: UseCaseRunConfig) -> Iterator[Any]:
        app_db: AppDatabase = context.resources.app_db
        llm = None if use_case.is_script else context.resources.llm
        outcome = yield from process_batch(context, use_case, spec, app_db, llm, force=config.force)
        context.log.info(
            f"{use_case.name}: finished: {len(outcome.done)} done, {len(outcome.unchanged)} unchanged input, "
            f"{len(outcome.failed)} failed"
        )

    return _use_case_asset


def code_version(use_case: UseCase) -> str:
    """Dagster's code version: the use case's version and its model, both part of an output's identity."""
    return f"{use_case.version}@{model_label(use_case)}"


def process_batch(
    context: AssetExecutionContext,
    use_case: UseCase,
    spec: work.WorkSpec,
    app_db: AppDatabase,
    llm: LLMResource | None,
    *,
    force: bool = False,
) -> Iterator[Any]:
    """Process the run's postings; yields Dagster events, returns the outcome."""
    run_id = context.run.run_id
    source = run_source(context.run.tags)
    keys = list(context.partition_keys)
    with app_db.session() as session:
        todo = work.find_pending_work(session, spec, within=keys, include_current=force)
    with app_db.session() as session:
        held = work.claim_items(
            session, use_case.name, todo, run_id, include_parked=force, spec=None if force else spec
        )
    skipped_current, skipped_held_elsewhere = len(keys) - len(todo), len(todo) - len(held)
    context.log.info(
        f"{use_case.name}: {len(keys)} postings in this run: {len(held)} to do, "
        f"{skipped_current} skipped (already current, waiting for upstream, or backing off), "
        f"{skipped_held_elsewhere} skipped (held by another run)"
    )
    outcome = BatchOutcome()
    if held:
        provenance = provenance_for(context.instance, code_version(use_case), use_case, held)  # staleness
        events = _process_held(context, use_case, app_db, llm, held, run_id, source, force)
        outcome = yield from with_provenance(events, provenance.tag)
    outcome.skipped_current, outcome.skipped_held_elsewhere = skipped_current, skipped_held_elsewhere
    yield from _check_results(use_case, outcome)
    yield from gym.after_batch(context, use_case, app_db, llm, outcome, source)  # review items, judge
    parked = sorted(key for key, error in outcome.failed.items() if error.endswith(PARKED_NOTE))
    if parked:
        # Failing the step is how Dagster marks these partitions failed in the UI; the outputs
        # and check results above are already recorded. Postings of the range that were
        # already current are re-recorded first, or the failed run would mark them failed too.
        skipped = set(keys) - set(todo)
        with app_db.session() as session:
            existing = _existing_outputs(session, use_case.name, sorted(skipped))
        already_current = [key for key in keys if key in existing]
        for key in already_current:
            yield AssetMaterialization(
                asset_key=use_case.name,
                partition=key,
                metadata={
                    "unchanged": True,
                    "note": "already current; recorded so this run's failure skips it",
                },
            )
        raise Failure(
            description=(
                f"{use_case.name}: {len(parked)} postings failed {work.DEFAULT_MAX_ATTEMPTS} times and are "
                "parked: `pipeline failures` lists them, `pipeline retry` re-queues them"
            ),
            metadata={"parked": MetadataValue.json(parked), "done": len(outcome.done)},
        )
    return outcome


def _process_held(
    context: AssetExecutionContext,
    use_case: UseCase,
    app_db: AppDatabase,
    llm: LLMResource | None,
    held: list[str],
    run_id: str,
    source: str,
    force: bool,
) -> Iterator[Any]:
    outcome = BatchOutcome()
    remaining = set(held)
    backend = llm.backend_name if llm is not None else SCRIPT_BACKEND
    try:
        if use_case.steps is not None:  # a multi-step use case: run by step, in waves
            from assets.chain import run_chain

            args = (context, use_case, app_db, llm, held, remaining, run_id, source, force, outcome)
            return (yield from run_chain(*args))
        started = time.perf_counter()
        if llm is not None and llm.ensure_loaded(use_case.model):
            seconds = time.perf_counter() - started
            context.log.info(f"Loaded {use_case.model} on the {llm.backend_name} backend in {seconds:.1f}s")
        with app_db.session() as session:
            postings, values = _load_inputs(session, use_case, held)
            existing = _existing_outputs(session, use_case.name, held)
            references = _reference_hashes(session, use_case)
        outcome.postings = postings
        outcome.inputs = values
        prepared: list[_Prepared] = []
        for key in held:
            try:
                prompt, system_prompt, truncated, input_hash = _prepare(use_case, values[key], references)
            except TemplateVariableError as exc:
                _fail(app_db, use_case, key, run_id, str(exc), outcome)
                remaining.discard(key)
                continue
            previous = existing.get(key)
            if previous is not None and previous.input_hash == input_hash and not force:
                _keep_unchanged(app_db, use_case, key, run_id, previous, postings[key], outcome)
                remaining.discard(key)
                continue
            prepared.append(_Prepared(key, prompt, system_prompt, input_hash, truncated))

        progress = _Progress(context, use_case.name, len(prepared))
        last_renewal = time.monotonic()
        results = (
            _run_script_all(context, app_db, use_case, prepared, values)
            if llm is None
            else _generate_all(llm, use_case, prepared)
        )
        for item, result in results:
            if isinstance(result, BackendUnavailable):
                raise result
            if time.monotonic() - last_renewal > LEASE_RENEW_SECONDS:
                with app_db.session() as session:
                    work.renew_claims(session, use_case.name, sorted(remaining), run_id)
                last_renewal = time.monotonic()
            event = _store_result(
                app_db, use_case, backend, item, result, postings[item.key], run_id, source, outcome
            )
            remaining.discard(item.key)
            if event is not None:
                if len(outcome.done) == 1:  # the backend serves again: reset the breaker's trip count
                    with app_db.session() as session:
                        work.clear_pause(session, use_case.name)
                yield event
            progress.step(failed=len(outcome.failed))
    except BackendUnavailable as exc:
        # The circuit breaker: stop at the first infrastructure error, spend no attempts, and
        # pause the use case so the sensor requests no runs until the resume time.
        with app_db.session() as session:
            released = work.release_items(session, use_case.name, sorted(remaining), run_id)
            resume_at = work.pause_use_cases(
                session, [use_case.name], f"{backend} backend unavailable: {exc}"
            )
        raise Failure(
            description=(
                f"{use_case.name}: the LLM backend is unavailable, run stopped and {use_case.name} paused "
                f"until {resume_at:%Y-%m-%d %H:%M:%S} UTC (`pipeline resume` to retry sooner): {exc}"
            ),
            metadata={
                "done_before_stop": len(outcome.done),
                "claims_released": released,
                "attempts_spent": 0,
                "paused_until_utc": f"{resume_at:%Y-%m-%d %H:%M:%S}",
            },
        ) from exc
    except BaseException:
        # Anything else (a database error, a kill signal): give the claims back now rather than
        # leaving them to the lease sweep; if even that fails, the lease expiry frees them.
        with contextlib.suppress(Exception), app_db.session() as session:
            work.release_items(session, use_case.name, sorted(remaining), run_id)
        raise
    return outcome


def _load_inputs(
    session: Any, use_case: UseCase, keys: Sequence[str]
) -> tuple[dict[str, dict], dict[str, dict]]:
    """Posting fields and upstream outputs for each key (template variables)."""
    postings: dict[str, dict[str, Any]] = {}
    for row in session.scalars(select(Posting).where(Posting.key.in_(keys))):
        postings[row.key] = {name: getattr(row, name) for name in POSTING_VARIABLES}
        postings[row.key]["content_hash"] = row.content_hash
    values: dict[str, dict[str, Any]] = {}
    for key, posting in postings.items():
        values[key] = {
            name: (posting[name] if posting[name] is not None else "not stated") for name in POSTING_VARIABLES
        }
        values[key]["posted_at"] = str(posting["posted_at"]) if posting["posted_at"] else "not stated"
    if use_case.upstream:
        upstream_rows = session.scalars(
            select(UseCaseOutput).where(
                UseCaseOutput.use_case.in_(use_case.upstream), UseCaseOutput.posting_key.in_(keys)
            )
        )
        for row in upstream_rows:
            values[row.posting_key][row.use_case] = row.value
    return postings, values


def _reference_hashes(session: Any, use_case: UseCase) -> dict[str, str]:
    if not use_case.reference_inputs:
        return {}
    rows = session.scalars(select(ReferenceData).where(ReferenceData.name.in_(use_case.reference_inputs)))
    return {row.name: row.content_hash for row in rows}


def _prepare(
    use_case: UseCase, values: Mapping[str, Any], references: Mapping[str, str]
) -> tuple[str, str, dict[str, int], str]:
    """(prompt, system prompt, chars cut, input hash); a script's "prompt" is its inputs as JSON."""
    if use_case.is_script:
        inputs = {name: values.get(name) for name in use_case.upstream}
        prompt = json.dumps(inputs, ensure_ascii=False, sort_keys=True, default=str)
        return prompt, "", {}, use_case.script_input_hash(values, references)
    prompt, system_prompt, truncated = use_case.render(values)
    return prompt, system_prompt, truncated, use_case.input_hash(use_case.model, prompt, system_prompt)


def _run_script_all(
    context: AssetExecutionContext,
    app_db: AppDatabase,
    use_case: UseCase,
    prepared: Sequence[_Prepared],
    values: Mapping[str, Mapping[str, Any]],
) -> Iterator[tuple[_Prepared, Generation | Exception]]:
    """Call a script use case's function per posting; its output goes through the same parsing."""
    script_context = ScriptContext(resources=context.resources, app_db=app_db, log=context.log)
    for item in prepared:
        started = time.perf_counter()
        try:
            output = use_case.function(values[item.key], script_context)
            text = json.dumps(output, ensure_ascii=False)
        except Exception as exc:  # a failing script is this posting's error, never a crashed run
            yield item, ItemError(f"{type(exc).__name__}: {exc}")
            continue
        yield item, Generation(text, None, None, (time.perf_counter() - started) * 1000)


def _existing_outputs(session: Any, use_case: str, keys: Sequence[str]) -> dict[str, UseCaseOutput]:
    rows = session.scalars(
        select(UseCaseOutput).where(UseCaseOutput.use_case == use_case, UseCaseOutput.posting_key.in_(keys))
    )
    return {row.posting_key: row for row in rows}


def _generate_all(
    llm: LLMResource, use_case: UseCase, prepared: Sequence[_Prepared]
) -> Iterator[tuple[_Prepared, Generation | Exception]]:
    """Call the LLM for each item, keeping up to `llm.max_in_flight` requests open; yields in order.

    A request is sent as soon as a slot frees, before the caller stores the previous result, so
    the bookkeeping of each posting (output, interaction, Dagster event) overlaps the next call
    instead of leaving the backend idle; even with one request in flight the backend stays busy.
    """

    def call(item: _Prepared) -> Generation | Exception:
        try:
            return llm.generate(
                use_case.model,
                item.prompt,
                item.system_prompt,
                dict(use_case.grammar_schema),
                dict(use_case.options),
            )
        except Exception as exc:  # every failure becomes a recorded outcome, never a crashed run
            return exc

    slots = max(1, llm.max_in_flight)
    with ThreadPoolExecutor(max_workers=slots) as pool:
        pending = iter(prepared)
        window: deque[tuple[_Prepared, Future]] = deque(
            (item, pool.submit(call, item)) for item in itertools.islice(pending, slots)
        )
        while window:
            item, future = window.popleft()
            result = future.result()
            next_item = next(pending, None)
            if next_item is not None and not isinstance(result, BackendUnavailable):
                window.append((next_item, pool.submit(call, next_item)))
                # Let that thread put its request on the wire before this one's bookkeeping holds the
                # GIL: CPU-bound Python keeps it in 5 ms slices, which delayed each send by ~10 ms.
                time.sleep(REQUEST_HANDOFF_SECONDS)
            yield item, result


def parse_output(use_case: UseCase, text: str, inputs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Parse, validate and postprocess one raw response; raises ItemError saying what is wrong.

    `inputs` are the posting fields and upstream outputs the prompt was made from
    (postprocess uses them, e.g. to check that mentions are grounded in the posting).
    """
    if not text.strip():
        raise ItemError("the model returned an empty response")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        value = salvage_truncated_json(text)
        if value is None:
            raise ItemError(f"the response is not valid JSON: {exc.msg} at character {exc.pos}") from exc
    except (ValueError, RecursionError) as exc:  # e.g. a 5,000-digit number, or nesting 100,000 deep
        raise ItemError(f"the response cannot be read as JSON: {type(exc).__name__}: {exc}"[:500]) from exc
    try:
        use_case.validate_generation(value)
    except jsonschema.ValidationError as exc:
        raise ItemError(f"the response breaks the output schema: {exc.message}") from exc
    if use_case.postprocess is not None:
        try:
            value = use_case.postprocess(value, inputs or {})
        except ValueError as exc:
            raise ItemError(str(exc)) from exc
        except Exception as exc:  # a bug in a declared postprocess is this item's error, not a crash
            raise ItemError(f"postprocess failed: {type(exc).__name__}: {exc}") from exc
    if use_case.generation_schema is not None or use_case.postprocess is not None:
        try:
            use_case.validate_output(value)
        except jsonschema.ValidationError as exc:
            raise ItemError(f"the processed output breaks the output schema: {exc.message}") from exc
    # a chain's steps declare no checks: its final output is checked in assets/chain.py
    blocked = first_blocking_failure(getattr(use_case, "checks", ()), value, inputs or {})
    if blocked is not None:  # a bad output must not flow downstream: rejected like an unusable answer
        raise blocked
    return value


def salvage_truncated_json(text: str) -> Any | None:
    """Keep the complete items of a response cut off at max_tokens (small models run on in lists).

    Cuts back to the last complete list item and closes the open brackets; returns None
    when nothing sensible remains. The schema check that follows still applies.
    """
    stack: list[str] = []
    in_string = escaped = False
    last_item_end: tuple[int, list[str]] | None = None
    for position, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]":
            if not stack or stack.pop() != char:
                return None
            if stack and stack[-1] == "]":
                last_item_end = (position, list(stack))
    if last_item_end is None:
        return None
    position, open_brackets = last_item_end
    try:
        return json.loads(text[: position + 1] + "".join(reversed(open_brackets)))
    except (ValueError, RecursionError):
        return None


def _store_result(
    app_db: AppDatabase,
    use_case: UseCase,
    backend: str,
    item: _Prepared,
    result: Generation | Exception,
    posting: Mapping[str, Any],
    run_id: str,
    source: str,
    outcome: BatchOutcome,
) -> AssetMaterialization | None:
    """Record the interaction, then the output (or the failure), in one transaction per posting."""
    error: str | None = None
    parsed: dict[str, Any] | None = None
    generation = result if isinstance(result, Generation) else None
    if generation is None:
        error = f"{type(result).__name__}: {result}" if not isinstance(result, ItemError) else str(result)
    else:
        outcome.llm_ms += generation.latency_ms
        try:
            parsed = parse_output(use_case, generation.text, outcome.inputs.get(item.key))
        except ItemError as exc:
            error = str(exc)
            parsed = exc.value if isinstance(exc, BlockedOutput) else None  # kept in the trace
    options = {**use_case.options}
    if item.truncated:
        options["truncated_chars"] = item.truncated
    with app_db.session() as session:
        interaction_id = work.record_interaction(
            session,
            use_case=use_case.name,
            use_case_version=use_case.version,
            posting_key=item.key,
            backend=backend,
            model=model_label(use_case),
            prompt=item.prompt,
            system_prompt=item.system_prompt,
            options=options,
            raw_response=generation.text if generation else None,
            parsed_output=parsed,
            prompt_tokens=generation.prompt_tokens if generation else None,
            completion_tokens=generation.completion_tokens if generation else None,
            latency_ms=generation.latency_ms if generation else None,
            status="ok" if error is None else "item_error",
            error=error,
            source=source,
            run_id=run_id,
            finished_at=utcnow(),
        )
        if error is not None:
            record_failure(session, use_case, item.key, run_id, error, outcome)
            return None
        stored = store_output(
            session,
            use_case,
            item.key,
            run_id,
            parsed,
            backend=backend,
            input_hash=item.input_hash,
            posting_hash=posting["content_hash"],
            interaction_id=interaction_id,
        )
    if not outcome.record_stored(item.key, parsed, stored):
        return None
    return AssetMaterialization(
        asset_key=use_case.name,
        partition=item.key,
        metadata={
            "model": model_label(use_case),
            "backend": backend,
            "use_case_version": use_case.version,
            "prompt_tokens": generation.prompt_tokens or 0,
            "completion_tokens": generation.completion_tokens or 0,
            "latency_ms": round(generation.latency_ms, 1),
            "preview": output_preview(use_case, parsed),
            "interaction_id": interaction_id,
            "input_hash": item.input_hash,
            "source": source,
        },
    )


def store_output(
    session: Any,
    use_case: UseCase,
    key: str,
    run_id: str,
    value: dict[str, Any],
    *,
    backend: str,
    input_hash: str,
    posting_hash: str,
    interaction_id: int | None,
) -> bool:
    """Write the current output while this run still holds the claim, then the use case's
    `after_store` hook in the same transaction. False: the claim was lost, nothing written."""
    row = _output_row(use_case, value, backend, input_hash, posting_hash, interaction_id)
    stored = work.complete_item(session, use_case.name, key, run_id, row)
    if stored and use_case.after_store is not None:
        use_case.after_store(session, key, value)
    return stored


def _output_row(
    use_case: UseCase,
    value: dict[str, Any],
    backend: str,
    input_hash: str,
    posting_hash: str,
    interaction_id: int | None,
) -> dict[str, Any]:
    """An output as `work.complete_item` stores it: this version and model, from this posting content."""
    return {
        "value": value,
        "model": model_label(use_case),
        "backend": backend,
        "use_case_version": use_case.version,
        "input_hash": input_hash,
        "posting_hash": posting_hash,
        "interaction_id": interaction_id,
    }


def record_failure(
    session: Any, use_case: UseCase, key: str, run_id: str, error: str, outcome: BatchOutcome
) -> None:
    """Spend one attempt (the last one parks the posting) and report the error in the run."""
    status = work.fail_item(session, use_case.name, key, run_id, error)
    outcome.failed[key] = error if status != "failed" else f"{error} {PARKED_NOTE}"


def output_preview(use_case: UseCase, output: Mapping[str, Any]) -> MetadataValue:
    """The materialization's preview: the declared field, else the whole output, cut short."""
    text = str(output.get(use_case.preview_field, "")) if use_case.preview_field else json.dumps(output)
    return MetadataValue.text(text[:PREVIEW_CHARS])


def _keep_unchanged(
    app_db: AppDatabase,
    use_case: UseCase,
    key: str,
    run_id: str,
    previous: UseCaseOutput,
    posting: Mapping[str, Any],
    outcome: BatchOutcome,
) -> None:
    """The prompt is byte-identical to the one that made the stored output: mark it current, call nothing."""
    with app_db.session() as session:
        # same input hash: same model (a script may be renamed); its after_store already ran
        row = _output_row(
            use_case,
            previous.value,
            previous.backend,
            previous.input_hash,
            posting["content_hash"],
            previous.interaction_id,
        )
        held = work.complete_item(session, use_case.name, key, run_id, row)
    if held:
        outcome.unchanged.append(key)
    else:
        outcome.failed[key] = CLAIM_LOST


def _fail(
    app_db: AppDatabase, use_case: UseCase, key: str, run_id: str, error: str, outcome: BatchOutcome
) -> None:
    with app_db.session() as session:
        record_failure(session, use_case, key, run_id, error, outcome)


def _check_results(use_case: UseCase, outcome: BatchOutcome) -> Iterator[AssetCheckResult]:
    """Evaluate the built-in and declared checks over this run's outputs, naming failing postings."""
    yield AssetCheckResult(
        check_name=ITEMS_OK_CHECK,
        passed=not outcome.failed,
        metadata={
            "done": len(outcome.done),
            "unchanged_input": len(outcome.unchanged),
            "failed": len(outcome.failed),
            "skipped_current": outcome.skipped_current,
            "skipped_held_elsewhere": outcome.skipped_held_elsewhere,
            "llm_seconds": round(outcome.llm_ms / 1000, 2),
            "failures": MetadataValue.json(dict(list(outcome.failed.items())[:50])),
        },
    )
    for check in use_case.checks:
        failing = {}
        for key, value in outcome.outputs.items():
            reason = check.check(value, outcome.postings.get(key, {}))
            if reason:
                failing[key] = reason
        if check.blocking:
            failing.update(blocked_postings(check.name, outcome.failed))
        outcome.check_failures[check.name] = failing  # the gym turns them into review items
        yield AssetCheckResult(
            check_name=check.name,
            passed=not failing,
            severity=AssetCheckSeverity.ERROR if check.blocking else AssetCheckSeverity.WARN,
            metadata={
                "checked": len(outcome.outputs),
                "failing": len(failing),
                "failing_postings": MetadataValue.json(dict(list(failing.items())[:50])),
            },
        )


class _Progress:
    """Logs done/total, seconds per posting and ETA every few seconds."""

    def __init__(self, context: AssetExecutionContext, name: str, total: int) -> None:
        self.context, self.name, self.total = context, name, total
        self.done = 0
        self.started = self.last_log = time.perf_counter()

    def step(self, failed: int) -> None:
        self.done += 1
        now = time.perf_counter()
        if self.done < self.total and self.done > 1 and now - self.last_log < PROGRESS_EVERY_SECONDS:
            return
        self.last_log = now
        per_item = (now - self.started) / self.done
        eta = per_item * (self.total - self.done)
        self.context.log.info(
            f"{self.name}: {self.done}/{self.total} postings ({failed} failed), {per_item:.1f}s per posting, "
            f"ETA {eta:.0f}s"
        )
