"""The gym's part of every batch run (review items, the judge), and the gold evaluation check.

After a use case's batch, `after_batch`
1. opens a review item for each output that failed a declared check (for a blocking
   check, the rejected output as the model gave it), and
2. lets the judge model grade a sample of the outputs the run made (those not graded
   before), stores the grades per output with the judge's interaction (prompt, raw
   answer, model, run: traceable like any LLM call), opens a review item for each
   output graded below the threshold, and reports the `judge_grades` asset check with
   the mean grade per criterion as numeric metadata, so the UI plots them over runs.

A judge failure never fails the run: the outputs are already stored.

The `gold_agreement` check of each use case compares its current outputs with the
corrections corpus (and public gold sets when configured). It is an asset check of
its own, run by `gym_evaluation_job`: the gym sensor requests it when the corpus or
the outputs changed, and `pipeline review` runs it after each verdict.
"""

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetsDefinition,
    AssetSelection,
    MetadataValue,
    asset_check,
    define_asset_job,
    in_process_executor,
)

# The type `define_asset_job` returns; Dagster does not export it at the top level (a type hint only).
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from appdb import inputs, interactions, review
from assets.batch_state import BatchRun
from assets.llm_calls import LLMRequest, call_llm, generate_in_order
from assets.outputs import reasons_table, record_call
from assets.run_tags import WORK_GROUP_TAG
from domain.language.chat_prompts import CHAT_STYLE, messages_text
from domain.language.declaration import SCRIPT_BACKEND, UseCase
from domain.language.llm_types import BackendUnavailable, Generation
from domain.quality.gold import GoldScores, score_corpus, score_public, whole_output
from domain.quality.judge_rubric import (
    DETERMINISTIC_JUDGE,
    JUDGE_OPTIONS,
    JUDGE_SUFFIX,
    Rubric,
    llm_grader,
    needs_review,
    overall,
)
from resources.app_database import AppDatabase
from resources.gym_resource import GymResource

JUDGE_CHECK = "judge_grades"


def is_judged(use_case: UseCase) -> bool:
    """An output the judge can read, and a judge that can grade it: a deterministic grader the use case
    declares, or an LLM (only use cases that call one have it in their runs)."""
    loop = use_case.quality
    return loop.judge_view is not None and (loop.quality_grade is not None or use_case.uses_llm)


def gym_check_specs(use_case: UseCase) -> list[AssetCheckSpec]:
    """The checks the gym adds to a use case's asset (the judge, when the use case is judged)."""
    if not is_judged(use_case):
        return []
    rubric = use_case.quality.judge_rubric
    return [
        AssetCheckSpec(
            JUDGE_CHECK,
            asset=use_case.name,
            description=(
                "A judge grades each run's new outputs (a model: a sample of them)"
                + (f" ({', '.join(rubric.criteria)}: 1-5)" if rubric else "")
                + "; outputs graded below the review threshold go to review."
            ),
        )
    ]


def after_batch(run: BatchRun) -> Iterator[AssetCheckResult]:
    """Flag outputs that failed checks for review; judge a sample (yields the judge's check result)."""
    flagged = flag_check_failures(run)
    if flagged:
        run.log.info(f"{run.use_case.name}: {flagged} outputs failed a check and are open for review")
    if is_judged(run.use_case):
        yield judge_batch(run, run.context.resources.gym)


