"""`pipeline`: the command line beside the Dagster UI.

pipeline migrate                 create or upgrade the application database; create DAGSTER_HOME
pipeline ingest FILE...          load postings (JSONL or CSV); exit 1 if any row was rejected
pipeline run [--use-case NAME]   process all pending work now, in this process
pipeline demo                    ingest the demo postings, summarize them, print a table
pipeline status                  per use case: current, pending, failed; paused use cases
pipeline trace KEY [--markdown FILE]   exact prompts, responses and outputs of one posting
pipeline failures [--use-case NAME]    parked items (failed max_attempts times) with their last error
pipeline retry (--all | --use-case NAME | --posting KEY...)   re-queue parked items
pipeline discover --shadow [--use-case NAME] [--expect FILE] [--json]
                                 what each use case would process now; claims and writes nothing
pipeline pauses                  use cases paused by the circuit breaker: why, and until when
pipeline resume [--use-case NAME]      end pauses now
pipeline ui [--port N]           start `dagster dev` on 127.0.0.1 with the project's DAGSTER_HOME
pipeline review [...]            the gym: quality figures, review items, accept/reject/correct (review_cli.py)
pipeline reprocess --stale [--use-case NAME] [--dry-run]   redo only outdated outputs
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from appdb import work
from appdb.database import migrate
from appdb.ingest import ingest_files
from appdb.models import Interaction, Posting, UseCaseOutput, WorkItem, utcnow
from pipeline_defs import review_cli
from pipeline_defs.settings import PROJECT_ROOT, Settings

if TYPE_CHECKING:
    from pipeline_defs.factory import UseCaseDefinitions

DEMO_POSTINGS = PROJECT_ROOT / "pipeline_defs" / "demo_data" / "postings.jsonl"
EXIT_REJECTED = 1
EXIT_ERROR = 2
EXIT_DIFFERENT = 1
SHOWN_KEYS = 20
ERROR_CHARS = 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline", description="Job-posting enrichment with local LLMs.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("migrate", help="create or upgrade the application database; create the Dagster home")
    ingest = commands.add_parser("ingest", help="load postings from JSONL or CSV files")
    ingest.add_argument("files", nargs="+", type=Path)
    run = commands.add_parser("run", help="process all pending work now")
    run.add_argument("--use-case", action="append", dest="use_cases", help="only this use case (repeatable)")
    run.add_argument("--verbose", action="store_true", help="show Dagster's own log lines")
    demo = commands.add_parser(
        "demo", help="ingest the demo postings and summarize them with the embedded model"
    )
    demo.add_argument("--verbose", action="store_true")
    commands.add_parser("status", help="per use case: postings with a current output, pending, failed")
    trace = commands.add_parser("trace", help="show exact prompts, responses and outputs for a posting")
    trace.add_argument("key")
    trace.add_argument("--markdown", type=Path, help="also write the report as markdown to this file")
    ui = commands.add_parser("ui", help="start dagster dev (webserver and daemon) on 127.0.0.1:3000")
    ui.add_argument("--port", type=int, default=3000, help="the webserver's port on 127.0.0.1 (default 3000)")
    failures = commands.add_parser(
        "failures", help="list parked items (failed too often) and their last error"
    )
    failures.add_argument("--use-case", help="only this use case")
    retry = commands.add_parser("retry", help="re-queue parked items with a fresh set of attempts")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every parked item")
    which.add_argument("--use-case", help="the parked items of this use case")
    which.add_argument(
        "--posting", action="append", dest="postings", metavar="KEY", help="this posting (repeatable)"
    )
    discover = commands.add_parser(
        "discover",
        help="show what each use case would process now (with --shadow: claims and writes nothing)",
    )
    discover.add_argument(
        "--shadow", action="store_true", help="report only (required: the only mode so far)"
    )
    discover.add_argument(
        "--use-case", action="append", dest="use_cases", help="only this use case (repeatable)"
    )
    discover.add_argument(
        "--expect", type=Path, help="compare with expected work: CSV or JSON lines with use_case,posting_key"
    )
    discover.add_argument(
        "--json", action="store_true", help="print the whole result as JSON (keys uncapped)"
    )
    commands.add_parser("pauses", help="use cases paused by the circuit breaker, why, and until when")
    resume = commands.add_parser("resume", help="end pauses now (all, or the named use cases)")
    resume.add_argument(
        "--use-case", action="append", dest="use_cases", help="only this use case (repeatable)"
    )
    review_cli.add_commands(commands)
    args = parser.parse_args(argv)

    try:
        settings = Settings.from_env()
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    handler = {
        "migrate": cmd_migrate,
        "ingest": cmd_ingest,
        "run": cmd_run,
        "demo": cmd_demo,
        "status": cmd_status,
        "trace": cmd_trace,
        "ui": cmd_ui,
        "failures": cmd_failures,
        "retry": cmd_retry,
        "discover": cmd_discover,
        "pauses": cmd_pauses,
        "resume": cmd_resume,
        "review": review_cli.cmd_review,
        "reprocess": review_cli.cmd_reprocess,
    }[args.command]
    return handler(settings, args)


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.dagster_home import ensure_dagster_home

    migrate(settings.database_url)
    print(f"application database is at the newest schema: {settings.database_url}")
    # a service runs dagster-webserver and dagster-daemon directly: they need the home's dagster.yaml
    print(f"Dagster home (dagster.yaml kept if present): {ensure_dagster_home(settings)}")
    return 0


def cmd_ingest(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope

    for path in args.files:
        if not path.is_file():
            print(f"error: {path}: no such file", file=sys.stderr)
            return EXIT_ERROR
    try:
        with session_scope(settings.database_url) as session:
            report = ingest_files(session, args.files)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for rejection in report.rejected:
        print(f"rejected {rejection}", file=sys.stderr)
    print(f"ingested {report.accepted} postings: {report.summary()}")
    return EXIT_REJECTED if report.rejected else 0


def _dagster(settings: Settings):  # noqa: ANN202 - returns (instance, defs, groups, app_db)
    from dagster import DagsterInstance

    from pipeline_defs.dagster_home import ensure_dagster_home
    from pipeline_defs.definitions import build_definitions, build_use_cases
    from pipeline_defs.factory import build_work_groups
    from resources.app_database import AppDatabase

    ensure_dagster_home(settings)
    built = build_use_cases(settings)
    groups = build_work_groups(built)
    defs = build_definitions(settings, built=built, groups=groups)
    return DagsterInstance.get(), defs, groups, AppDatabase(url=settings.database_url)


def _run_all(settings: Settings, only: list[str] | None, verbose: bool) -> tuple[list, bool]:
    """Load the taxonomy, then run every pending batch group by group; (reports, all succeeded)."""
    from pipeline_defs.runner import load_reference_data, run_pending, single_use_case_groups

    instance, defs, groups, app_db = _dagster(settings)
    taxonomy_ok = load_reference_data(defs, instance)
    if not taxonomy_ok:
        print("error: loading the skills taxonomy failed; skill_entities will wait for it", file=sys.stderr)
    selected = single_use_case_groups(groups, only) if only else groups
    reports = run_pending(
        defs,
        selected,
        instance,
        app_db,
        verbose=verbose,
        on_run=lambda name, index, total: print(f"{name}: run {index} of {total} ...", flush=True),
    )
    for report in reports:
        for name, why in report.paused.items():
            print(f"{name}: paused, skipped: {why}")
        print(
            f"{report.group} ({', '.join(report.use_cases)}): {report.pending_before} postings pending, "
            f"{len(report.runs)} runs ({len(report.failed_runs)} failed) in {report.seconds:.1f}s"
        )
    return reports, taxonomy_ok and not any(report.failed_runs for report in reports)


def _declared_use_case_names(settings: Settings) -> set[str]:
    from pipeline_defs.catalog import declared_use_cases

    return {use_case.name for use_case in declared_use_cases(settings)}


def cmd_run(settings: Settings, args: argparse.Namespace) -> int:
    known = _declared_use_case_names(settings)
    unknown = [name for name in args.use_cases or [] if name not in known]
    if unknown:
        print(f"error: no use case {unknown[0]!r} (declared: {', '.join(sorted(known))})", file=sys.stderr)
        return EXIT_ERROR
    print(f"LLM backend: {settings.llm_backend}; app database: {settings.database_url}")
    _, ok = _run_all(settings, args.use_cases, args.verbose)
    return 0 if ok else 1


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope

    started = time.perf_counter()
    with session_scope(settings.database_url) as session:
        report = ingest_files(session, [DEMO_POSTINGS])
    print(f"demo postings: {report.summary()}")
    print(
        f"summarizing and extracting skills with the {settings.llm_backend} backend "
        "(several seconds per posting on a CPU) ...",
        flush=True,
    )
    reports, ok = _run_all(settings, None, args.verbose)
    wall = time.perf_counter() - started
    keys = report.inserted + report.updated + report.unchanged
    with session_scope(settings.database_url) as session:
        print()
        print(render_postings(session, keys))
        latency = session.execute(
            select(UseCaseOutput.use_case, func.avg(Interaction.latency_ms), func.count(Interaction.id))
            .join(Interaction, Interaction.id == UseCaseOutput.interaction_id)
            .where(UseCaseOutput.posting_key.in_(keys), Interaction.backend != "script")
            .group_by(UseCaseOutput.use_case)
        ).all()
    runs = sum(len(item.runs) for item in reports)
    failed_runs = sum(len(item.failed_runs) for item in reports)
    print()
    print(f"wall time {wall:.1f}s for {len(keys)} postings; {runs} runs ({failed_runs} failed)")
    for use_case, mean_ms, count in latency:
        print(f"  {use_case}: mean LLM time {mean_ms / 1000:.1f}s per posting over {count} postings")
    print("trace a posting:  .venv/bin/pipeline trace demo-001")
    print("quality, review:  .venv/bin/pipeline review")
    print("open the UI:      make ui   (then http://127.0.0.1:3000)")
    return 0 if ok else 1


def render_postings(session, keys: list[str]) -> str:  # noqa: ANN001 - a SQLAlchemy session
    """Each posting's summary, skills and resolved concepts, as the demo prints them."""
    outputs: dict[tuple[str, str], dict] = {
        (row.posting_key, row.use_case): row.value
        for row in session.scalars(select(UseCaseOutput).where(UseCaseOutput.posting_key.in_(keys)))
    }
    lines = []
    for posting in session.scalars(select(Posting).where(Posting.key.in_(keys)).order_by(Posting.id)):
        summary = outputs.get((posting.key, "posting_summary"), {}).get("summary", "(none yet)")
        lines.append(f"{posting.key}  {posting.title} ({posting.company or 'company not stated'})")
        lines.append(f"  summary:  {_clip(summary, 200)}")
        skills = outputs.get((posting.key, "posting_skills"))
        entities = outputs.get((posting.key, "skill_entities"))
        if skills is None:
            lines.append("  skills:   (none yet)")
        elif entities is None:
            mentions = ", ".join(skill["mention"] for skill in skills["skills"])
            lines.append(f"  skills:   {_clip(mentions, 200)}")
        else:
            resolved = [
                f"{entity['mention']} -> "
                + (f"{entity['concept_label']} ({entity['stage']})" if entity["concept_uri"] else "unmatched")
                for entity in entities["entities"]
            ]
            lines.append(f"  skills:   {'; '.join(resolved) or '(none found)'}")
        if skills and skills.get("ungrounded"):
            lines.append(f"  dropped (not in the posting): {', '.join(skills['ungrounded'])}")
        assessment = outputs.get((posting.key, "posting_assessment"))  # PIPELINE_EXTRA_USE_CASES
        if assessment:
            lines.append(f"  profile:  {_clip(assessment['profile'], 200)}")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope
    from domain.language.declaration import model_label
    from pipeline_defs.definitions import build_use_cases

    built = build_use_cases(settings)
    with session_scope(settings.database_url) as session:
        total = session.scalar(select(func.count(Posting.id)))
        print(f"{total} postings in {settings.database_url}")
        for item in built:
            pending = len(work.find_pending_work(session, item.spec))
            states = dict(
                session.execute(
                    select(WorkItem.status, func.count())
                    .where(WorkItem.use_case == item.use_case.name)
                    .group_by(WorkItem.status)
                ).all()
            )
            print(
                f"{item.use_case.name} (version {item.use_case.version}, {model_label(item.use_case)}): "
                f"{pending} pending, {states.get('claimed', 0)} claimed, {states.get('failed', 0)} failed"
            )
        for pause in work.active_pauses(session).values():
            print(f"{pause.use_case}: {_describe_pause(pause)}")
    return 0


