"""The autodo scanner's reading rules on small inputs (no database)."""

from __future__ import annotations

from pathlib import Path

from plugins.autodo.code_search import symbols_in
from plugins.autodo.identity import KnownItem, match_items
from plugins.autodo.planning import PlanItem, check_dependency, pick
from plugins.autodo.scanner import scan_paths


def scan_text(tmp_path: Path, name: str, text: str):  # noqa: ANN201
    path = tmp_path / name
    path.write_text(text)
    return scan_paths([tmp_path], tmp_path)


def test_a_marker_inside_a_python_string_is_not_a_comment(tmp_path: Path) -> None:
    result = scan_text(tmp_path, "m.py", 'TEXT = "# TODO: not an item"\nx = 1  # TODO: an item\n')
    assert [(i.text, i.line) for i in result.items] == [("an item", 2)]


def test_an_anchor_alone_is_not_an_item_and_names_the_item_it_follows(tmp_path: Path) -> None:
    result = scan_text(
        tmp_path, "TODO.md", "# T\n\nTODO: fix it <!-- TODO:WI-007 -->\n<!-- TODO:WI-008 -->\n"
    )
    assert [(i.text, i.anchor) for i in result.items] == [("fix it", "WI-007")]


def test_bold_items_count_in_todo_files_only(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text("# Guide\n\n- **Key point**: prose\n")
    (tmp_path / "TODO.md").write_text("# Plan\n\n- **Do this**: soon\n")
    result = scan_paths([tmp_path], tmp_path)
    assert [i.text for i in result.items] == ["Do this: soon"]


def test_matching_prefers_anchor_then_fingerprint_then_fuzzy(tmp_path: Path) -> None:
    items = scan_text(
        tmp_path, "TODO.md", "# A\n\n- [ ] write the guide\n- [ ] fix the reader quickly\n"
    ).items
    known = [
        KnownItem("WI-001", "TODO.md", items[0].fingerprint, "write the guide"),
        KnownItem("WI-002", "TODO.md", "other", "fix the reader quick"),
    ]
    matches = match_items(items, known)
    assert [(m.key, m.how) for m in matches] == [("WI-001", "fingerprint"), ("WI-002", "fuzzy")]
    fresh = match_items(items, [])
    assert [m.key for m in fresh] == ["WI-001", "WI-002"]


def test_pick_and_cycles() -> None:
    from datetime import datetime

    t = datetime(2026, 1, 1)
    items = {
        "A": PlanItem("A", "a", "open", "P2", t, depends_on=("B",)),
        "B": PlanItem("B", "b", "open", "P3", t),
        "C": PlanItem("C", "c", "open", "P1", t.replace(day=2)),
    }
    assert [i.key for i in pick(items, 3)] == ["C", "B"]
    try:
        check_dependency(items, "B", "A")
    except ValueError as exc:
        assert "B -> A -> B" in str(exc)
    else:
        raise AssertionError("a cycle was accepted")


def test_symbols_are_the_code_looking_words() -> None:
    assert symbols_in("Call `LLMResource.pace` from the OpenAI backend and fix parse_rows") == [
        "LLMResource.pace",
        "OpenAI",
        "parse_rows",
    ]
