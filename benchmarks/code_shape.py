"""The code's shape in numbers, for reviews of the engine-plugin seam (issue 36).

    python -m benchmarks.code_shape [--json]

- kind names in the engine: names and string literals (comments and docstrings left out) in the engine's
  packages that name a subject kind of a plugin ("posting", "postings", "autodo", any case; the package's
  own name, posting-enrichment, is not one); and in the entry outside its plugin registry;
- `posting_key` occurrences in the whole tree (product, tests, benchmarks);
- modules and lines per product folder (and the entry's runtime/ and cli/), product lines;
- the largest function of the product (lines, where);
- modules of the product that read the environment other than the settings module.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("pipeline_defs", "console", "sensors", "assets", "resources", "domain", "appdb", "plugins")
ENGINE = ("sensors", "assets", "resources", "domain", "appdb")
KIND_NAME = re.compile(r"posting|autodo", re.IGNORECASE)
PRODUCT_NAME = re.compile(r"posting[-_]enrichment", re.IGNORECASE)  # the package's name, not a kind
ENTRY = "pipeline_defs"
REGISTRY = "pipeline_defs/registry.py"  # the one module of the entry that names the plugins
ENVIRONMENT_READ = re.compile(r"os\.environ|os\.getenv|getenv\(")
SETTINGS_MODULES = ("pipeline_defs/settings.py", "pipeline_defs/configuration.py")


def python_files(folder: str) -> list[Path]:
    base = ROOT / folder
    if not base.is_dir():
        return []
    return sorted(path for path in base.rglob("*.py") if "migrations" not in path.parts)


def docstring_lines(source: str) -> set[int]:
    """The lines of every docstring (module, class, function), which are prose, not code."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            first = body[0] if body else None
            prose = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            if prose and isinstance(first.value.value, str):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def kind_names(path: Path) -> list[str]:
    """Code tokens (names, strings) of `path` that name a kind, as `line: token`."""
    source = path.read_text()
    prose = docstring_lines(source)
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        code = token.type in (tokenize.NAME, tokenize.STRING) and token.start[0] not in prose
        if code and KIND_NAME.search(PRODUCT_NAME.sub("", token.string)):
            found.append(f"{token.start[0]}: {token.string[:60]}")
    return found


def largest_function(paths: list[Path]) -> tuple[int, str]:
    best = (0, "")
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > best[0]:
                    best = (length, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return best


def measure() -> dict:
    product = [path for folder in PRODUCT for path in python_files(folder)]
    engine_kinds = {
        str(path.relative_to(ROOT)): names
        for folder in ENGINE
        for path in python_files(folder)
        if (names := kind_names(path))
    }
    every_file = [p for p in ROOT.rglob("*.py") if ".venv" not in p.parts and "data" not in p.parts[:1]]
    posting_key = sum(p.read_text().count("posting_key") for p in every_file if "migrations" not in p.parts)
    environment = sorted(
        str(path.relative_to(ROOT))
        for path in product
        if str(path.relative_to(ROOT)) not in SETTINGS_MODULES and ENVIRONMENT_READ.search(path.read_text())
    )
    entry_kinds = {
        str(path.relative_to(ROOT)): names
        for path in python_files(ENTRY)
        if str(path.relative_to(ROOT)) != REGISTRY and (names := kind_names(path))
    }
    length, where = largest_function(product)
    return {
        "kind_names_in_engine": sum(len(names) for names in engine_kinds.values()),
        "kind_names_in_entry_outside_registry": sum(len(names) for names in entry_kinds.values()),
        "engine_modules_naming_a_kind": len(engine_kinds),
        "posting_key_occurrences": posting_key,
        "modules_per_folder": {
            folder: len(python_files(folder)) for folder in PRODUCT if python_files(folder)
        },
        "lines_per_folder": {
            folder: sum(len(path.read_text().splitlines()) for path in python_files(folder))
            for folder in (*PRODUCT, "pipeline_defs/runtime", "pipeline_defs/cli")
            if python_files(folder)
        },
        "product_lines": sum(len(path.read_text().splitlines()) for path in product),
        "largest_function": {"lines": length, "where": where},
        "environment_read_outside_settings": environment,
        "engine_kind_names_by_module": engine_kinds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="everything, as JSON")
    args = parser.parse_args()
    figures = measure()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    for name, value in figures.items():
        if name == "engine_kind_names_by_module":
            continue
        print(f"{name}: {value}")


if __name__ == "__main__":
    main()