def cmd_trace(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope
    from pipeline_defs.definitions import build_use_cases
    from pipeline_defs.trace import PostingNotFound, render_markdown, render_text, trace_blocks

    specs = [item.spec for item in build_use_cases(settings)]
    try:
        with session_scope(settings.database_url) as session:
            blocks = list(trace_blocks(session, args.key, specs))
    except PostingNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(render_text(blocks), end="")
    if args.markdown:
        args.markdown.write_text(render_markdown(blocks))
        print(f"\nwrote {args.markdown}")
    return 0


def cmd_failures(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope

    with session_scope(settings.database_url) as session:
        parked = work.list_failures(session, args.use_case)
    if not parked:
        print("no parked items" + (f" for {args.use_case}" if args.use_case else ""))
        return 0
    rows = [
        [
            item.use_case,
            item.posting_key,
            _clip(item.title or "", 30),
            str(item.attempts),
            _when(item.failed_at),
            _clip(" ".join((item.last_error or "").split()), ERROR_CHARS),
        ]
        for item in parked
    ]
    print(_table(["use case", "posting", "title", "attempts", "parked at", "last error"], rows))
    print(
        f"\n{len(parked)} parked items; re-queue them with `pipeline retry --all` (or --use-case, --posting)"
    )
    return 0


def cmd_retry(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope

    with session_scope(settings.database_url) as session:
        requeued = work.requeue_failed(session, use_case=args.use_case, posting_keys=args.postings)
    if not requeued:
        print("no parked items matched; nothing re-queued")
        return 0
    print(
        f"re-queued {requeued} parked items with a fresh set of attempts; the discovery sensors pick them "
        "up at their next tick (or run `pipeline run` now)"
    )
    return 0


def cmd_pauses(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope

    with session_scope(settings.database_url) as session:
        pauses = work.active_pauses(session)
    if not pauses:
        print("no use case is paused")
    for pause in pauses.values():
        print(f"{pause.use_case}: {_describe_pause(pause)}")
    return 0


def cmd_resume(settings: Settings, args: argparse.Namespace) -> int:
    from appdb.database import session_scope

    with session_scope(settings.database_url) as session:
        paused = [
            name for name in work.active_pauses(session) if args.use_cases is None or name in args.use_cases
        ]
        work.resume_use_cases(session, paused)
    if not paused:
        print("no use case was paused" + (f" among {', '.join(args.use_cases)}" if args.use_cases else ""))
        return 0
    print(f"resumed {', '.join(paused)}; the discovery sensors request runs again at their next tick")
    return 0


def _describe_pause(pause: work.Pause) -> str:
    minutes = max(0, round((pause.resume_at - utcnow()).total_seconds() / 60))
    trips = f", trip {pause.consecutive_trips} in a row" if pause.consecutive_trips > 1 else ""
    return f"paused until {_when(pause.resume_at)} (in {minutes} min{trips}): {pause.reason}"


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


# --- shadow discovery --------------------------------------------------------------------------


def cmd_discover(settings: Settings, args: argparse.Namespace) -> int:
    """Shadow mode: the discovery queries' answer now, compared with an expected list if given.

    It only reads (on a session that is rolled back), so it is safe to run beside a live
    deployment or an older system being migrated from.
    """
    from pipeline_defs.definitions import build_use_cases

    if not args.shadow:
        print(
            "error: `pipeline discover` needs --shadow (the only mode so far): it shows what each use case "
            "would process now, without claiming or writing anything",
            file=sys.stderr,
        )
        return EXIT_ERROR
    built = build_use_cases(settings)
    declared = [item.use_case.name for item in built]
    unknown = [name for name in args.use_cases or [] if name not in declared]
    if unknown:
        print(f"error: no use case {unknown[0]!r} (declared: {', '.join(declared)})", file=sys.stderr)
        return EXIT_ERROR
    selected = [item for item in built if args.use_cases is None or item.use_case.name in args.use_cases]
    try:
        expected = read_expected_work(args.expect) if args.expect else None
        with read_only_session(settings.database_url) as session:
            discovered = {item.use_case.name: work.find_pending_work(session, item.spec) for item in selected}
            pauses = work.active_pauses(session)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    differences = None
    if expected is not None:
        names = list(discovered) + sorted(
            name
            for name in expected
            if name not in discovered and (args.use_cases is None or name in args.use_cases)
        )
        differences = {
            name: compare_work(expected.get(name, []), discovered.get(name, []), declared=name in declared)
            for name in names
        }
    if args.json:
        print(json.dumps(_shadow_json(selected, discovered, pauses, args.expect, differences), indent=2))
    else:
        _print_shadow(settings, selected, discovered, pauses, args.expect, differences)
    if differences is None:
        return 0
    return EXIT_DIFFERENT if any(not difference.matches for difference in differences.values()) else 0


@dataclass(frozen=True)
class ShadowDifference:
    """Expected versus discovered work of one use case."""

    missing: list[str]
    unexpected: list[str]
    expected: int
    discovered: int
    declared: bool = True

    @property
    def matches(self) -> bool:
        return not self.missing and not self.unexpected


def compare_work(
    expected: Sequence[str], discovered: Sequence[str], *, declared: bool = True
) -> ShadowDifference:
    """Missing: expected but not discovered; unexpected: discovered but not expected (both in order)."""
    expected_set, discovered_set = set(expected), set(discovered)
    return ShadowDifference(
        missing=[key for key in dict.fromkeys(expected) if key not in discovered_set],
        unexpected=[key for key in discovered if key not in expected_set],
        expected=len(expected_set),
        discovered=len(discovered_set),
        declared=declared,
    )


def read_expected_work(path: Path) -> dict[str, list[str]]:
    """Expected work as `use_case,posting_key` pairs: CSV with that header, or JSON lines (.jsonl/.json).

    Raises ValueError naming the file and line of the first malformed entry.
    """
    expected: dict[str, list[str]] = {}
    suffix = path.suffix.lower()
    with path.open(newline="", encoding="utf-8-sig") as handle:
        if suffix == ".csv":
            reader = csv.DictReader(handle)
            if not {"use_case", "posting_key"} <= set(reader.fieldnames or []):
                raise ValueError(
                    f"{path}: the CSV header must name use_case,posting_key (found {reader.fieldnames})"
                )
            entries = ((reader.line_num, row) for row in reader)
        elif suffix in (".jsonl", ".json", ".ndjson"):
            entries = (
                (number, _json_line(path, number, line))
                for number, line in enumerate(handle, 1)
                if line.strip()
            )
        else:
            raise ValueError(f"{path}: expected a .csv or .jsonl file (use_case,posting_key per line)")
        for number, entry in entries:
            use_case, key = (str(entry.get(field) or "").strip() for field in ("use_case", "posting_key"))
            if not use_case or not key:
                raise ValueError(f"{path}:{number}: needs both use_case and posting_key")
            expected.setdefault(use_case, []).append(key)
    return expected


def _json_line(path: Path, number: int, line: str) -> dict:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{number}: not valid JSON: {exc.msg}") from exc
    if not isinstance(entry, dict):
        raise ValueError(f"{path}:{number}: expected an object with use_case and posting_key")
    return entry


@contextmanager
def read_only_session(url: str) -> Iterator[Session]:
    """A session on an existing, current database that is rolled back at the end: it never writes.

    Unlike `session_scope`, it neither creates the database nor migrates it.
    """
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from appdb.database import alembic_config, get_engine, normalize_url

    parsed = make_url(normalize_url(url))
    if parsed.get_backend_name() == "sqlite" and parsed.database and not Path(parsed.database).is_file():
        raise ValueError(f"no application database at {url} (ingest postings first)")
    with get_engine(url).connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
        head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
        if current != head:
            raise ValueError(
                f"the application database at {url} is at schema {current or 'none'}, not {head}: "
                "run `pipeline migrate` first"
            )
        with Session(bind=connection) as session:
            yield session
        connection.rollback()


def _shadow_json(
    selected: Sequence[UseCaseDefinitions],
    discovered: dict[str, list[str]],
    pauses: dict[str, work.Pause],
    expect_path: Path | None,
    differences: dict[str, ShadowDifference] | None,
) -> dict:
    result: dict = {"use_cases": {}}
    for item in selected:
        name = item.use_case.name
        pause = pauses.get(name)
        result["use_cases"][name] = {
            "version": item.use_case.version,
            "count": len(discovered[name]),
            "posting_keys": discovered[name],
            "paused_until": pause.resume_at.isoformat() + "Z" if pause else None,
            "pause_reason": pause.reason if pause else None,
        }
    if differences is not None:
        result["expect"] = {
            "file": str(expect_path),
            "matches": all(difference.matches for difference in differences.values()),
            "use_cases": {
                name: {
                    "declared": difference.declared,
                    "expected": difference.expected,
                    "discovered": difference.discovered,
                    "missing": difference.missing,
                    "unexpected": difference.unexpected,
                }
                for name, difference in differences.items()
            },
        }
    return result


def _print_shadow(
    settings: Settings,
    selected: Sequence[UseCaseDefinitions],
    discovered: dict[str, list[str]],
    pauses: dict[str, work.Pause],
    expect_path: Path | None,
    differences: dict[str, ShadowDifference] | None,
) -> None:
    print(f"shadow discovery on {settings.database_url}: nothing is claimed or written")
    for item in selected:
        name, keys = item.use_case.name, discovered[item.use_case.name]
        print(f"{name} (version {item.use_case.version}): {len(keys)} postings would be processed now")
        if keys:
            print(f"  {_keys(keys)}")
        if name in pauses:
            print(f"  {_describe_pause(pauses[name])}; the sensor requests no runs until then")
    if differences is None:
        return
    print(f"\ncompared with {expect_path}:")
    for name, difference in differences.items():
        if not difference.declared:
            print(f"{name}: not a declared use case; {difference.expected} postings expected")
        elif difference.matches:
            print(f"{name}: matches ({difference.discovered} postings)")
        else:
            print(
                f"{name}: {difference.expected} expected, {difference.discovered} discovered: "
                f"{len(difference.missing)} missing, {len(difference.unexpected)} unexpected"
            )
        if difference.missing:
            print(f"  missing (expected, not discovered): {_keys(difference.missing)}")
        if difference.unexpected:
            print(f"  unexpected (discovered, not expected): {_keys(difference.unexpected)}")
    same = all(difference.matches for difference in differences.values())
    print(
        "discovery matches the expected work" if same else "discovery differs from the expected work (exit 1)"
    )


def _keys(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:SHOWN_KEYS])
    return shown + (f" ... and {len(keys) - SHOWN_KEYS} more" if len(keys) > SHOWN_KEYS else "")


def cmd_ui(settings: Settings, args: argparse.Namespace) -> int:
    from pipeline_defs.dagster_home import ensure_dagster_home

    home = ensure_dagster_home(settings)
    print(f"DAGSTER_HOME={home}")
    dagster = Path(sys.executable).with_name("dagster")
    # Started in the background (`nohup make ui &`, a service script) SIGINT arrives ignored, and
    # dagster dev then ignores SIGTERM too and cannot be stopped: give both their defaults back.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.SIG_DFL)
    workspace = str(PROJECT_ROOT / "workspace.yaml")
    os.execv(str(dagster), [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(args.port), "-w", workspace])


if __name__ == "__main__":
    sys.exit(main())
