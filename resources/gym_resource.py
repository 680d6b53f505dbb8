"""The gym's settings as a Dagster resource: judge model and sample, rubric, review threshold, gold sets.

A resource, so a run launched from the UI can change them in the launchpad (e.g. a
larger judge model, or a bigger sample for one evaluation run).
"""

from __future__ import annotations

from dagster import ConfigurableResource
from pydantic import Field

from domain.quality.judge_rubric import Rubric, load_rubric


class GymResource(ConfigurableResource):
    """judge_model: "deterministic" (quality signals, every new output) or an LLM the backend serves,
    which grades judge_sample outputs per use case and run (0: no judge) under the rubric once it
    passed its calibration set (calibrate_judge; a refused judge falls back to "deterministic").
    Outputs with a criterion graded below review_below go to review. public_gold_paths: use case ->
    the file of the public gold set it declares (`QualityLoop.public_gold`), scored by its gold check too.
    The gold check passes while F1 is at least gold_min_f1. prompt_style: the LLM judge's prompt form
    (completion, chat, or auto: as its backend says of the judge model)."""

    judge_model: str = "deterministic"
    judge_sample: int = Field(default=2, ge=0)
    calibrate_judge: bool = True
    rubric_path: str = ""
    review_below: float = Field(default=3.0, ge=1.0, le=5.0)
    public_gold_paths: dict[str, str] = {}
    prompt_style: str = "auto"
    gold_min_f1: float = Field(default=0.5, ge=0.0, le=1.0)

    def rubric_for(self, declared: Rubric | None) -> Rubric | None:
        """The rubric to judge a use case by: the file at `rubric_path` (PIPELINE_JUDGE_RUBRIC) when
        given, else the use case's own (`declared`; None: it declares none)."""
        return load_rubric(self.rubric_path, like=declared) if self.rubric_path else declared
