"""The gym on the command line: `pipeline review ...` and `pipeline reprocess --stale`.

pipeline review [--use-case NAME] [--status STATUS]   quality per use case, then the review items
pipeline review show ID                               one item: why, the output, the posting
pipeline review accept ID [--note TEXT]               the output is right (gold as it is)
pipeline review reject ID [--note TEXT]               the output is wrong (a disagreement)
pipeline review correct ID [--summary TEXT] [--add-skill M]... [--remove-skill M]...
                           [--concept MENTION=URI]... [--note TEXT]
pipeline review evaluate                              run the gold checks now (recorded in Dagster)
pipeline reprocess --stale [--use-case NAME] [--dry-run]   redo only the outdated outputs

After every verdict the gold checks run (`gym_evaluation_job`, in this process, on the
project's Dagster instance), so the UI's check history plots the figures, and the
command prints the use case's new figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from appdb import review
from pipeline_defs.settings import Settings

EXIT_ERROR = 2
STATUSES = ("open", "accepted", "rejected", "corrected", "all")


def add_commands(commands: Any) -> None:
    """Register `review` and `reprocess` on the `pipeline` parser's subcommands."""
    parser = commands.add_parser("review", help="the gym: quality figures and the review queue")
    actions = parser.add_subparsers(dest="action")
    parser.add_argument("--use-case", help="only this use case")
    parser.add_argument(
        "--status", choices=STATUSES, default="open", help="which items to list (default open)"
    )
    show = actions.add_parser("show", help="one review item in full")
    show.add_argument("item_id", type=int, metavar="ID")
    for name, help_text in (
        ("accept", "the output is right: it joins the corpus as gold"),
        ("reject", "the output is wrong (no better value given)"),
    ):
        verdict = actions.add_parser(name, help=help_text)
        verdict.add_argument("item_id", type=int, metavar="ID")
        verdict.add_argument("--note", help="why (kept with the verdict)")
    correct = actions.add_parser("correct", help="give the right value: it joins the corpus and is delivered")
    correct.add_argument("item_id", type=int, metavar="ID")
    correct.add_argument("--summary", help="the corrected summary")
    correct.add_argument(
        "--add-skill",
        action="append",
        default=[],
        metavar="MENTION",
        help="a mention from the posting (repeatable; prefix knowledge: for knowledge)",
    )
    correct.add_argument(
        "--remove-skill", action="append", default=[], metavar="MENTION", help="(repeatable)"
    )
    correct.add_argument(
        "--concept",
        action="append",
        default=[],
        metavar="MENTION=URI",
        help="resolve a mention to this taxonomy concept (URI, or `none` for unmatched; repeatable)",
    )
    correct.add_argument("--note", help="why (kept with the correction)")
    actions.add_parser("evaluate", help="run the gold checks now and print the figures")

    reprocess = commands.add_parser("reprocess", help="redo outputs made by an older version, model or input")
    reprocess.add_argument(
        "--stale", action="store_true", required=True, help="only outdated outputs (required)"
    )
    reprocess.add_argument(
        "--use-case", action="append", dest="use_cases", help="only this use case (repeatable)"
    )
    reprocess.add_argument("--dry-run", action="store_true", help="count and plan, change nothing")
    reprocess.add_argument("--verbose", action="store_true", help="show Dagster's own log lines")


def _registry(settings: Settings) -> dict[str, Any]:
    """The declared use cases by name (as the code location builds them)."""
    from pipeline_defs.definitions import build_use_cases

    return {item.use_case.name: item.use_case for item in build_use_cases(settings)}


