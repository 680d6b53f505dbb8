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
    AssetExecutionContext,
    AssetsDefinition,
    AssetSelection,
    MetadataValue,
    asset_check,
    define_asset_job,
)
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from sqlalchemy import select

from appdb import review, work
from appdb.models import Interaction, UseCaseOutput, utcnow
from domain.language.declaration import UseCase
from domain.language.llm_types import BackendUnavailable
from domain.quality.gold import (
    SKILLSPAN_KEY_PREFIX,
    GoldScores,
    load_skillspan_gold,
    score_corpus,
    score_skillspan,
    whole_output,
)
from domain.quality.judge_rubric import JUDGE_OPTIONS, JUDGE_SUFFIX, Rubric, overall
from resources.app_database import AppDatabase
from resources.gym import GymResource
from resources.llm import LLMResource

JUDGE_CHECK = "judge_grades"


def is_judged(use_case: UseCase) -> bool:
    return use_case.judge_view is not None and not use_case.is_script


def gym_check_specs(use_case: UseCase) -> list[AssetCheckSpec]:
    """The checks the gym adds to a use case's asset (the judge, when the use case is judged)."""
    if not is_judged(use_case):
        return []
    return [
        AssetCheckSpec(
            JUDGE_CHECK,
            asset=use_case.name,
            description=(
                "A judge model grades a sample of each run's outputs (faithful, complete, concise: 1-5); "
                "outputs graded below the review threshold go to review."
            ),
        )
    ]


def after_batch(
    context: AssetExecutionContext,
    use_case: UseCase,
    app_db: AppDatabase,
    llm: LLMResource | None,
    outcome: Any,
    source: str,
) -> Iterator[AssetCheckResult]:
    """Flag outputs that failed checks for review; judge a sample (yields the judge's check result)."""
    run_id = context.run.run_id
    flagged = flag_check_failures(app_db, use_case, outcome, run_id)
    if flagged:
        context.log.info(f"{use_case.name}: {flagged} outputs failed a check and are open for review")
    if is_judged(use_case):
        gym: GymResource = context.resources.gym
        yield judge_batch(context, use_case, app_db, llm, gym, outcome, run_id, source)


def flag_check_failures(app_db: AppDatabase, use_case: UseCase, outcome: Any, run_id: str) -> int:
    """Open (or update) a review item for each output of the batch that failed a declared check."""
    findings: dict[str, list[tuple[str, str]]] = {}
    for check_name, failing in outcome.check_failures.items():  # evaluated by the run's checks
        for key, reason in failing.items():
            blocked = key not in outcome.outputs
            findings.setdefault(key, []).append((check_name, f"blocked: {reason}" if blocked else reason))
    if not findings:
        return 0
    with app_db.session() as session:
        stored = {
            row.posting_key: row
            for row in session.scalars(
                select(UseCaseOutput).where(
                    UseCaseOutput.use_case == use_case.name, UseCaseOutput.posting_key.in_(list(findings))
                )
            )
        }
        rejected = {
            row.posting_key: row
            for row in session.scalars(
                select(Interaction)
                .where(
                    Interaction.use_case == use_case.name,
                    Interaction.run_id == run_id,
                    Interaction.posting_key.in_(list(findings)),
                )
                .order_by(Interaction.id)
            )
        }
        for key, found in findings.items():
            output = outcome.outputs.get(key)
            interaction_id = stored[key].interaction_id if output is not None and key in stored else None
            if output is None and key in rejected:  # blocked: the model's answer as the check saw it
                output, interaction_id = rejected[key].parsed_output, rejected[key].id
            for check_name, reason in found:
                review.flag_for_review(
                    session,
                    use_case=use_case.name,
                    posting_key=key,
                    use_case_version=use_case.version,
                    reason=f"check {check_name}: {reason}",
                    check_name=check_name,
                    output=output,
                    interaction_id=interaction_id,
                    run_id=run_id,
                )
    return len(findings)