def flag_check_failures(run: BatchRun) -> int:
    """Open (or update) a review item for each output of the batch that failed a declared check."""
    use_case, outcome, run_id = run.use_case, run.outcome, run.run_id
    findings: dict[str, list[tuple[str, str]]] = {}
    for check_name, failing in outcome.check_failures.items():  # evaluated by the run's checks
        for key, reason in failing.items():
            blocked = key not in outcome.outputs
            findings.setdefault(key, []).append((check_name, f"blocked: {reason}" if blocked else reason))
    if not findings:
        return 0
    with run.app_db.session() as session:
        stored = inputs.existing_outputs(session, use_case.name, list(findings))
        rejected = interactions.latest_run_interactions(session, use_case.name, run_id, list(findings))
        for key, found in findings.items():
            output = outcome.outputs.get(key)
            interaction_id = stored[key].interaction_id if output is not None and key in stored else None
            if output is None and key in rejected:  # blocked: the model's answer as the check saw it
                output, interaction_id = rejected[key].parsed_output, rejected[key].id
            for check_name, reason in found:
                review.flag_for_review(
                    session,
                    use_case=use_case.name,
                    subject_key=key,
                    use_case_version=use_case.version,
                    reason=f"check {check_name}: {reason}",
                    check_name=check_name,
                    output=output,
                    interaction_id=interaction_id,
                    run_id=run_id,
                )
    return len(findings)


def judge_batch(run: BatchRun, gym: GymResource) -> AssetCheckResult:
    """Grade the outputs this run made; the `judge_grades` check result.

    The deterministic judge (the default: the use case's `quality_grade`) grades every new output; an
    LLM judge (PIPELINE_JUDGE_MODEL) grades a sample under the use case's rubric, and only once it
    passed the use case's calibration set; a refused judge falls back to the deterministic one.
    """
    use_case, outcome = run.use_case, run.outcome
    rubric = gym.rubric_for(use_case.quality.judge_rubric) or Rubric({})
    judge, refusal = _choose_judge(run, gym, rubric)
    with run.app_db.session() as session:
        rows = inputs.existing_outputs(session, use_case.name, outcome.done)
        graded = review.graded_input_hashes(session, use_case.name, [row.input_hash for row in rows.values()])
    pool = [key for key in outcome.done if key in rows and rows[key].input_hash not in graded]
    if judge is None or gym.judge_sample == 0:
        sample = []
    elif judge == DETERMINISTIC_JUDGE:
        sample = pool  # cheap: every new output
    else:
        size = min(gym.judge_sample, len(pool))
        sample = sorted(random.Random(f"{run.run_id}/{use_case.name}").sample(pool, size), key=pool.index)
    grades: dict[str, dict[str, int]] = {}
    errors: dict[str, str] = {}
    flagged = 0
    for key, prompt, result in _judgements(run, judge, rubric, [(key, rows[key].value) for key in sample]):
        row = rows[key]
        graded_result = result if isinstance(result, dict) else _read_grades(rubric, result)
        with run.app_db.session() as session:
            interaction_id = record_call(
                session,
                run,
                key,
                use_case=f"{use_case.name}{JUDGE_SUFFIX}",
                model=judge,
                backend=SCRIPT_BACKEND if judge == DETERMINISTIC_JUDGE else run.llm.backend_name,
                prompt=prompt,
                system_prompt="",
                options={
                    **({} if judge == DETERMINISTIC_JUDGE else JUDGE_OPTIONS),
                    "rubric_version": rubric.version,
                    "graded_interaction": row.interaction_id,
                },
                generation=result if isinstance(result, Generation) else None,
                parsed=graded_result.get("grades"),
                error=graded_result.get("error"),
                status=graded_result["status"],
            )
            if "grades" not in graded_result:
                errors[key] = graded_result["error"]
                if graded_result["status"] == "infra_error":
                    break
                continue
            grades[key] = graded_result["grades"]
            score = overall(graded_result["grades"])
            review.record_grade(
                session,
                use_case=use_case.name,
                subject_key=key,
                use_case_version=row.use_case_version,
                input_hash=row.input_hash,
                judge_model=judge,
                rubric_version=rubric.version,
                scores=graded_result["grades"],
                overall=score,
                interaction_id=interaction_id,
                run_id=run.run_id,
            )
            if needs_review(graded_result["grades"], gym.review_below):  # any criterion below it
                flagged += 1
                review.flag_for_review(
                    session,
                    use_case=use_case.name,
                    subject_key=key,
                    use_case_version=use_case.version,
                    reason=f"judge {judge} graded {score:.1f} (a criterion below {gym.review_below:g}): "
                    + ", ".join(f"{name} {grade}" for name, grade in graded_result["grades"].items()),
                    score=score,
                    output=row.value,
                    interaction_id=row.interaction_id,
                    run_id=run.run_id,
                )
    with run.app_db.session() as session:
        current = review.current_grade_summary(session, use_case.name)
    if grades:
        mean = sum(overall(g) for g in grades.values()) / len(grades)
        run.log.info(
            f"{use_case.name}: judge {judge} graded {len(grades)} outputs, mean {mean:.2f}; "
            f"{flagged} with a criterion below {gym.review_below:g}"
        )
    return judge_check_result(rubric, gym, judge, refusal, grades, errors, flagged, len(pool), current)


