"""CPU seconds by stage of the work: the tagger, the linker and the faithfulness check, timed in process.

The throughput benchmarks report a posting's CPU by stage: the tagger (posting_skills' script steps),
the linker (skill_entities' script), the faithfulness check of the summaries (`summary_faithful`), the
orchestration (all the rest: Dagster, the database, prompts and the LLM client) and the model server's
time. The first three are timed here, in the process that does the work, by wrapping the functions the
runs call (`timed_use_cases`) and the faithfulness checker's method; the process's CPU (every thread:
the encoders' BLAS threads too) is counted while a stage runs, an inner stage's time inside an outer
one counted once, under the outer.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

TAGGER, LINKER, FAITHFULNESS = "tagger", "linker", "faithfulness check"
ORCHESTRATION, MODEL_SERVER = "orchestration", "model server"
STAGES = (TAGGER, LINKER, FAITHFULNESS, ORCHESTRATION)
SCRIPT_STAGES = {"posting_skills": TAGGER, "skill_entities": LINKER}
"""The use cases whose script functions are a stage of their own."""


class StageCpu:
    """CPU seconds of this process spent inside each stage (outermost stage only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys((TAGGER, LINKER, FAITHFULNESS), 0.0)
        self.calls: dict[str, int] = dict.fromkeys(self.seconds, 0)
        self._inside = threading.local()

    def timed(self, function: Callable[..., Any], stage: str) -> Callable[..., Any]:
        """`function`, its calls counted under `stage`."""

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(self._inside, "stage", None):  # inside another stage: counted there
                return function(*args, **kwargs)
            self._inside.stage = stage
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + time.process_time() - started
                self.calls[stage] = self.calls.get(stage, 0) + 1
                self._inside.stage = None

        return timed

    @contextmanager
    def faithfulness_timed(self) -> Iterator[None]:
        """The faithfulness checker's `unsupported` timed while inside (every checker of the process)."""
        from plugins.postings.quality.faithfulness import FaithfulnessChecker

        original = FaithfulnessChecker.unsupported
        FaithfulnessChecker.unsupported = self.timed(original, FAITHFULNESS)  # type: ignore[method-assign]
        try:
            yield
        finally:
            FaithfulnessChecker.unsupported = original  # type: ignore[method-assign]

    def per_posting(self, postings: int) -> dict[str, float]:
        return {stage: round(seconds / max(postings, 1), 4) for stage, seconds in self.seconds.items()}


def timed_use_cases(use_cases: Sequence[Any], cpu: StageCpu) -> list[Any]:
    """The use cases with the script functions of `SCRIPT_STAGES` timed under their stage."""
    from domain.language.steps import ScriptStep

    timed = []
    for use_case in use_cases:
        stage = SCRIPT_STAGES.get(use_case.name)
        if stage is not None and use_case.function is not None:
            use_case = dataclasses.replace(use_case, function=cpu.timed(use_case.function, stage))
        if stage is not None and use_case.steps is not None:
            steps = tuple(
                dataclasses.replace(step, function=cpu.timed(step.function, stage))
                if isinstance(step, ScriptStep)
                else step
                for step in use_case.steps.steps
            )
            use_case = dataclasses.replace(use_case, steps=dataclasses.replace(use_case.steps, steps=steps))
        timed.append(use_case)
    return timed


@contextmanager
def stages_timed(cpu: StageCpu) -> Iterator[None]:
    """Every use case the code location declares (`pipeline_defs.catalog.declared_use_cases`), and the
    faithfulness check, timed by stage while inside: for `pipeline run` in this process."""
    from pipeline_defs import catalog

    original = catalog.declared_use_cases

    def declared(settings: Any) -> tuple[Any, ...]:
        return tuple(timed_use_cases(original(settings), cpu))

    catalog.declared_use_cases = declared  # type: ignore[assignment]
    try:
        with cpu.faithfulness_timed():
            yield
    finally:
        catalog.declared_use_cases = original  # type: ignore[assignment]


def cores_to_keep_busy(cpu_seconds_per_posting: float, server_seconds_per_posting: float) -> float | None:
    """Cores that keep the server busy: CPU seconds a posting x the server's postings a second (its
    least wall time a posting at its slots); None without a server time."""
    if not server_seconds_per_posting:
        return None
    return round(cpu_seconds_per_posting / server_seconds_per_posting, 2)
