"""A use case of one call per subject (an LLM prompt, or a script function) over the subjects a run holds.

For each held subject: render the prompt (or gather the script's inputs) and its input hash; a subject
whose input is byte-identical to the one that made its stored output is kept as it is (nothing called);
the rest go to the LLM (`assets/llm_calls.py`, in order, several in flight) or the script, and each
result is parsed, checked and stored with its exact interaction. Results share a transaction a group
at a time (`assets/write_groups.py`; a slow server's answers are committed one by one, as each comes).
Dagster's materializations of a transaction's outputs are then written together
(`assets/event_batches.py`). When storing a group fails, a script's group is taken back whole (the next
run does it again, cheaply); an LLM's answers are stored again one at a time, so those before the
failing one are kept. A database that stays away loses the answers of the group being stored (at most
`WRITES_PER_TRANSACTION`, those that came in together): the next run asks for them again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import AssetMaterialization

from appdb import claims, inputs, interactions
from assets.batch_state import BatchRun, ClaimLost
from assets.event_batches import asset_events_in_batches
from assets.llm_calls import LLMRequest, generate_in_ready_groups
from assets.outputs import (
    NewOutput,
    call_fields,
    fail,
    keep_unchanged,
    output_materialization,
    record_failure,
    store_outputs,
)
from assets.write_groups import WRITES_PER_TRANSACTION, in_write_groups
from domain.language.chat_prompts import CHAT_STYLE, COMPLETION_STYLE, messages_text, retry_messages
from domain.language.declaration import model_label
from domain.language.declaration_parts import ScriptContext
from domain.language.llm_types import BackendUnavailable, Generation, ItemError
from domain.language.output_parsing import BlockedOutput, parse_output
from domain.language.templates import TemplateVariableError, retry_note, retry_options, retry_prompt

PROGRESS_EVERY_SECONDS = 5.0


@dataclass(frozen=True)
class PreparedCall:
    key: str
    prompt: str  # in chat form: the messages as stored in the trace
    system_prompt: str
    input_hash: str
    truncated: dict[str, int]
    options: dict[str, Any]
    messages: list[dict[str, str]] | None = None


def run_single_calls(run: BatchRun, held: Sequence[str]) -> Iterator[AssetMaterialization]:
    """Process every held subject; yields one materialization per stored output."""
    use_case = run.use_case
    style = COMPLETION_STYLE
    if run.llm is not None:
        run.load_model(use_case.model)
        style = run.llm.resolve_style(use_case.model, use_case.prompt_style)
    with run.app_db.session() as session:
        subjects, values = inputs.load_inputs(
            session, use_case.subject.table, held, use_case.subject_variables, use_case.upstream
        )
        existing = inputs.existing_outputs(session, use_case.name, held)
        references = inputs.reference_hashes(session, use_case.reference_inputs)
        failed_before = claims.earlier_failures(session, use_case.name, held) if use_case.uses_llm else {}
    run.outcome.subjects.update(subjects)  # a run going on adds each batch's to the earlier ones
    run.outcome.inputs.update(values)
    prepared: list[PreparedCall] = []
    for key in held:
        try:
            call = use_case.prepare(values[key], references, style)
        except TemplateVariableError as exc:
            fail(run, key, str(exc))
            continue
        previous = existing.get(key)
        if previous is not None and previous.input_hash == call.input_hash and not run.force:
            keep_unchanged(run, key, previous)
            continue
        options = dict(use_case.options)
        prompt, messages = call.prompt, call.messages
        if key in failed_before:  # a retry varies: the earlier error in the prompt, another seed
            attempts, error = failed_before[key]
            if messages is None:
                prompt = retry_prompt(prompt, error, use_case.subject.noun)
            else:
                messages = retry_messages(messages, retry_note(error, use_case.subject.noun))
                prompt = messages_text(messages)
            options = retry_options(options, attempts)
        if messages is not None:
            options["prompt_style"] = CHAT_STYLE
        prepared.append(
            PreparedCall(key, prompt, call.system_prompt, call.input_hash, call.truncated, options, messages)
        )

    progress = Progress(run, len(prepared))
    if run.llm is None:
        groups = in_write_groups(_call_script_all(run, prepared, references))
    else:
        groups = _generate_all(run, prepared)
    with asset_events_in_batches(run.context.instance) as flush:
        for answered in groups:
            group = [pair for pair in answered if not _fenced(run, *pair)]
            if not group:
                continue
            run.renew_claims_if_due()  # between transactions: the renewal must not wait on this run's own
            llm_ms = run.outcome.llm_ms
            try:
                written = _store_group(run, group)
            except Exception:
                if run.llm is None or len(group) == 1:
                    raise  # a script's group is taken back whole; the next run does it again
                # Answers cost model calls: those before the one that fails are kept, one at a time
                # (the failing one raises again, as it would have alone).
                run.outcome.llm_ms = llm_ms
                for pair in group:
                    yield from _announce(run, _store_group(run, [pair]), progress)
                flush()
                continue
            yield from _announce(run, written, progress)
            flush()  # the group's materializations, in one write


def _fenced(run: BatchRun, item: PreparedCall, result: Generation | Exception) -> bool:
    """Whether the call was not made because the claim is lost (the subject is then counted failed)."""
    if isinstance(result, ClaimLost):
        run.drop_lost_claim(item.key)
        return True
    return False


def _store_group(
    run: BatchRun, group: Sequence[tuple[PreparedCall, Generation | Exception]]
) -> list[tuple[PreparedCall, _Written | None]]:
    """Store a group's results in one transaction, a statement for all its interactions and two for its
    outputs (a statement per subject was most of a script run's CPU): the outputs, or the failures."""
    results = [_Result.of(run, item, result) for item, result in group]
    with run.app_db.session() as session:
        ids = interactions.record_interactions(session, [result.call for result in results])
        outputs = []
        for result, interaction_id in zip(results, ids, strict=True):
            if result.error is not None:
                record_failure(session, run, result.item.key, result.error)
            else:
                subject_hash = run.outcome.subjects[result.item.key]["content_hash"]
                outputs.append(
                    NewOutput(
                        result.item.key, result.parsed, result.item.input_hash, subject_hash, interaction_id
                    )
                )
        stored = store_outputs(
            session, run.use_case, run.run_id, outputs, backend=run.backend, step_process=run.step_process
        )
    return [
        (
            result.item,
            None
            if result.error is not None
            else _Written(result.parsed, result.item.key in stored, interaction_id, result.generation),
        )
        for result, interaction_id in zip(results, ids, strict=True)
    ]


def _announce(
    run: BatchRun, written: Sequence[tuple[PreparedCall, _Written | None]], progress: Progress
) -> Iterator[AssetMaterialization]:
    """Committed: now the outputs count, and Dagster hears of them."""
    for item, stored in written:
        run.finished(item.key)
        event = _materialization(run, item, stored)
        if event is not None:
            run.note_served()
            yield event
        progress.step(failed=len(run.outcome.failed))


def _generate_all(
    run: BatchRun, prepared: Sequence[PreparedCall]
) -> Iterator[list[tuple[PreparedCall, Generation | Exception]]]:
    """The answers in groups, each stored in one transaction: those answered by the time the group's
    first is (`generate_in_ready_groups`), at most `WRITES_PER_TRANSACTION`."""
    use_case = run.use_case
    requests = (
        (
            item,
            LLMRequest(
                use_case.model,
                item.prompt,
                item.system_prompt,
                use_case.grammar_schema,
                _generation_options(item.options),
                item.messages,
            ),
        )
        for item in prepared
    )
    return generate_in_ready_groups(
        run.llm, requests, WRITES_PER_TRANSACTION, fence=lambda item: run.fence(item.key)
    )


def _generation_options(options: dict[str, Any]) -> dict[str, Any]:
    """What the backend gets of the recorded options (the prompt style is the trace's, not the model's)."""
    return {name: value for name, value in options.items() if name != "prompt_style"}


def _call_script_all(
    run: BatchRun, prepared: Sequence[PreparedCall], references: dict[str, str]
) -> Iterator[tuple[PreparedCall, Generation | Exception]]:
    """Call a script use case's function per subject; its output goes through the same parsing."""
    script_context = ScriptContext(
        resources=run.context.resources, app_db=run.app_db, log=run.log, references=references
    )
    for item in prepared:
        started = time.perf_counter()
        try:
            output = run.use_case.function(run.outcome.inputs[item.key], script_context)
            text = json.dumps(output, ensure_ascii=False)
        except Exception as exc:  # a failing script is this subject's error, never a crashed run
            yield item, ItemError(f"{type(exc).__name__}: {exc}")
            continue
        yield item, Generation(text, None, None, (time.perf_counter() - started) * 1000)


@dataclass(frozen=True)
class _Written:
    """What `_store_result` wrote, counted once its transaction commits."""

    parsed: dict[str, Any]
    stored: bool
    interaction_id: int
    generation: Generation


@dataclass(frozen=True)
class _Result:
    """A subject's answer, parsed: the call to record, and the output or the error."""

    item: PreparedCall
    call: dict[str, Any]
    parsed: dict[str, Any] | None
    error: str | None
    generation: Generation | None

    @classmethod
    def of(cls, run: BatchRun, item: PreparedCall, result: Generation | Exception) -> _Result:
        """Parse the answer (an outage raises: it is no subject's fault) and count its model time."""
        if isinstance(result, BackendUnavailable):
            raise result
        use_case, outcome = run.use_case, run.outcome
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
        options = dict(item.options)
        if item.truncated:
            options["truncated_chars"] = item.truncated
        call = call_fields(
            run,
            item.key,
            use_case=use_case.name,
            model=use_case.model
            or model_label(use_case),  # the model as the backend names it; a script's label
            backend=run.backend,
            prompt=item.prompt,
            system_prompt=item.system_prompt,
            options=options,
            generation=generation,
            parsed=parsed,
            error=error,
        )
        return cls(item, call, parsed, error, generation)


def _materialization(
    run: BatchRun, item: PreparedCall, written: _Written | None
) -> AssetMaterialization | None:
    """After the commit: count the output (or the lost claim) and the materialization that logs it."""
    if written is None or not run.outcome.record_stored(item.key, written.parsed, written.stored):
        return None
    generation = written.generation
    return output_materialization(
        run,
        item.key,
        written.parsed,
        input_hash=item.input_hash,
        interaction_id=written.interaction_id,
        prompt_tokens=generation.prompt_tokens or 0,
        completion_tokens=generation.completion_tokens or 0,
        latency_ms=generation.latency_ms,
    )


class Progress:
    """Logs done/total, seconds per subject and ETA every few seconds."""

    def __init__(self, run: BatchRun, total: int) -> None:
        self.log, self.name, self.total, self.llm = run.log, run.use_case.name, total, run.llm
        self.noun, self.plural = run.use_case.subject.noun, run.use_case.subject.plural
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
        paced = self.llm.paced_seconds if self.llm is not None else 0.0
        self.log.info(
            f"{self.name}: {self.done}/{self.total} {self.plural} ({failed} failed), "
            f"{per_item:.1f}s per {self.noun}, "
            f"ETA {eta:.0f}s" + (f", {paced:.1f}s waited for the pacer" if paced else "")
        )


__all__ = ["PreparedCall", "Progress", "run_single_calls"]
