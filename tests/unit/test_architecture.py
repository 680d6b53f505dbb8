"""The one-way map holds: import-linter's contracts (pyproject.toml) and no import cycle between modules."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

PROJECT = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline_defs", "console", "sensors", "assets", "resources", "domain", "appdb")


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (Tarjan's SCCs)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_through_a_third_module() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert cycles({"a": ["b"], "b": ["c"], "c": []}) == []


def test_no_two_modules_import_each_other() -> None:
    graph = grimp.build_graph(*PACKAGES)  # every import, inside functions and TYPE_CHECKING blocks too
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    assert cycles(edges) == []


def test_the_import_linter_contracts_are_kept() -> None:
    """Layers point down (entry -> sensors -> assets -> resources -> domain -> appdb), the domain's own
    layers too, and neither the domain nor appdb imports Dagster."""
    result = subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_the_engine_names_no_kind_of_subject() -> None:
    """The engine (sensors, assets, resources, domain, the engine's tables) works on subjects: no name or
    string in its code says posting or autodo (its plugins bring their kinds)."""
    from benchmarks.code_shape import ENGINE, kind_names, python_files

    named = {str(path): kind_names(path) for folder in ENGINE for path in python_files(folder)}
    assert {path: names for path, names in named.items() if names} == {}


def test_the_entry_names_no_kind_outside_the_plugin_registry() -> None:
    """The entry (location, runtime, CLI) works on whatever plugins are registered: only
    `pipeline_defs/registry.py` names them (a third domain is its folder and one line there)."""
    from benchmarks.code_shape import ENTRY, REGISTRY, ROOT, kind_names, python_files

    named = {
        str(path.relative_to(ROOT)): kind_names(path)
        for path in python_files(ENTRY)
        if str(path.relative_to(ROOT)) != REGISTRY
    }
    assert {path: names for path, names in named.items() if names} == {}
    assert kind_names(ROOT / REGISTRY), "the registry names the shipped plugins"


def test_the_kind_finder_finds_a_kind_in_code_and_not_in_prose(tmp_path: Path) -> None:
    from benchmarks.code_shape import kind_names

    module = tmp_path / "module.py"
    module.write_text(
        '"""Works on postings."""\n\nTABLE = "postings"  # a posting\n\n\ndef f(autodo_key):\n    pass\n'
    )
    assert kind_names(module) == ['3: "postings"', "6: autodo_key"]
    module.write_text('DISTRIBUTION = "posting-enrichment"\n')
    assert kind_names(module) == []  # the package's name is not a kind
