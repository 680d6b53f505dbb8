"""Storing what a run made: the interaction, the output (only while the claim holds), or the failure.

Single calls, chains and the review's delivered values all store an output the same way
(`store_outputs`), so a use case's `after_store` hook runs in the same transaction wherever it comes from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import AssetMaterialization, MetadataValue, TableColumn, TableRecord, TableSchema

from appdb import claims, events, interactions
from appdb.models import UseCaseOutput, utcnow
from assets.batch_state import CLAIM_LOST, PARKED_NOTE, BatchRun
from assets.run_tags import COST_TAG_PREFIX
from domain.language.declaration import UseCase, model_label
from domain.language.llm_types import Generation

PREVIEW_CHARS = 300
PREVIEW_ROWS = 50


def record_call(session: Any, run: BatchRun, key: str, **call: Any) -> int:
    """Store one call exactly as sent and answered (LLM, script or judge); its interaction id."""
    return interactions.record_interaction(session, **call_fields(run, key, **call))


def call_fields(
    run: BatchRun,
    key: str,
    *,
    use_case: str,
    model: str,
    backend: str,
    prompt: str,
    system_prompt: str,
    options: Mapping[str, Any],
    generation: Generation | None,
    parsed: Any,
    error: str | None,
    status: str | None = None,
) -> dict[str, Any]:
    """A call as `interactions.record_interactions` stores it: what was sent and answered, by which run."""
    return {
        "use_case": use_case,
        "use_case_version": run.use_case.version,
        "subject_key": key,
        "backend": backend,
        "model": model,
        "prompt": prompt,
        "system_prompt": system_prompt,
        "options": dict(options),
        "raw_response": generation.text if generation is not None else None,
        "parsed_output": parsed,
        "prompt_tokens": generation.prompt_tokens if generation is not None else None,
        "completion_tokens": generation.completion_tokens if generation is not None else None,
        "latency_ms": generation.latency_ms if generation is not None else None,
        "cost": run.cost_of(model, generation),
        "status": status or ("ok" if error is None else "item_error"),
        "error": error,
        "source": run.source,
        "run_id": run.run_id,
        "finished_at": utcnow(),
    }


@dataclass(frozen=True)
class NewOutput:
    """An output to store for a subject, from this subject content and this recorded call."""

    key: str
    value: dict[str, Any]
    input_hash: str
    subject_hash: str
    interaction_id: int | None


def store_outputs(
    session: Any,
    use_case: UseCase,
    run_id: str,
    outputs: Sequence[NewOutput],
    *,
    backend: str,
    step_process: str | None = None,
) -> set[str]:
    """Write the current outputs of the subjects this run still holds, then the use case's `after_store`
    hook for them, in the caller's transaction; the keys stored (a lost claim writes nothing).
    `step_process`: the step's own process row, when it runs away from its run (`claims._step_fence`)."""
    if not outputs:
        return set()
    rows = {
        output.key: output_row(
            use_case, output.value, backend, output.input_hash, output.subject_hash, output.interaction_id
        )
        for output in outputs
    }
    stored = claims.complete_items(session, use_case.name, run_id, rows, step_process=step_process)
    if stored and use_case.after_store is not None:
        use_case.after_store(
            session, {output.key: output.value for output in outputs if output.key in stored}
        )
    return stored


def output_row(
    use_case: UseCase,
    value: dict[str, Any],
    backend: str,
    input_hash: str,
    subject_hash: str,
    interaction_id: int | None,
) -> dict[str, Any]:
    """An output as `claims.complete_item` stores it: this version and model, from this subject content."""
    return {
        "value": value,
        "model": model_label(use_case),
        "backend": backend,
        "use_case_version": use_case.version,
        "input_hash": input_hash,
        "subject_hash": subject_hash,
        "interaction_id": interaction_id,
    }


def record_failure(session: Any, run: BatchRun, key: str, error: str) -> None:
    """Spend one attempt (the last one parks the subject) and report the error in the run."""
    status = claims.fail_item(session, run.use_case.name, key, run.run_id, error, policy=run.use_case.retry)
    events.record_event(
        session,
        "error",
        use_case=run.use_case.name,
        run_id=run.run_id,
        source=run.source,
        error_class=events.error_class(error),
        reason=error[:2000],
        detail={"key": key, "parked": status == "failed"},
    )
    run.outcome.failed[key] = error if status != "failed" else f"{error} {PARKED_NOTE}"


def record_run_cost(run: BatchRun) -> None:
    """Sum the run's calls for this use case into its outcome, a tag on the run (`pipeline/cost_<use
    case>`: cost, calls, tokens; the UI shows it with the run) and the event log (`run_cost`)."""
    with run.app_db.session() as session:
        calls, prompt_tokens, completion_tokens, cost = events.run_cost(
            session, run.run_id, run.use_case.name
        )
        if calls:
            events.record_event(
                session,
                "run_cost",
                use_case=run.use_case.name,
                run_id=run.run_id,
                source=run.source,
                count=calls,
                model=model_label(run.use_case),
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost=cost,
            )
    outcome = run.outcome
    outcome.calls, outcome.tokens, outcome.cost = calls, prompt_tokens + completion_tokens, cost
    if calls:
        run.context.instance.add_run_tags(
            run.run_id,
            {f"{COST_TAG_PREFIX}{run.use_case.name}": f"{cost:.6f} ({calls} calls, {outcome.tokens} tokens)"},
        )