def judge_text(posting: Mapping[str, Any]) -> str:
    """The posting as the judge sees it: title, company, location, then the text."""
    head = " · ".join(str(posting[name]) for name in ("title", "company", "location") if posting.get(name))
    return f"{head}. {posting.get('description') or ''}"


def judge_batch(
    context: AssetExecutionContext,
    use_case: UseCase,
    app_db: AppDatabase,
    llm: LLMResource | None,
    gym: GymResource,
    outcome: Any,
    run_id: str,
    source: str,
) -> AssetCheckResult:
    """Grade a sample of the outputs this run made; the `judge_grades` check result."""
    rubric = gym.rubric()
    with app_db.session() as session:
        rows = {
            row.posting_key: row
            for row in session.scalars(
                select(UseCaseOutput).where(
                    UseCaseOutput.use_case == use_case.name, UseCaseOutput.posting_key.in_(outcome.done)
                )
            )
        }
        graded = review.graded_input_hashes(session, use_case.name, [row.input_hash for row in rows.values()])
    pool = [key for key in outcome.done if key in rows and rows[key].input_hash not in graded]
    size = min(gym.judge_sample, len(pool)) if llm is not None else 0
    sample = sorted(random.Random(f"{run_id}/{use_case.name}").sample(pool, size), key=pool.index)
    grades: dict[str, dict[str, int]] = {}
    errors: dict[str, str] = {}
    flagged = 0
    for key in sample:
        row = rows[key]
        prompt = rubric.prompt(
            use_case.name, judge_text(outcome.postings[key]), use_case.judge_view(row.value)
        )
        result = _grade(llm, gym, rubric, prompt)
        with app_db.session() as session:
            interaction_id = work.record_interaction(
                session,
                use_case=f"{use_case.name}{JUDGE_SUFFIX}",
                use_case_version=use_case.version,
                posting_key=key,
                backend=llm.backend_name,
                model=gym.judge_model,
                prompt=prompt,
                system_prompt="",
                options={
                    **JUDGE_OPTIONS,
                    "rubric_version": rubric.version,
                    "graded_interaction": row.interaction_id,
                },
                raw_response=result.get("text"),
                parsed_output=result.get("grades"),
                prompt_tokens=result.get("prompt_tokens"),
                completion_tokens=result.get("completion_tokens"),
                latency_ms=result.get("latency_ms"),
                status=result["status"],
                error=result.get("error"),
                source=source,
                run_id=run_id,
                finished_at=utcnow(),
            )
            if "grades" not in result:
                errors[key] = result["error"]
                if result["status"] == "infra_error":
                    break
                continue
            grades[key] = result["grades"]
            score = overall(result["grades"])
            review.record_grade(
                session,
                use_case=use_case.name,
                posting_key=key,
                use_case_version=row.use_case_version,
                input_hash=row.input_hash,
                judge_model=gym.judge_model,
                rubric_version=rubric.version,
                scores=result["grades"],
                overall=score,
                interaction_id=interaction_id,
                run_id=run_id,
            )
            if score < gym.review_below:
                flagged += 1
                review.flag_for_review(
                    session,
                    use_case=use_case.name,
                    posting_key=key,
                    use_case_version=use_case.version,
                    reason=f"judge {gym.judge_model} graded {score:.1f} (below {gym.review_below:g}): "
                    + ", ".join(f"{name} {grade}" for name, grade in result["grades"].items()),
                    score=score,
                    output=row.value,
                    interaction_id=row.interaction_id,
                    run_id=run_id,
                )
    with app_db.session() as session:
        current = review.current_grade_summary(session, use_case.name)
    if grades:
        mean = sum(overall(g) for g in grades.values()) / len(grades)
        context.log.info(
            f"{use_case.name}: judge {gym.judge_model} graded {len(grades)} outputs, mean {mean:.2f}; "
            f"{flagged} below {gym.review_below:g}"
        )
    return judge_check_result(rubric, gym, grades, errors, flagged, len(pool), current)


