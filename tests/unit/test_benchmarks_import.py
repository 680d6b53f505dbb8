"""Every benchmark module imports: a benchmark is run by hand, seldom, so a name it imports that was
moved or renamed elsewhere (as `daemon_throughput._postings` was) shows here, not on a user's machine."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import benchmarks

BENCHMARK_MODULES = sorted(info.name for info in pkgutil.iter_modules(benchmarks.__path__))


@pytest.mark.parametrize("module", BENCHMARK_MODULES)
def test_the_benchmark_imports(module: str) -> None:
    importlib.import_module(f"benchmarks.{module}")
