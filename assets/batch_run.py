"""The batch loop every declared use case runs: one run processes a batch of subjects.

A run covers a range of subject partitions. Within it, the use case's asset:
1. asks discovery which subjects still need this use case (current ones are skipped),
2. claims them, so no other run works on the same subject at the same time,
3. processes them: one call per subject (`single_call.py`) or a chain of steps in waves
   (`chain_runner.py`), the model loaded once, each output stored with its exact interaction and
   logged as a materialization of that subject's partition (only subjects actually done),
4. reports the declared checks over the batch, and lets the gym flag and judge (`gym_checks.py`).

An unreachable backend or a missing model ends the run early, gives the claims back, spends no attempts
and pauses the use case (the circuit breaker); a bad output counts against that subject only.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetMaterialization,
    Failure,
    MetadataValue,
)

from appdb import claims, discovery, inputs, pauses
from assets.batch_state import BatchOutcome, BatchRun
from assets.chain_runner import run_chain
from assets.check_reports import reported_checks
from assets.gym_checks import after_batch
from assets.host_turns import host_turn
from assets.outputs import reasons_table, record_run_cost
from assets.partitions import partition_positions
from assets.provenance import provenance_for, with_provenance
from assets.run_tags import CONTINUE_TAG, run_source
from assets.single_call import run_single_calls
from domain.language.declaration import UseCase, code_version
from domain.language.declaration_parts import ScriptContext
from domain.language.llm_types import BackendUnavailable
from domain.language.output_parsing import blocked_subjects
from resources.app_database import AppDatabase, RunNotAlive
from resources.llm import LLMResource

ITEMS_OK_CHECK = "outputs_valid"
CONTINUE_POLL_SECONDS = 1.0  # a run following its upstream looks for new inputs this often
CONTINUE_IDLE_SECONDS = 60.0  # and ends after this long without any
CLAIM_RACE_LOOKS = 5  # a run going on looks again this often when other runs claimed what it found


def process_batch(
    context: AssetExecutionContext,
    use_case: UseCase,
    spec: discovery.WorkSpec,
    app_db: AppDatabase,
    llm: LLMResource | None,
    *,
    force: bool = False,
) -> Iterator[Any]:
    """Process the run's subjects; yields Dagster events, returns the outcome."""
    try:
        with app_db.step_heartbeat(context.run.run_id, use_case.name) as step_process:
            return (yield from _process_batch(context, use_case, spec, app_db, llm, force, step_process))
    except RunNotAlive as exc:
        raise Failure(description=str(exc)) from None


def _process_batch(
    context: AssetExecutionContext,
    use_case: UseCase,
    spec: discovery.WorkSpec,
    app_db: AppDatabase,
    llm: LLMResource | None,
    force: bool,
    step_process: str | None,
) -> Generator[Any, None, BatchOutcome]:
    run = BatchRun(context, use_case, app_db, llm, context.run.run_id, run_source(context.run.tags), force)
    run.step_process = step_process
    keys = list(context.partition_keys)
    with app_db.session() as session:
        todo = discovery.find_pending_work(session, spec, within=keys, include_current=force)
    with app_db.session() as session:
        held = claims.claim_items(
            session,
            use_case.name,
            todo,
            run.run_id,
            policy=use_case.retry,
            include_parked=force,
            spec=None if force else spec,
        )
    skipped_current, skipped_held_elsewhere = len(keys) - len(todo), len(todo) - len(held)
    context.log.info(
        f"{use_case.name}: {len(keys)} {use_case.subject.plural} in this run: {len(held)} to do, "
        f"{skipped_current} skipped (already current, waiting for upstream, or backing off), "
        f"{skipped_held_elsewhere} skipped (held by another run)"
    )
    going_on_for = continue_seconds(context.run.tags) if not force else 0.0
    going_on_until = time.monotonic() + going_on_for
    batch, batches = held, 0
    if not batch and going_on_for:  # started ahead of its inputs (following its upstream's run)
        batch = next_batch(run, spec, going_on_until)
    while batch:
        provenance = provenance_for(context.instance, code_version(use_case), use_case, batch)  # staleness
        yield from with_provenance(_process_held(run, batch), provenance.tag)
        batches += 1
        batch = next_batch(run, spec, going_on_until) if going_on_for else []
        if batch:
            context.log.info(f"{use_case.name}: going on with {len(batch)} more {use_case.subject.plural}")
    if batches > 1:
        context.log.info(f"{use_case.name}: {batches} batches in this run")
    record_run_cost(run)
    outcome = run.outcome
    outcome.skipped_current, outcome.skipped_held_elsewhere = skipped_current, skipped_held_elsewhere
    # evaluations recorded when evaluated, naming this run's materialization (check_reports.py)
    checks = [*check_results(use_case, outcome), *after_batch(run)]  # after_batch: review items, judge
    yield from reported_checks(context, use_case.name, outcome, checks)
    if outcome.parked:
        yield from _recorded_current(run, keys, todo)
        raise Failure(
            description=(
                f"{use_case.name}: {len(outcome.parked)} {use_case.subject.plural} failed "
                f"{use_case.retry.max_attempts} times "
                "and are parked: `pipeline failures` lists them, `pipeline retry` re-queues them"
            ),
            metadata={"parked": MetadataValue.json(outcome.parked), "done": len(outcome.done)},
        )
    return outcome