def _choose_judge(run: BatchRun, gym: GymResource, rubric: Rubric) -> tuple[str | None, str | None]:
    """(the judge to use, or None for none; why the configured LLM judge was refused, if it was)."""
    use_case = run.use_case
    deterministic = DETERMINISTIC_JUDGE if use_case.quality.quality_grade is not None else None
    if gym.judge_model == DETERMINISTIC_JUDGE or run.llm is None:
        return deterministic, None
    if not rubric.criteria:
        verdict = (False, f"judge {gym.judge_model} refused: {use_case.name} declares no rubric to grade by")
    elif not gym.calibrate_judge:
        return gym.judge_model, None
    elif use_case.quality.judge_calibration is None:
        verdict = (False, f"judge {gym.judge_model} refused: {use_case.name} has no calibration set")
    else:
        with run.app_db.session() as session:
            verdict = review.judge_verdict(session, gym.judge_model, rubric.version)
        if verdict is None:
            calibration = use_case.quality.judge_calibration(gym.judge_model, _llm_grader(run, gym, rubric))
            verdict = (calibration.passed, calibration.message())
            with run.app_db.session() as session:
                review.record_judge_verdict(session, gym.judge_model, rubric.version, *verdict)
            run.log.info(f"judge {gym.judge_model}: {verdict[1]}")
    passed, message = verdict
    if passed:
        return gym.judge_model, None
    run.log.warning(f"{message}; {'the deterministic judge grades instead' if deterministic else 'no judge'}")
    return deterministic, message


def _llm_grader(run: BatchRun, gym: GymResource, rubric: Rubric) -> Any:
    """The configured LLM judge as a grader for its calibration set, through the one LLM caller."""

    chat = _judge_style(run, gym) == CHAT_STYLE

    def generate(prompt: Any, schema: dict[str, Any]) -> str:
        text, messages = (messages_text(prompt), prompt) if chat else (prompt, None)
        result = call_llm(run.llm, LLMRequest(gym.judge_model, text, "", schema, JUDGE_OPTIONS, messages))
        if isinstance(result, Exception):
            raise result
        return result.text

    return llm_grader(generate, rubric, run.use_case.name, run.use_case.subject.describe, chat=chat)


def _judge_style(run: BatchRun, gym: GymResource) -> str:
    """The judge model's prompt form: the gym's style (PIPELINE_PROMPT_STYLE), `auto` resolved by the
    backend for that model."""
    return run.llm.resolve_style(gym.judge_model, gym.prompt_style)