def _grade(llm: LLMResource | None, gym: GymResource, rubric: Rubric, prompt: str) -> dict[str, Any]:
    """One judge call: the raw answer and the grades, or the error (never raises)."""
    try:
        generation = llm.generate(gym.judge_model, prompt, "", rubric.schema, dict(JUDGE_OPTIONS))
    except BackendUnavailable as exc:
        return {"status": "infra_error", "error": f"judge backend unavailable: {exc}"}
    except Exception as exc:  # a bad call is this grade's error, never a failed run
        return {"status": "item_error", "error": f"{type(exc).__name__}: {exc}"}
    result: dict[str, Any] = {
        "text": generation.text,
        "prompt_tokens": generation.prompt_tokens,
        "completion_tokens": generation.completion_tokens,
        "latency_ms": generation.latency_ms,
    }
    try:
        result["grades"] = rubric.parse(generation.text)
    except ValueError as exc:
        return {**result, "status": "item_error", "error": str(exc)}
    return {**result, "status": "ok"}


def judge_check_result(
    rubric: Rubric,
    gym: GymResource,
    grades: Mapping[str, Mapping[str, int]],
    errors: Mapping[str, str],
    flagged: int,
    candidates: int,
    current: review.GradeSummary,
) -> AssetCheckResult:
    """The `judge_grades` result: this run's mean grade per criterion (numeric, plotted in the UI)."""
    metadata: dict[str, Any] = {
        "judge_model": gym.judge_model,
        "rubric_version": rubric.version,
        "new_outputs": candidates,
        "graded": len(grades),
        "judge_errors": len(errors),
        "below_threshold": flagged,
        "review_below": MetadataValue.float(gym.review_below),
        "current_outputs_graded": current.graded,
    }
    if grades:
        for name in rubric.criteria:
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
        metadata["errors"] = MetadataValue.json(dict(errors))
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
    """What a batch job runs: the assets and the checks they report themselves, not the gold
    checks (those run in `gym_evaluation_job`; in a batch run they would only show as skipped)."""
    own_checks = [key for asset in assets for key in asset.check_keys]
    return AssetSelection.assets(*assets).without_checks() | AssetSelection.checks(*own_checks)


def build_gym_job(checks: list[AssetChecksDefinition]) -> UnresolvedAssetJobDefinition:
    return define_asset_job(
        GYM_JOB,
        selection=AssetSelection.checks(*checks),
        description="Evaluate every use case's current outputs against the gold (corrections, public sets).",
        tags={"pipeline/work_group": "gym"},
    )


def gold_check_result(use_case: UseCase, app_db: AppDatabase, gym: GymResource) -> AssetCheckResult:
    """Precision, recall, F1 and agreement (numeric metadata, plotted by the UI over evaluations)."""
    with app_db.session() as session:
        pairs = review.gold_pairs(session, use_case.name, use_case.version)
        rejected = len(review.rejected_keys(session, use_case.name, use_case.version))
        skillspan = None
        if gym.gold_skillspan_path and use_case.name == gym.gold_skillspan_use_case:
            answers = review.current_values(session, use_case.name, use_case.version, SKILLSPAN_KEY_PREFIX)
            items = use_case.gold_items or whole_output
            skillspan = score_skillspan(
                load_skillspan_gold(gym.gold_skillspan_path),
                {key: items(value) for key, value in answers.items()},
            )
    scores, waiting = score_corpus(pairs, rejected, use_case.gold_items)
    metadata: dict[str, Any] = {
        "corpus": len(pairs),
        "awaiting_current_output": waiting,
        "use_case_version": use_case.version,
    }
    if scores is not None:
        metadata.update(_score_metadata("", scores))
    if skillspan is not None:
        metadata.update(_score_metadata("skillspan_", skillspan))
    if scores is None and skillspan is None:
        metadata["note"] = "no corrections yet (`pipeline review` to make some) and no public gold configured"
    primary = scores or skillspan
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