def continue_seconds(tags: Mapping[str, str]) -> float:
    """How long the run keeps claiming more work after its own batch: its `CONTINUE_TAG` (set by the
    discovery sensors), else 0."""
    try:
        return max(0.0, float(tags.get(CONTINUE_TAG, 0)))
    except ValueError:
        return 0.0


def next_batch(run: BatchRun, spec: discovery.WorkSpec, until: float) -> list[str]:
    """Claim the next batch of the use case's pending subjects (at most its batch size, only subjects
    Dagster knows as partitions, oldest first) for this run; [] when there is none and none is coming.

    A script use case reading others' outputs waits for the next ones while some of its upstream is
    still held by a run or not yet taken (looking again when discovery's change marker moves), never
    past `until`: as long as a live claim holds some of that upstream (a running run is making it: the
    discovery sensor may start this run before the first of it is written), else at most
    `CONTINUE_IDLE_SECONDS` without new work. While it waits it loads what its function needs
    (`UseCase.warm_up`: the resolver), so the first inputs find it ready. Any other use case stops at
    once when nothing is pending; when other runs claimed what it found first, it looks again (up to
    `CLAIM_RACE_LOOKS` times). Claims are taken as any run takes them (`claims.claim_items`,
    discovery asked again under the claim), so a subject is never done twice."""
    use_case, instance = run.use_case, run.context.instance
    size = use_case.batch_size
    # an LLM step waiting would hold the `llm` pool, one slot on the embedded model: it never waits
    follows_upstream = bool(spec.upstream_specs) and not use_case.uses_llm
    marker, idle_since, lost_races = None, time.monotonic(), 0
    while time.monotonic() < until:
        being_made = coming = False
        if follows_upstream:  # asked before looking for work: upstream done now means written by then
            with run.app_db.session() as session:
                being_made, coming = discovery.upstream_work(session, spec.upstream_specs.values())
        with run.app_db.session() as session:
            now_marker = discovery.change_marker(session, spec.subjects)
            # the last look before giving up never trusts the marker: a write stamped before another
            # that committed first leaves it unmoved
            look = now_marker != marker or not coming
            pending = discovery.find_pending_work(session, spec) if look else []
            marker = now_marker
        if pending:
            candidates = pending[: 2 * size]  # the newest may not be partitions yet: the sensor adds them
            known = partition_positions(instance, candidates, use_case.subject_kind)
            keys = [key for key in candidates if key in known][:size]
            with run.app_db.session() as session:
                held = claims.claim_items(
                    session, use_case.name, keys, run.run_id, policy=use_case.retry, spec=spec
                )
            if held:
                return held
            marker = None  # found, none claimed (rows locked a moment, not partitions yet): look again
            if keys and not follows_upstream and lost_races < CLAIM_RACE_LOOKS:
                # Several runs draw on one backlog, oldest first: another claimed these between this
                # run's look and its claim. The next look leaves them out; ending here would cost a
                # new run (a process start) for work that is waiting.
                lost_races += 1
                continue
        if not follows_upstream:
            return []
        if being_made:
            idle_since = time.monotonic()
        if not (coming or pending) or time.monotonic() - idle_since > CONTINUE_IDLE_SECONDS:
            return []
        warm_up(run)
        time.sleep(CONTINUE_POLL_SECONDS)
    return []


def warm_up(run: BatchRun) -> None:
    """Load what the use case's function needs (`UseCase.warm_up`), once per run, while it waits."""
    if run.warmed or run.use_case.warm_up is None:
        return
    run.warmed = True
    started = time.perf_counter()
    context = ScriptContext(resources=run.context.resources, app_db=run.app_db, log=run.log)
    try:
        run.use_case.warm_up(context)
    except Exception as exc:  # the first subject loads it then, and reports what fails
        run.log.warning(f"{run.use_case.name}: warm-up failed ({type(exc).__name__}: {exc})")
        return
    run.log.info(
        f"{run.use_case.name}: warmed up while waiting for inputs ({time.perf_counter() - started:.1f}s)"
    )


