"""What a reviewer's correction is made of, and what a use case's correction hooks get.

A use case declares the corrections it accepts (`UseCase(review_edits={"summary": edit_summary})`): each
hook takes the output, the reviewer's `Edits` and a `CorrectionContext`, and returns the corrected output
or raises `CorrectionError` saying why it cannot. The review logic (`review_actions.py`) stays generic:
it refuses an edit no hook accepts, then checks the result against the schema and the blocking checks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class CorrectionError(ValueError):
    """A correction that cannot be made (names the item and why)."""


@dataclass(frozen=True)
class Edits:
    """What `pipeline review correct` changes: any combination that fits the output."""

    summary: str | None = None
    add_skills: Sequence[str] = ()
    remove_skills: Sequence[str] = ()
    concepts: Mapping[str, str] | None = None  # mention -> concept URI ("none": unmatched)

    def describe(self) -> str:
        parts = []
        if self.summary is not None:
            parts.append(f"--summary {json.dumps(self.summary, ensure_ascii=False)}")
        parts += [f"--add-skill {json.dumps(m, ensure_ascii=False)}" for m in self.add_skills]
        parts += [f"--remove-skill {json.dumps(m, ensure_ascii=False)}" for m in self.remove_skills]
        parts += [
            f"--concept {json.dumps(f'{m}={u}', ensure_ascii=False)}"
            for m, u in (self.concepts or {}).items()
        ]
        return " ".join(parts)

    @property
    def kinds(self) -> list[str]:
        """Which kinds of edit this holds, in a fixed order: summary, skills, concepts."""
        present = {
            "summary": self.summary is not None,
            "skills": bool(self.add_skills or self.remove_skills),
            "concepts": bool(self.concepts),
        }
        return [kind for kind, there in present.items() if there]

    @property
    def empty(self) -> bool:
        return not self.kinds


EDIT_SCOPES = {
    "summary": "--summary applies to outputs with a summary",
    "skills": "--add-skill and --remove-skill apply to skills outputs",
    "concepts": "--concept applies to resolved skills (entities)",
}
"""What each kind of edit is for: the error when a use case declares no hook for it."""


@dataclass(frozen=True)
class CorrectionContext:
    """What a correction hook may need: the posting, where the correction is (for messages), and the
    preferred label of a taxonomy concept (None when the URI is not in the loaded taxonomy)."""

    posting: Mapping[str, Any]
    where: str
    concept_label: Callable[[str], str | None]


EditHook = Callable[[dict[str, Any], Edits, CorrectionContext], dict[str, Any]]
