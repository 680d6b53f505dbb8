"""A retry is not the same call again: the earlier answer's error goes into the prompt, with another seed
and some temperature (at temperature 0 and the same seed the model would repeat its mistake)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import select, update

from appdb.database import session_scope
from appdb.models import Interaction, WorkItem, utcnow
from domain.language.llm_types import Generation
from pipeline_defs.definitions import build_definitions
from pipeline_defs.settings import Settings
from resources.llm import LLMResource
from tests.support.postings import POSTINGS, run_use_case, seed_postings


class FirstAnswerLoops(LLMResource):
    """Loops on the first try (blocked: degenerate), then answers a good summary."""

    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []

    @property
    def backend_name(self) -> str:
        return "fake"

    def _load(self, model: str) -> Any:
        return model

    def _generate(self, handle, model, prompt, system_prompt, schema, options) -> Generation:  # noqa: ANN001
        FirstAnswerLoops.calls.append((prompt, dict(options)))
        if "rejected" not in prompt:
            text = "Build pipelines and build pipelines and build pipelines and build pipelines and more."
        else:
            text = "Brightwave Energy hires a Data Engineer in Berlin to build Python and SQL pipelines."
        return Generation(json.dumps({"summary": text}), 40, 12, 1.0)


def test_a_retry_carries_the_earlier_error_and_another_seed(
    sqlite_url: str, tmp_path: Path, dagster_instance
) -> None:
    FirstAnswerLoops.calls.clear()
    seed_postings(sqlite_url, tmp_path, POSTINGS[:1])
    defs = build_definitions(Settings.from_env().changed(database_url=sqlite_url), llm=FirstAnswerLoops())
    first = run_use_case(defs, dagster_instance, ["p-1"])
    assert first.success  # a blocked output is the posting's failed attempt, not a failed run
    with session_scope(sqlite_url) as session:  # the backoff has passed
        session.execute(update(WorkItem).values(next_attempt_at=utcnow() - timedelta(seconds=1)))
    run_use_case(defs, dagster_instance, ["p-1"])
    (first_prompt, first_options), (retry_prompt, retry_options) = FirstAnswerLoops.calls
    assert "rejected" not in first_prompt and first_options["temperature"] == 0.0
    assert (
        "An earlier answer for this posting was rejected: blocked by check summary_not_degenerate"
        in retry_prompt
    )
    assert retry_prompt.endswith("Summary:")  # the answer's cue stays last
    assert retry_options["seed"] == 1 and retry_options["temperature"] >= 0.4
    with session_scope(sqlite_url) as session:
        item = session.scalars(select(WorkItem)).one()
        calls = session.scalars(select(Interaction).order_by(Interaction.id)).all()
    assert item.status == "done"
    assert calls[-1].prompt == retry_prompt and calls[-1].options["seed"] == 1  # traced as sent