def fail(run: BatchRun, key: str, error: str) -> None:
    """`record_failure` in a transaction of its own, and the subject is finished for this run."""
    with run.app_db.session() as session:
        record_failure(session, run, key, error)
    run.finished(key)


def keep_unchanged(run: BatchRun, key: str, previous: UseCaseOutput) -> None:
    """The input is byte-identical to the one that made the stored output: mark it current, call nothing."""
    subject = run.outcome.subjects[key]
    with run.app_db.session() as session:
        # same input hash: same model (a script may be renamed); its after_store already ran
        row = output_row(
            run.use_case,
            previous.value,
            previous.backend,
            previous.input_hash,
            subject["content_hash"],
            previous.interaction_id,
        )
        held = claims.complete_item(
            session, run.use_case.name, key, run.run_id, row, step_process=run.step_process
        )
    if held:
        run.outcome.unchanged.append(key)
    else:
        run.outcome.failed[key] = CLAIM_LOST
    run.finished(key)


def output_preview(use_case: UseCase, output: Mapping[str, Any]) -> MetadataValue:
    """The materialization's preview: the declared field (a list of objects, such as skills, as a table
    with a column per plain field of its schema), else the whole output as text, cut short."""
    if not use_case.preview_field:
        return MetadataValue.text(json.dumps(output)[:PREVIEW_CHARS])
    value = output.get(use_case.preview_field, "")
    columns = table_columns(use_case.output_schema, use_case.preview_field)
    if isinstance(value, list) and columns:
        rows = [item for item in value if isinstance(item, Mapping)][:PREVIEW_ROWS]
        return MetadataValue.table(
            [TableRecord({name: _cell(row.get(name)) for name, _ in columns}) for row in rows],
            schema=TableSchema([TableColumn(name, kind) for name, kind in columns]),
        )
    return MetadataValue.text(str(value)[:PREVIEW_CHARS])


_TABLE_TYPES = {"string": "string", "integer": "int", "number": "float", "boolean": "bool"}


def table_columns(schema: Mapping[str, Any], field: str) -> list[tuple[str, str]]:
    """(name, Dagster column type) of each plain field of the objects listed in `field`, in the schema's
    order; nested lists and objects are left out (a cell holds one value). Empty: not a list of objects."""
    items = schema.get("properties", {}).get(field, {}).get("items", {})
    columns = []
    for name, spec in items.get("properties", {}).items():
        types = spec.get("type", "string" if "enum" in spec else None)
        types = [types] if isinstance(types, str) else [kind for kind in types or () if kind != "null"]
        if len(types) == 1 and types[0] in _TABLE_TYPES:
            columns.append((name, _TABLE_TYPES[types[0]]))
    return columns


def _cell(value: Any) -> str | int | float | bool | None:
    return value if value is None or isinstance(value, str | int | float | bool) else json.dumps(value)


def reasons_table(reasons: Mapping[str, str], noun: str, limit: int = 50) -> MetadataValue:
    """Subjects (a column named by their `noun`) and why they failed, as a table the UI shows row by row
    (the first `limit`)."""
    key_name = noun.replace(" ", "_")
    return MetadataValue.table(
        [TableRecord({key_name: key, "reason": reason}) for key, reason in list(reasons.items())[:limit]],
        schema=TableSchema([TableColumn(key_name, "string"), TableColumn("reason", "string")]),
    )


def output_materialization(
    run: BatchRun,
    key: str,
    value: Mapping[str, Any],
    *,
    input_hash: str,
    interaction_id: int | None,
    prompt_tokens: int,
    completion_tokens: int,
    latency_ms: float,
    extra: Mapping[str, Any] | None = None,
) -> AssetMaterialization:
    """The materialization of one stored output, with the numbers the UI plots and the ids to trace it.

    Only numbers worth a plot are numbers: token counts for a use case that calls a model (a script's
    are always 0), the latency; the interaction's id is text (the UI plots every integer as a line)."""
    use_case = run.use_case
    tokens = (
        {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens} if use_case.uses_llm else {}
    )
    ids = {} if interaction_id is None else {"interaction_id": MetadataValue.text(str(interaction_id))}
    return AssetMaterialization(
        asset_key=use_case.name,
        partition=key,
        metadata={
            "model": model_label(use_case),
            "backend": run.backend,
            "use_case_version": use_case.version,
            **(extra or {}),
            **tokens,
            "latency_ms": round(latency_ms, 1),
            "preview": output_preview(use_case, value),
            **ids,
            "input_hash": input_hash,
            "source": run.source,
        },
    )