def _process_held(run: BatchRun, held: list[str]) -> Iterator[AssetMaterialization]:
    """Single calls or a chain over the held subjects, with the claims given back if the run stops."""
    run.remaining = set(held)
    for check in run.use_case.checks:
        if check.warm_up is not None:  # loads beside the first calls, before the first output needs it
            threading.Thread(target=check.warm_up, name=f"warm-up {check.name}", daemon=True).start()
    try:
        with host_turn(run):  # several runs per host: one after another, each started and ready
            if run.use_case.steps is not None:  # a multi-step use case: run by step, in waves
                yield from run_chain(run, held)
            else:
                yield from run_single_calls(run, held)
    except BackendUnavailable as exc:
        raise _trip_breaker(run, exc) from exc
    except BaseException:
        # Anything else (a database error, a kill signal): give the claims back now rather than
        # leaving them to the lease sweep; if even that fails, the lease expiry frees them.
        with contextlib.suppress(Exception), run.app_db.session() as session:
            claims.release_items(session, run.use_case.name, sorted(run.remaining), run.run_id)
        raise


def _trip_breaker(run: BatchRun, exc: BackendUnavailable) -> Failure:
    """The circuit breaker: stop at the first infrastructure error, spend no attempts, and pause the
    use case so the sensor requests no runs until the resume time. With several hosts only the run's
    host is paused: the sensor gives its subjects to the others."""
    name = run.use_case.name
    host = run.llm.pinned_host if run.llm is not None and run.llm.several_hosts else None
    paused = host.pause_key if host is not None else name
    with run.app_db.session() as session:
        released = claims.release_items(session, name, sorted(run.remaining), run.run_id)
        resume_at = pauses.pause_use_cases(
            session, [paused], pauses.outage_reason(run.backend, exc), policy=run.use_case.retry
        )
    return Failure(
        description=(
            f"{name}: the LLM backend is unavailable, run stopped and {paused} paused "
            f"until {resume_at:%Y-%m-%d %H:%M:%S} UTC (`pipeline resume` to retry sooner)"
            + (f": its {run.use_case.subject.plural} go to the other hosts" if host is not None else "")
            + f": {exc}"
        ),
        metadata={
            "done_before_stop": len(run.outcome.done),
            "claims_released": released,
            "attempts_spent": 0,
            "paused_until_utc": f"{resume_at:%Y-%m-%d %H:%M:%S}",
        },
    )


def _recorded_current(
    run: BatchRun, keys: Sequence[str], todo: Sequence[str]
) -> Iterator[AssetMaterialization]:
    """Failing the step is how Dagster marks parked subjects failed in the UI; the outputs and check
    results are already recorded. Subjects of the range that were already current are re-recorded first,
    or the failed run would mark them failed too."""
    skipped = set(keys) - set(todo)
    with run.app_db.session() as session:
        existing = inputs.existing_outputs(session, run.use_case.name, sorted(skipped))
    for key in keys:
        if key in existing:
            yield AssetMaterialization(
                asset_key=run.use_case.name,
                partition=key,
                metadata={
                    "unchanged": True,
                    "note": "already current; recorded so this run's failure skips it",
                },
            )


def check_results(use_case: UseCase, outcome: BatchOutcome) -> Iterator[AssetCheckResult]:
    """Evaluate the built-in and declared checks over this run's outputs, naming failing subjects."""
    yield AssetCheckResult(
        check_name=ITEMS_OK_CHECK,
        passed=not outcome.failed,
        metadata={
            "done": len(outcome.done),
            "unchanged_input": len(outcome.unchanged),
            "failed": len(outcome.failed),
            "skipped_current": outcome.skipped_current,
            "skipped_held_elsewhere": outcome.skipped_held_elsewhere,
            # a script's runs call no model: no line of zeros to plot
            **({"llm_seconds": round(outcome.llm_ms / 1000, 2)} if use_case.uses_llm else {}),
            "failures": reasons_table(outcome.failed, use_case.subject.noun),
            **_figures(use_case, outcome),
        },
    )
    for check in use_case.checks:
        if check.blocking:  # every stored output passed it as it was parsed: the failing were not stored
            failing = blocked_subjects(check.name, outcome.failed)
        else:
            failing = {}
            for key, value in outcome.outputs.items():
                reason = check.check(value, outcome.subjects.get(key, {}))
                if reason:
                    failing[key] = reason
        outcome.check_failures[check.name] = failing  # the gym turns them into review items
        yield AssetCheckResult(
            check_name=check.name,
            passed=not failing,
            severity=AssetCheckSeverity.ERROR if check.blocking else AssetCheckSeverity.WARN,
            metadata={
                "checked": len(outcome.outputs),
                "failing": len(failing),
                f"failing_{use_case.subject_kind}": reasons_table(failing, use_case.subject.noun),
            },
        )


def _figures(use_case: UseCase, outcome: BatchOutcome) -> dict[str, Any]:
    """The use case's own figures over the outputs this run made, as numbers the UI plots."""
    if use_case.run_figures is None or not outcome.outputs:
        return {}
    figures = use_case.run_figures(list(outcome.outputs.values()))
    return {name: MetadataValue.float(float(value)) for name, value in figures.items()}