def cmd_review(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope
    from domain.quality.review_actions import CorrectionError, Edits, accept, correct, reject

    registry = _registry(settings)
    if args.use_case and args.use_case not in registry:
        print(f"error: no use case {args.use_case!r} (declared: {', '.join(registry)})", file=sys.stderr)
        return EXIT_ERROR
    action = args.action or "list"
    if action == "list":
        return _list(settings, args, registry)
    if action == "show":
        return _show(settings, args.item_id)
    if action == "evaluate":
        _print_figures(_evaluate(settings), only=args.use_case)
        return 0
    try:
        with session_scope(settings.database_url) as session:
            if action == "accept":
                verdict = accept(session, args.item_id, registry, args.note)
            elif action == "reject":
                verdict = reject(session, args.item_id, args.note)
            else:
                edits = Edits(
                    summary=args.summary,
                    add_skills=args.add_skill,
                    remove_skills=args.remove_skill,
                    concepts=_concepts(args.concept),
                )
                verdict = correct(session, args.item_id, registry, edits, args.note)
    except (review.ReviewError, CorrectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    delivered = " and delivered as the current output" if verdict.delivered else ""
    corpus = f"; corpus entry {verdict.correction_id}" if verdict.correction_id else ""
    print(
        f"review item {verdict.item_id} ({verdict.use_case}, {verdict.posting_key}): "
        f"{verdict.status}{delivered}{corpus}"
    )
    _print_figures(_evaluate(settings), only=verdict.use_case)
    return 0


def _concepts(pairs: Sequence[str]) -> dict[str, str]:
    from domain.quality.review_actions import CorrectionError

    concepts = {}
    for pair in pairs:
        mention, sep, uri = pair.partition("=")
        if not sep or not mention.strip() or not uri.strip():
            raise CorrectionError(f"--concept {pair!r}: write MENTION=URI (or MENTION=none)")
        concepts[mention.strip()] = uri.strip()
    return concepts


def _list(settings: Settings, args: argparse.Namespace, registry: Mapping[str, Any]) -> int:
    from sqlalchemy import func, select

    from appdb.database import session_scope
    from appdb.models import Posting, UseCaseOutput
    from pipeline_defs.cli import _clip, _table

    with session_scope(settings.database_url) as session:
        counts = review.review_counts(session)
        outputs = dict(
            session.execute(
                select(UseCaseOutput.use_case, func.count()).group_by(UseCaseOutput.use_case)
            ).all()
        )
        grades = {name: review.current_grade_summary(session, name) for name in registry}
        status = None if args.status == "all" else args.status
        items = review.list_review_items(session, status=status, use_case=args.use_case)
        titles = dict(
            session.execute(
                select(Posting.key, Posting.title).where(
                    Posting.key.in_({item.posting_key for item in items})
                )
            ).all()
        )
    figures = _evaluate(settings)
    rows = []
    for name in registry:
        if args.use_case and name != args.use_case:
            continue
        count = counts.get(name, {})
        grade = grades[name]
        rows.append(
            [
                name,
                str(outputs.get(name, 0)),
                f"{grade.overall:.2f} ({grade.graded})" if grade.overall is not None else "-",
                *(str(count.get(status, 0)) for status in ("open", "accepted", "rejected", "corrected")),
                _gold_cell(figures.get(name, {})),
            ]
        )
    headers = ["use case", "outputs", "judge (graded)", "open", "accepted", "rejected", "corrected"]
    print(_table([*headers, "gold P / R / F1 / agreement (compared)"], rows))
    print()
    label = "" if args.status == "all" else f"{args.status} "
    if not items:
        print(f"no {label}review items" + (f" for {args.use_case}" if args.use_case else ""))
        return 0
    print(f"{len(items)} {label}review items (lowest judge grade first):")
    for item in items:
        score = f" grade {item.score:.1f}" if item.score is not None else ""
        state = "" if item.status == "open" else f" [{item.status}]"
        print(
            f"#{item.id}{state}  {item.use_case}  {item.posting_key} "
            f"({titles.get(item.posting_key, '?')}){score}"
        )
        print(f"    why: {_clip(item.reason, 300)}")
        print(f"    output: {_clip(_preview(item.output), 200)}")
    print("\n`pipeline review show ID` for the whole item; accept, reject or correct it (see --help)")
    return 0


def _show(settings: Settings, item_id: int) -> int:
    from sqlalchemy import select

    from appdb.database import session_scope
    from appdb.models import Posting, ReviewItem

    with session_scope(settings.database_url) as session:
        item = session.get(ReviewItem, item_id)
        if item is None:
            print(f"error: no review item {item_id} (`pipeline review` lists the open ones)", file=sys.stderr)
            return EXIT_ERROR
        posting = session.scalar(select(Posting).where(Posting.key == item.posting_key))
        current = review.current_output(session, item.use_case, item.posting_key)
        print(
            f"review item {item.id}: {item.status} · {item.use_case} (version {item.use_case_version})"
            f" · {item.posting_key}"
        )
        print(
            f"flagged {item.created_at:%Y-%m-%d %H:%M:%S} UTC by run {item.run_id}; "
            f"interaction {item.interaction_id}"
        )
        if item.resolved_at:
            print(
                f"resolved {item.resolved_at:%Y-%m-%d %H:%M:%S} UTC" + (f": {item.note}" if item.note else "")
            )
        print(f"why: {item.reason}")
        print("output as flagged:")
        print(textwrap.indent(json.dumps(item.output, indent=2, ensure_ascii=False), "  "))
        if current is not None and current.value != item.output:
            print(f"current output (by {current.backend} {current.model}):")
            print(textwrap.indent(json.dumps(current.value, indent=2, ensure_ascii=False), "  "))
        if posting is not None:
            print(
                f"posting: {posting.title} ({posting.company or 'company not stated'}, "
                f"{posting.location or '-'})"
            )
            print(textwrap.indent(textwrap.fill(posting.description, 100), "  "))
    return 0


def _evaluate(settings: Settings) -> dict[str, dict[str, Any]]:
    """Run `gym_evaluation_job` in this process; use case -> the gold check's metadata values."""
    from dagster import DagsterInstance

    from assets.gym import GYM_JOB
    from pipeline_defs.dagster_home import ensure_dagster_home
    from pipeline_defs.definitions import build_definitions
    from pipeline_defs.runner import QUIET_LOGS

    ensure_dagster_home(settings)
    defs = build_definitions(settings)
    result = defs.resolve_job_def(GYM_JOB).execute_in_process(
        instance=DagsterInstance.get(),
        tags={"pipeline/source": "cli"},
        run_config=QUIET_LOGS,
        raise_on_error=False,
    )
    return {
        evaluation.asset_key.to_user_string(): {
            name: getattr(value, "value", getattr(value, "text", value))
            for name, value in evaluation.metadata.items()
        }
        for evaluation in result.get_asset_check_evaluations()
    }


def _gold_cell(figures: Mapping[str, Any]) -> str:
    if "f1" not in figures:
        return f"- (corpus {figures.get('corpus', 0)})"
    return (
        f"{figures['precision']:.2f} / {figures['recall']:.2f} / {figures['f1']:.2f} / "
        f"{figures['agreement']:.2f} ({figures['compared']})"
    )


def _print_figures(figures: Mapping[str, Mapping[str, Any]], only: str | None = None) -> None:
    for name, values in figures.items():
        if only and name != only:
            continue
        line = f"{name}: gold {_gold_cell(values)}"
        if values.get("awaiting_current_output"):
            line += f"; {values['awaiting_current_output']} corpus entries await a current output"
        if "skillspan_f1" in values:
            line += (
                f"; SkillSpan P {values['skillspan_precision']:.2f} R {values['skillspan_recall']:.2f} "
                f"F1 {values['skillspan_f1']:.2f} ({values['skillspan_compared']} postings)"
            )
        print(line)


def _preview(output: Any) -> str:
    if not isinstance(output, dict):
        return "(none)"
    if "summary" in output:
        return str(output["summary"])
    if "skills" in output:
        return "; ".join(f"{s['mention']} ({s['kind']})" for s in output["skills"]) or "(no skills)"
    if "entities" in output:
        return (
            "; ".join(
                f"{e['mention']} -> {e.get('concept_label') or 'unmatched'}" for e in output["entities"]
            )
            or "(no mentions)"
        )
    return json.dumps(output, ensure_ascii=False)


# --- reprocess ---------------------------------------------------------------------------------


def cmd_reprocess(settings: Settings, args: argparse.Namespace) -> int:
    from dagster import DagsterInstance

    from appdb.database import session_scope
    from pipeline_defs.dagster_home import ensure_dagster_home
    from pipeline_defs.definitions import build_definitions, build_use_cases
    from pipeline_defs.factory import upstream_first
    from pipeline_defs.reprocess import find_stale, reprocess_stale
    from resources.app_database import AppDatabase

    built = build_use_cases(settings)
    declared = [item.use_case.name for item in built]
    unknown = [name for name in args.use_cases or [] if name not in declared]
    if unknown:
        print(f"error: no use case {unknown[0]!r} (declared: {', '.join(declared)})", file=sys.stderr)
        return EXIT_ERROR
    selected = [
        item for item in upstream_first(built) if not args.use_cases or item.use_case.name in args.use_cases
    ]
    with session_scope(settings.database_url) as session:
        found = {item.use_case.name: find_stale(session, item) for item in selected}
    for item in selected:
        stale = found[item.use_case.name]
        why = ", ".join(f"{count} {reason}" for reason, count in stale.reasons.most_common())
        print(
            f"{item.use_case.name} (version {item.use_case.version}, {item.spec.model}): "
            f"{len(stale.keys)} stale outputs"
            + (f" ({why})" if why else "")
            + (
                f"; {len(stale.missing)} postings without an output are left to `pipeline run`"
                if stale.missing
                else ""
            )
        )
    if args.dry_run:
        print("dry run: nothing changed (downstream outputs become stale once their upstream is redone)")
        return 0
    ensure_dagster_home(settings)
    defs = build_definitions(settings, built=built)
    selected_names = {item.use_case.name for item in selected}
    reports = reprocess_stale(
        defs,
        selected,
        DagsterInstance.get(),
        AppDatabase(url=settings.database_url),
        verbose=args.verbose,
        on_plan=lambda stale, runs: print(
            f"{stale.use_case}: redoing {len(stale.keys)} stale outputs in {runs} runs ...", flush=True
        ),
    )
    if not reports:
        print("no stale outputs: everything is current")
        return 0
    for report in reports:
        print(
            f"{report.use_case}: {report.stale_before} stale before, {report.stale_after} after; "
            f"{len(report.runs)} runs ({len(report.failed_runs)} failed)"
        )
    with session_scope(settings.database_url) as session:
        downstream = [
            (item.use_case.name, len(find_stale(session, item).keys))
            for item in built
            if item.use_case.name not in selected_names
        ]
    for name, count in downstream:
        if count:
            print(
                f"{name}: now {count} stale outputs (its upstream was redone): "
                f"`pipeline reprocess --stale --use-case {name}` or the sensor redoes them"
            )
    return 1 if any(report.failed_runs for report in reports) else 0
