"""Fan-out and fan-in: use cases side by side on each posting, and a synthesizer that reads them all.

    ASSESSMENT_USE_CASES = fan_in(
        (POSTING_SENIORITY, POSTING_WORK_MODE, POSTING_CONTRACT),   # the experts, in parallel
        name="posting_assessment", version="2026-11-22.1", model="gemma3:270m",
        prompt="... {posting_seniority.level} ... {posting_work_mode.mode} ...",
        output_schema=...,
    )
    USE_CASES = (..., *ASSESSMENT_USE_CASES)

The synthesizer is an ordinary `UseCase` whose `upstream` is every expert (plus any
upstream it names itself). So each expert is an asset dependency of the synthesizer
(the lineage shows the fan-in), its prompt can use every expert's output, and
discovery offers it a posting only when every expert has a current output for that
posting (`appdb/discovery.py`, `pending_work_query`: one inner join per upstream).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from domain.language.declaration import UseCase
from domain.language.declaration_parts import DeclarationError


def fan_in(experts: Sequence[UseCase], **synthesizer: Any) -> tuple[UseCase, ...]:
    """The experts, then a synthesizer `UseCase(**synthesizer)` that reads all of them (on the experts'
    kind of subject unless it says)."""
    names = [expert.name for expert in experts]
    if len(experts) < 2:
        raise DeclarationError(f"fan_in needs at least two experts, got {names}")
    if len(set(names)) != len(names):
        raise DeclarationError(f"fan_in: experts must have distinct names, got {names}")
    for expert in experts:
        reads = sorted(set(expert.upstream) & set(names))
        if reads:
            raise DeclarationError(
                f"fan_in: expert {expert.name} reads {', '.join(reads)}; experts run side by side, "
                "so none may read another"
            )
    kinds = {expert.subject.name for expert in experts}
    if len(kinds) > 1:
        raise DeclarationError(f"fan_in: experts run on different kinds of subject: {sorted(kinds)}")
    synthesizer.setdefault("subject", experts[0].subject)
    upstream = tuple(dict.fromkeys((*synthesizer.pop("upstream", ()), *names)))
    return (*experts, UseCase(upstream=upstream, **synthesizer))
