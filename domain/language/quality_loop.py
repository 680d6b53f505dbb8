"""A use case's part in the quality loop (docs/gym.md): how its outputs are shown, judged, compared
with the reviewers' gold and corrected, as one value of its declaration (`UseCase.quality`).

The hooks travel together: a use case that is judged is also shown and compared, and a use case
that takes none of them (a script's side table, autodo's plans) leaves the whole value out instead
of eight fields. The types of the quality layer's values (a rubric, a gold set, an edit) are
`Any` here: the use-case language sits below `domain.quality` and knows no quality logic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class QualityLoop:
    """The gym and review hooks of one use case; every one is optional.

    display: `display(output) -> text`: an output in one line, as review lists show it (default: JSON).
    judge_view: `judge_view(output) -> text` shows an output to the judge model, which grades a sample
        of each run's outputs; None: not judged.
    quality_grade: `quality_grade(subject, output) -> {criterion: 1..5}`: the deterministic judge's
        grades of one output (the gym's default judge; an LLM judge grades through `judge_view`).
    judge_rubric: the rubric an LLM judge grades `judge_view` against (`domain.quality.judge_rubric`);
        PIPELINE_JUDGE_RUBRIC replaces it.
    judge_calibration: `calibration(judge, grade)` runs a judge over known good and bad outputs and
        returns a verdict (`.passed`, `.message()`); without one an LLM judge grades this use case only
        when calibration is turned off.
    gold_items: `gold_items(output) -> set of strings` makes outputs comparable with the reviewers'
        corrections (precision and recall over the items); None: whole outputs.
    public_gold: a public gold set (`domain.quality.gold.PublicGold`) the gold check also scores
        against, once its path is configured.
    review_edits: the corrections a reviewer may make (`domain.quality.corrections.ReviewEdit`: the
        options of `pipeline review correct` and the hook that applies them).
    """

    display: Callable[[dict[str, Any]], str] | None = None
    judge_view: Callable[[dict[str, Any]], str] | None = None
    quality_grade: Callable[[Mapping[str, Any], dict[str, Any]], dict[str, int]] | None = None
    judge_rubric: Any = None  # a domain.quality.judge_rubric.Rubric
    judge_calibration: Callable[[str, Callable[..., Any]], Any] | None = None
    gold_items: Callable[[dict[str, Any]], Iterable[str]] | None = None
    public_gold: Any = None  # a domain.quality.gold.PublicGold
    review_edits: tuple[Any, ...] = ()  # domain.quality.corrections.ReviewEdit


NO_QUALITY_LOOP = QualityLoop()
"""The default: shown as JSON, not judged, compared as whole outputs, not correctable."""