def _judgements(
    run: BatchRun, judge: str | None, rubric: Rubric, outputs: Sequence[tuple[str, Any]]
) -> Iterator[tuple[str, str, Generation | Exception | dict[str, Any]]]:
    """(key, what the judge was shown, its answer) per output: deterministic grades, or LLM answers."""
    use_case, loop, subjects = run.use_case, run.use_case.quality, run.outcome.subjects
    if judge == DETERMINISTIC_JUDGE:
        for key, value in outputs:
            shown = loop.judge_view(value)
            try:
                yield key, shown, {"status": "ok", "grades": loop.quality_grade(subjects[key], value)}
            except Exception as exc:  # a bug in a grader is this grade's error, never a failed run
                yield key, shown, {"status": "item_error", "error": f"{type(exc).__name__}: {exc}"}
        return
    if not outputs or judge is None:
        return  # nothing to grade: ask the backend nothing about the judge's model
    chat = _judge_style(run, run.context.resources.gym) == CHAT_STYLE
    requests = []
    for key, value in outputs:
        shown = (use_case.name, use_case.subject.describe(subjects[key]), loop.judge_view(value))
        if chat:
            messages = rubric.messages(*shown)
            request = LLMRequest(judge, messages_text(messages), "", rubric.schema, JUDGE_OPTIONS, messages)
        else:
            request = LLMRequest(judge, rubric.prompt(*shown), "", rubric.schema, JUDGE_OPTIONS)
        requests.append((key, request))
    for (key, request), result in zip(requests, _judge_calls(run.llm, requests), strict=False):
        yield key, request.prompt, result


def _judge_calls(llm: Any, requests: Sequence[tuple[str, LLMRequest]]) -> Iterator[Generation | Exception]:
    """The judge's answers in order, through the one LLM caller; none when there is no LLM."""
    if llm is None or not requests:
        return
    for _, result in generate_in_order(llm, requests):
        yield result


def _read_grades(rubric: Rubric, result: Generation | Exception) -> dict[str, Any]:
    """One judge answer's grades, or its error and status (never raises)."""
    if isinstance(result, BackendUnavailable):
        return {"status": "infra_error", "error": f"judge backend unavailable: {result}"}
    if not isinstance(result, Generation):  # a bad call is this grade's error, never a failed run
        return {"status": "item_error", "error": f"{type(result).__name__}: {result}"}
    try:
        return {"status": "ok", "grades": rubric.parse(result.text)}
    except ValueError as exc:
        return {"status": "item_error", "error": str(exc)}


def judge_check_result(
    rubric: Rubric,
    gym: GymResource,
    judge: str | None,
    refusal: str | None,
    grades: Mapping[str, Mapping[str, int]],
    errors: Mapping[str, str],
    flagged: int,
    candidates: int,
    current: review.GradeSummary,
) -> AssetCheckResult:
    """The `judge_grades` result: this run's mean grade per criterion (numeric, plotted in the UI)."""
    metadata: dict[str, Any] = {
        "judge_model": judge or "none",
        "rubric_version": rubric.version,
        "new_outputs": candidates,
        "graded": len(grades),
        "judge_errors": len(errors),
        "below_threshold": flagged,
        "review_below": MetadataValue.float(gym.review_below),
        "current_outputs_graded": current.graded,
    }
    if grades:
        for name in rubric.criteria or next(iter(grades.values())):
            metadata[name] = MetadataValue.float(
                round(sum(g[name] for g in grades.values()) / len(grades), 3)
            )
        metadata["overall"] = MetadataValue.float(
            round(sum(overall(g) for g in grades.values()) / len(grades), 3)
        )
        metadata["grades"] = MetadataValue.json({key: dict(value) for key, value in grades.items()})
    if current.overall is not None:
        metadata["current_overall"] = MetadataValue.float(round(current.overall, 3))
    if errors:
        metadata["errors"] = reasons_table(errors, "subject")
    if refusal:
        metadata["judge_refused"] = refusal
    if gym.judge_sample == 0:
        metadata["note"] = "judge turned off (PIPELINE_JUDGE_SAMPLE=0)"
    elif not grades and not errors:
        metadata["note"] = "no new output to grade in this run"
    return AssetCheckResult(
        check_name=JUDGE_CHECK,
        passed=flagged == 0 and not errors,
        severity=AssetCheckSeverity.WARN,
        metadata=metadata,
    )


# --- gold evaluation: a check of its own, run by the gym sensor and after each review -----------

