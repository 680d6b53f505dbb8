"""Resolution quality figures of a run, from skill_entities outputs: for the UI's numeric metadata.

`resolution_figures(outputs)` takes the outputs a run stored (each `{"entities": [...], ...}`)
and returns plain numbers: how many mentions, the share resolved to a concept, the share left
unmatched, the mean confidence of the resolved ones, and the share decided by each stage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any


def resolution_figures(outputs: Iterable[Mapping[str, Any]]) -> dict[str, float | int]:
    """Figures over every entity of every output; shares are 0.0 when there is no mention at all."""
    mentions = resolved = 0
    confidence_total = 0.0
    stages: Counter[str] = Counter()
    for output in outputs:
        for entity in output.get("entities") or []:
            mentions += 1
            stages[str(entity.get("stage", "unmatched"))] += 1
            if entity.get("concept_uri"):
                resolved += 1
                confidence_total += float(entity.get("confidence") or 0.0)
    figures: dict[str, float | int] = {
        "mentions": mentions,
        "share_resolved": round(resolved / mentions, 4) if mentions else 0.0,
        "share_unmatched": round((mentions - resolved) / mentions, 4) if mentions else 0.0,
        "mean_confidence": round(confidence_total / resolved, 4) if resolved else 0.0,
    }
    for stage, count in sorted(stages.items()):
        figures[f"share_{stage}"] = round(count / mentions, 4)
    return figures
