"""`pipeline discover --shadow`: what each use case would process now; claims and writes nothing."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from appdb import discovery, pauses
from appdb.database import read_only_session
from appdb.redaction import redact
from console.terminal import EXIT_DIFFERENT, EXIT_ERROR, describe_pause, key_list
from pipeline_defs.settings import Settings

if TYPE_CHECKING:
    from assets.factory import UseCaseDefinitions


def register(commands: argparse._SubParsersAction) -> None:
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
        "--expect", type=Path, help="compare with expected work: CSV or JSON lines with use_case,subject_key"
    )
    discover.add_argument(
        "--json", action="store_true", help="print the whole result as JSON (keys uncapped)"
    )
    discover.set_defaults(handler=cmd_discover)


def cmd_discover(settings: Settings, args: argparse.Namespace) -> int:
    """Shadow mode: the discovery queries' answer now, compared with an expected list if given.

    It only reads (on a session that is rolled back), so it is safe to run beside a live
    deployment or an older system being migrated from.
    """
    from pipeline_defs.wiring import build_use_cases

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
            discovered = {
                item.use_case.name: discovery.find_pending_work(session, item.spec) for item in selected
            }
            active = pauses.active_pauses(session)
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
        print(json.dumps(_shadow_json(selected, discovered, active, args.expect, differences), indent=2))
    else:
        _print_shadow(settings, selected, discovered, active, args.expect, differences)
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
    """Expected work as `use_case,subject_key` pairs: CSV with that header, or JSON lines (.jsonl/.json).

    Raises ValueError naming the file and line of the first malformed entry.
    """
    expected: dict[str, list[str]] = {}
    suffix = path.suffix.lower()
    with path.open(newline="", encoding="utf-8-sig") as handle:
        if suffix == ".csv":
            reader = csv.DictReader(handle)
            if not {"use_case", "subject_key"} <= set(reader.fieldnames or []):
                raise ValueError(
                    f"{path}: the CSV header must name use_case,subject_key (found {reader.fieldnames})"
                )
            entries = ((reader.line_num, row) for row in reader)
        elif suffix in (".jsonl", ".json", ".ndjson"):
            entries = (
                (number, _json_line(path, number, line))
                for number, line in enumerate(handle, 1)
                if line.strip()
            )
        else:
            raise ValueError(f"{path}: expected a .csv or .jsonl file (use_case,subject_key per line)")
        for number, entry in entries:
            use_case, key = (str(entry.get(field) or "").strip() for field in ("use_case", "subject_key"))
            if not use_case or not key:
                raise ValueError(f"{path}:{number}: needs both use_case and subject_key")
            expected.setdefault(use_case, []).append(key)
    return expected


def _json_line(path: Path, number: int, line: str) -> dict:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{number}: not valid JSON: {exc.msg}") from exc
    if not isinstance(entry, dict):
        raise ValueError(f"{path}:{number}: expected an object with use_case and subject_key")
    return entry


def _shadow_json(
    selected: Sequence[UseCaseDefinitions],
    discovered: dict[str, list[str]],
    active: dict[str, pauses.Pause],
    expect_path: Path | None,
    differences: dict[str, ShadowDifference] | None,
) -> dict:
    result: dict = {"use_cases": {}}
    for item in selected:
        name = item.use_case.name
        pause = active.get(name)
        result["use_cases"][name] = {
            "version": item.use_case.version,
            "count": len(discovered[name]),
            "subject_keys": discovered[name],
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
    active: dict[str, pauses.Pause],
    expect_path: Path | None,
    differences: dict[str, ShadowDifference] | None,
) -> None:
    print(f"shadow discovery on {redact(settings.database_url)}: nothing is claimed or written")
    for item in selected:
        name, keys = item.use_case.name, discovered[item.use_case.name]
        print(
            f"{name} (version {item.use_case.version}): {len(keys)} {item.use_case.subject.plural} "
            "would be processed now"
        )
        if keys:
            print(f"  {key_list(keys)}")
        if name in active:
            print(f"  {describe_pause(active[name])}; the sensor requests no runs until then")
    if differences is None:
        return
    print(f"\ncompared with {expect_path}:")
    plurals = {item.use_case.name: item.use_case.subject.plural for item in selected}
    for name, difference in differences.items():
        if not difference.declared:
            print(f"{name}: not a declared use case; {difference.expected} subjects expected")
        elif difference.matches:
            print(f"{name}: matches ({difference.discovered} {plurals.get(name, 'subjects')})")
        else:
            print(
                f"{name}: {difference.expected} expected, {difference.discovered} discovered: "
                f"{len(difference.missing)} missing, {len(difference.unexpected)} unexpected"
            )
        if difference.missing:
            print(f"  missing (expected, not discovered): {key_list(difference.missing)}")
        if difference.unexpected:
            print(f"  unexpected (discovered, not expected): {key_list(difference.unexpected)}")
    same = all(difference.matches for difference in differences.values())
    print(
        "discovery matches the expected work" if same else "discovery differs from the expected work (exit 1)"
    )