GOLD_CHECK = "gold_agreement"
GYM_JOB = "gym_evaluation_job"


def build_gold_check(use_case: UseCase) -> AssetChecksDefinition:
    """The `gold_agreement` check of a use case: its current outputs against the corrections corpus."""

    @asset_check(
        asset=use_case.name,
        name=GOLD_CHECK,
        description=(
            "Current outputs against the reviewers' corrections (and public gold when configured): "
            "precision, recall, F1 and agreement."
        ),
        required_resource_keys={"app_db", "gym"},
    )
    def _gold_check(context: AssetCheckExecutionContext) -> AssetCheckResult:
        return gold_check_result(use_case, context.resources.app_db, context.resources.gym)

    return _gold_check


def batch_selection(assets: Sequence[AssetsDefinition]) -> AssetSelection:
    """What a batch job runs: the assets, without planning their checks. Each run reports the checks'
    results as evaluations of its own materializations (`assets/check_reports.py`): a check planned by
    the run would show "Not evaluated" in the UI when runs overlap. The gold checks run in
    `gym_evaluation_job`."""
    return AssetSelection.assets(*assets).without_checks()


def build_gym_job(checks: list[AssetChecksDefinition]) -> UnresolvedAssetJobDefinition:
    return define_asset_job(
        GYM_JOB,
        selection=AssetSelection.checks(*checks),
        description="Evaluate every use case's current outputs against the gold (corrections, public sets).",
        tags={WORK_GROUP_TAG: "gym"},
        # one process for every use case's check: Dagster's default started a process per check (each
        # loading the code location, 2-3 s of CPU) on top of the run's own
        executor_def=in_process_executor,
    )


def gold_check_result(use_case: UseCase, app_db: AppDatabase, gym: GymResource) -> AssetCheckResult:
    """Precision, recall, F1 and agreement (numeric metadata, plotted by the UI over evaluations)."""
    with app_db.session() as session:
        pairs = review.gold_pairs(session, use_case.name, use_case.version)
        rejected = len(review.rejected_keys(session, use_case.name, use_case.version))
        public, path = use_case.quality.public_gold, gym.public_gold_paths.get(use_case.name)
        public_scores = None
        if public is not None and path:
            gold = public.load(path)
            answers = review.current_values(session, use_case.name, use_case.version, list(gold))
            items = use_case.quality.gold_items or whole_output
            public_scores = score_public(gold, {key: items(value) for key, value in answers.items()})
    scores, waiting = score_corpus(pairs, rejected, use_case.quality.gold_items)
    metadata: dict[str, Any] = {
        "corpus": len(pairs),
        "awaiting_current_output": waiting,
        "use_case_version": use_case.version,
    }
    if scores is not None:
        metadata.update(_score_metadata("", scores))
    if public_scores is not None:
        metadata.update(_score_metadata(f"{public.name}_", public_scores))
    if scores is None and public_scores is None:
        metadata["note"] = "no corrections yet (`pipeline review` to make some) and no public gold configured"
    primary = scores or public_scores
    return AssetCheckResult(
        check_name=GOLD_CHECK,
        passed=primary is None or primary.f1 >= gym.gold_min_f1,
        severity=AssetCheckSeverity.WARN,
        metadata=metadata,
    )


def _score_metadata(prefix: str, scores: GoldScores) -> dict[str, Any]:
    return {
        f"{prefix}compared": scores.compared,
        f"{prefix}precision": MetadataValue.float(round(scores.precision, 4)),
        f"{prefix}recall": MetadataValue.float(round(scores.recall, 4)),
        f"{prefix}f1": MetadataValue.float(round(scores.f1, 4)),
        f"{prefix}agreement": MetadataValue.float(round(scores.agreement, 4)),
        f"{prefix}rejected": scores.rejected,
        f"{prefix}tp_fp_fn": f"{scores.tp}/{scores.fp}/{scores.fn}",
    }
