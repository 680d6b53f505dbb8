"""One run's work on one use case: what it holds, what happened, and the few things every step needs.

`BatchRun` travels whole through the batch loop, single calls, chains and the gym, instead of the eight
to ten arguments it stands for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from dagster import AssetExecutionContext

from appdb import claims, pauses
from domain.language.declaration import SCRIPT_BACKEND, UseCase
from domain.language.llm_types import Generation
from resources.app_database import AppDatabase
from resources.llm import LLMResource

CLAIM_LOST = "claim lost (the run was declared dead and its claims given back); output not written"


class ClaimLost(Exception):
    """The run no longer holds the subject's claim: the model is not called for it, nothing is stored."""


PARKED_NOTE = "(parked after repeated failures)"


@dataclass
class BatchOutcome:
    done: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    subjects: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped_current: int = 0
    skipped_held_elsewhere: int = 0
    llm_ms: float = 0.0
    calls: int = 0  # the run's calls, tokens and cost (at the configured prices): `record_run_cost`
    tokens: int = 0
    cost: float = 0.0
    check_failures: dict[str, dict[str, str]] = field(default_factory=dict)  # check -> subject -> reason

    def record_stored(self, key: str, value: dict[str, Any], stored: bool) -> bool:
        """Count a subject done, or failed when its claim was lost before the output was written."""
        if not stored:
            self.failed[key] = CLAIM_LOST
            return False
        self.done.append(key)
        self.outputs[key] = value
        return True

    @property
    def parked(self) -> list[str]:
        return sorted(key for key, error in self.failed.items() if error.endswith(PARKED_NOTE))


@dataclass
class BatchRun:
    """One run of one use case: who runs it, with what, and what it still holds.

    `remaining` is the keys still claimed and not finished: if the run stops early (the backend went
    away, a kill signal) they are given back without spending an attempt.
    """

    context: AssetExecutionContext
    use_case: UseCase
    app_db: AppDatabase
    llm: LLMResource | None
    run_id: str
    source: str
    force: bool = False
    remaining: set[str] = field(default_factory=set)
    outcome: BatchOutcome = field(default_factory=BatchOutcome)
    last_renewal: float = field(default_factory=time.monotonic)
    warmed: bool = False  # the use case's warm-up ran (`batch_run.warm_up`)
    # this process's instance id when the step runs away from its run's process (a Celery worker): its
    # own row fences it (`claims._step_fence`); None in the run's own process
    step_process: str | None = None

    @property
    def backend(self) -> str:
        """The backend that makes this use case's outputs: the LLM's, or "script" (a script use case,
        or a chain of script steps only)."""
        chain_of_scripts = self.use_case.steps is not None and not self.use_case.steps.models
        return self.llm.backend_name if self.llm is not None and not chain_of_scripts else SCRIPT_BACKEND

    @property
    def log(self) -> Any:
        return self.context.log

    def cost_of(self, model: str, generation: Generation | None) -> float:
        """What one call cost at its model's configured price (0: local, a script, or no answer)."""
        if self.llm is None or generation is None:
            return 0.0
        return self.llm.cost_of(model, generation.prompt_tokens, generation.completion_tokens)

    def load_model(self, model: str) -> None:
        """Load `model` once per run (a no-op when it is loaded), saying how long it took."""
        started = time.perf_counter()
        if self.llm is not None and self.llm.ensure_loaded(model):
            seconds = time.perf_counter() - started
            self.log.info(f"Loaded {model} on the {self.llm.backend_name} backend in {seconds:.1f}s")

    def finished(self, key: str) -> None:
        """`key` needs nothing more from this run (done, failed or unchanged)."""
        self.remaining.discard(key)

    def renew_claims_if_due(self) -> None:
        """Extend the lease on what the run still holds, a few times per lease (a long batch keeps it)."""
        if time.monotonic() - self.last_renewal > self.use_case.retry.lease_seconds / 4:
            with self.app_db.session() as session:
                claims.renew_claims(
                    session, self.use_case.name, sorted(self.remaining), self.run_id, self.use_case.retry
                )
            self.last_renewal = time.monotonic()

    def fence(self, key: str) -> ClaimLost | None:
        """Asked right before each model call for `key`: a run declared dead (its claims given to another
        run) calls the model for none of them. Fails open when the database cannot be asked: the store
        is fenced as well (`claims.complete_items`), so at worst a call is wasted, never stored twice."""
        try:
            with self.app_db.session() as session:
                held = claims.still_held(
                    session, self.use_case.name, key, self.run_id, step_process=self.step_process
                )
        except Exception:  # noqa: BLE001 - see above
            return None
        return None if held else ClaimLost(CLAIM_LOST)

    def drop_lost_claim(self, key: str) -> None:
        """A fenced subject: counted failed (no attempt spent: the claim is another run's), nothing stored."""
        self.outcome.failed[key] = CLAIM_LOST
        self.finished(key)

    def note_served(self) -> None:
        """After the run's first stored output the backend serves again: reset the breaker's trip count."""
        if len(self.outcome.done) == 1:
            host = self.llm.pinned_host if self.llm is not None and self.llm.several_hosts else None
            with self.app_db.session() as session:
                pauses.clear_pause(session, host.pause_key if host is not None else self.use_case.name)
