"""Domain plugins: what a kind of subject brings to the work core.

The core (discovery, claims and leases, retries and parking, versions and staleness, traces, checks and
review, the Dagster assets with a dynamic partition per subject) knows subjects only as a kind, a key,
content and a content hash. A plugin supplies the rest:

- `kind`: the subject kind, also the name of its Dagster dynamic partitions and of its source asset;
- `template_variables`: the fields its use cases' prompts may name;
- `merge`: what an upsert does with a subject already stored (`domain/core/merge.py`);
- `use_cases`: the use cases it declares over its subjects (each with `subject_kind=kind`);
- its ingest or scan, in its own module (`plugins/postings/store/ingest.py`,
  `plugins/autodo/service.py`).

Postings are the first plugin (`POSTINGS_PLUGIN`; their use cases are chosen by the settings in
`pipeline_defs/catalog.py`), autodo the second (`plugins/autodo/autodo_use_cases.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from domain.core.merge import MergeStrategy, replace
from domain.language.declaration import UseCase
from domain.language.templates import POSTING_VARIABLES


@dataclass(frozen=True)
class DomainPlugin:
    kind: str
    description: str
    template_variables: tuple[str, ...]
    merge: MergeStrategy = replace
    use_cases: tuple[UseCase, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for use_case in self.use_cases:
            if use_case.subject_kind != self.kind:
                raise ValueError(
                    f"plugin {self.kind}: use case {use_case.name} runs on {use_case.subject_kind} subjects"
                )


POSTINGS_PLUGIN = DomainPlugin(
    kind="postings",
    description="Job postings, ingested from JSONL or CSV (`pipeline ingest`).",
    template_variables=POSTING_VARIABLES,
)
