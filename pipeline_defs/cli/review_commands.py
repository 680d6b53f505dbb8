"""The gym on the command line: `pipeline review ...`.

pipeline review [--use-case NAME] [--status STATUS]   quality per use case, then the review items
pipeline review show ID                               one item: why, the output, the posting
pipeline review accept ID [--note TEXT]               the output is right (gold as it is)
pipeline review reject ID [--note TEXT]               the output is wrong (a disagreement)
pipeline review correct ID [--summary TEXT] [--add-skill M]... [--remove-skill M]...
                           [--concept MENTION=URI|N]... [--note TEXT]
pipeline review evaluate                              run the gold checks now (recorded in Dagster)

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

from appdb import reports, review
from appdb.database import session_scope
from console.arguments import row_id
from console.terminal import EXIT_ERROR, JSON_HELP, clip, one_line, print_json, safe_text, table
from domain.language.declaration import display_output
from domain.quality.corrections import CorrectionError, Edits
from domain.quality.review_actions import accept, correct, reject
from pipeline_defs.catalog import declared_kinds, find_subject, leased_use_cases, review_options
from pipeline_defs.settings import Settings

STATUSES = ("open", "accepted", "rejected", "corrected", "all")

REVIEW_STATES = ("open", "accepted", "rejected", "corrected")


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("review", help="the gym: quality figures and the review queue")
    actions = parser.add_subparsers(dest="action")
    parser.add_argument("--use-case", help="only this use case")
    parser.add_argument(
        "--status", choices=STATUSES, default="open", help="which items to list (default open)"
    )
    parser.add_argument("--json", action="store_true", help=f"the listing: {JSON_HELP}")
    show = actions.add_parser("show", help="one review item in full")
    show.add_argument("item_id", type=row_id, metavar="ID")
    for name, help_text in (
        ("accept", "the output is right: it joins the corpus as gold"),
        ("reject", "the output is wrong (no better value given)"),
    ):
        verdict = actions.add_parser(name, help=help_text)
        verdict.add_argument("item_id", type=row_id, metavar="ID")
        verdict.add_argument("--note", help="why (kept with the verdict)")
    correct = actions.add_parser("correct", help="give the right value: it joins the corpus and is delivered")
    correct.add_argument("item_id", type=row_id, metavar="ID")
    for option in review_options():  # the corrections the plugins' use cases take
        correct.add_argument(
            option.flag,
            dest=f"edit_{option.name}",
            action="append",
            default=[],
            metavar=option.metavar,
            help=option.help,
        )
    correct.add_argument("--note", help="why (kept with the correction)")
    actions.add_parser("evaluate", help="run the gold checks now and print the figures")
    parser.set_defaults(handler=cmd_review)


def _registry(settings: Settings) -> dict[str, Any]:
    """The declared use cases by name (as the code location builds them, without building it)."""
    return {use_case.name: use_case for use_case in leased_use_cases(settings)}


def cmd_review(settings: Settings, args: argparse.Namespace) -> int:
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
                    {option.name: getattr(args, f"edit_{option.name}") for option in review_options()}
                )
                verdict = correct(session, args.item_id, registry, edits, args.note)
    except (review.ReviewError, CorrectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    delivered = " and delivered as the current output" if verdict.delivered else ""
    corpus = f"; corpus entry {verdict.correction_id}" if verdict.correction_id else ""
    print(
        f"review item {verdict.item_id} ({verdict.use_case}, {one_line(verdict.subject_key)}): "
        f"{verdict.status}{delivered}{corpus}"
    )
    _print_figures(_evaluate(settings), only=verdict.use_case)
    return 0


def _list(settings: Settings, args: argparse.Namespace, registry: Mapping[str, Any]) -> int:
    with session_scope(settings.database_url) as session:
        counts = review.review_counts(session)
        outputs = reports.output_counts(session)
        grades = {name: review.current_grade_summary(session, name) for name in registry}
        status = None if args.status == "all" else args.status
        items = review.list_review_items(session, status=status, use_case=args.use_case)
        keys = [item.subject_key for item in items]
        titles = {
            key: label
            for kind in declared_kinds(settings)
            for key, label in kind.table.labels(session, keys).items()
        }
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
                *(str(count.get(status, 0)) for status in REVIEW_STATES),
                _gold_cell(figures.get(name, {})),
            ]
        )
    if args.json:
        print_json(_listing_json(registry, args.use_case, outputs, grades, counts, figures, items, titles))
        return 0
    headers = ["use case", "outputs", "judge (graded)", "open", "accepted", "rejected", "corrected"]
    print(table([*headers, "gold P / R / F1 / agreement (compared)"], rows))
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
            f"#{item.id}{state}  {item.use_case}  {one_line(item.subject_key)} "
            f"({one_line(titles.get(item.subject_key) or '?')}){score}"
        )
        print(f"    why: {clip(item.reason, 300)}")
        print(f"    output: {clip(display_output(registry.get(item.use_case), item.output), 200)}")
    print("\n`pipeline review show ID` for the whole item; accept, reject or correct it (see --help)")
    return 0


def _listing_json(
    registry: Mapping[str, Any],
    only: str | None,
    outputs: Mapping[str, int],
    grades: Mapping[str, Any],
    counts: Mapping[str, Mapping[str, int]],
    figures: Mapping[str, Any],
    items: Sequence[Any],
    titles: Mapping[str, str],
) -> dict[str, Any]:
    """`pipeline review --json`: the same facts as the listing, nothing clipped."""
    use_cases = [
        {
            "use_case": name,
            "outputs": outputs.get(name, 0),
            "judge_overall": grades[name].overall,
            "judge_graded": grades[name].graded,
            "review": {status: counts.get(name, {}).get(status, 0) for status in REVIEW_STATES},
            "gold": figures.get(name, {}),
        }
        for name in registry
        if not only or name == only
    ]
    listed = [
        {
            "id": item.id,
            "status": item.status,
            "use_case": item.use_case,
            "subject_key": item.subject_key,
            "title": titles.get(item.subject_key),
            "grade": item.score,
            "reason": item.reason,
            "output": item.output,
        }
        for item in items
    ]
    return {"use_cases": use_cases, "items": listed}


def _show(settings: Settings, item_id: int) -> int:
    with session_scope(settings.database_url) as session:
        item = reports.get_review_item(session, item_id)
        if item is None:
            print(f"error: no review item {item_id} (`pipeline review` lists the open ones)", file=sys.stderr)
            return EXIT_ERROR
        found = find_subject(session, declared_kinds(settings), item.subject_key)
        current = review.current_output(session, item.use_case, item.subject_key)
        print(
            f"review item {item.id}: {item.status} · {item.use_case} (version {item.use_case_version})"
            f" · {one_line(item.subject_key)}"
        )
        print(
            f"flagged {item.created_at:%Y-%m-%d %H:%M:%S} UTC by run {item.run_id}; "
            f"interaction {item.interaction_id}"
        )
        if item.resolved_at:
            print(
                f"resolved {item.resolved_at:%Y-%m-%d %H:%M:%S} UTC"
                + (f": {one_line(item.note)}" if item.note else "")
            )
        print(f"why: {safe_text(item.reason)}")
        print("output as flagged:")
        print(textwrap.indent(safe_text(json.dumps(item.output, indent=2, ensure_ascii=False)), "  "))
        if current is not None and current.value != item.output:
            print(f"current output (by {current.backend} {current.model}):")
            print(textwrap.indent(safe_text(json.dumps(current.value, indent=2, ensure_ascii=False)), "  "))
        if found is not None:
            kind, fields = found
            print(f"{kind.noun}:")
            print(textwrap.indent(textwrap.fill(safe_text(kind.describe(fields)), 100), "  "))
    return 0


def _evaluate(settings: Settings) -> dict[str, dict[str, Any]]:
    """Run `gym_evaluation_job` in this process; use case -> the gold check's metadata values."""
    from dagster import DagsterInstance

    from assets.gym_checks import GYM_JOB
    from assets.run_tags import SOURCE_TAG
    from pipeline_defs.cli.in_process_runs import QUIET_LOGS
    from pipeline_defs.definitions import build_definitions
    from pipeline_defs.runtime.dagster_home import ensure_dagster_home

    ensure_dagster_home(settings)
    defs = build_definitions(settings)
    result = defs.resolve_job_def(GYM_JOB).execute_in_process(
        instance=DagsterInstance.get(),
        tags={SOURCE_TAG: "cli"},
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
                f"F1 {values['skillspan_f1']:.2f} ({values['skillspan_compared']} compared)"
            )
        print(line)
