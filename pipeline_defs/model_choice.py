"""Which model, backend and prompt style each LLM use case runs with: the plugins' declarations are the
defaults, the settings choose.

- model: PIPELINE_MODELS for the use case (`posting_summary=llama3.1:8b`), else PIPELINE_MODEL for every
  step still on its plugin's default model (a model a plugin setting chose, such as the skills
  verifier's, stays), else the declared one.
- backend: PIPELINE_BACKENDS for the use case, else the deployment's (PIPELINE_LLM_BACKEND).
- prompt style: PIPELINE_PROMPT_STYLES for the use case, else PIPELINE_PROMPT_STYLE (`auto`). A use case
  without a chat form runs in completion form; `auto` on the embedded backend is completion (its model
  is a base model) and, on a server, what the server says of the model at the run.

The chosen model (and the style, when set to chat) is part of an output's identity (`model_label`):
change it and every output of that use case is stale once. Work groups, sensors and jobs follow the
chosen models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from domain.language.chat_prompts import AUTO_STYLE, COMPLETION_STYLE, PROMPT_STYLES
from domain.language.declaration import UseCase
from domain.language.declaration_parts import DeclarationError
from domain.language.steps import Chain, LLMStep
from pipeline_defs.settings import LLM_BACKENDS, Settings

JUDGE = "judge"
"""The judge's name in PIPELINE_MODELS and PIPELINE_PROMPT_STYLES (beside PIPELINE_JUDGE_MODEL)."""


@dataclass(frozen=True)
class Choice:
    """What one use case runs with, and where each part came from."""

    use_case: str
    model: str
    backend: str
    prompt_style: str
    origins: Mapping[str, str]
    models: tuple[str, ...]
    """Every model it calls: its own, or each LLM step's of a chain."""


def choose_models(
    use_cases: Sequence[UseCase], settings: Settings, default_models: Mapping[str, str]
) -> list[UseCase]:
    """The use cases with the settings' models, backends and prompt styles; `default_models`: kind ->
    the model its plugin declares when the deployment names none."""
    _refuse_unknown(settings, {use_case.name for use_case in use_cases})
    return [
        _chosen(use_case, settings, default_models.get(use_case.subject_kind, "")) for use_case in use_cases
    ]


def choices(use_cases: Sequence[UseCase], settings: Settings) -> list[Choice]:
    """What the chosen use cases run with (for `pipeline config`)."""
    models, styles, backends = (dict(pairs) for pairs in _per_use_case(settings))
    listed = []
    for use_case in use_cases:
        if not use_case.uses_llm:
            continue
        listed.append(
            Choice(
                use_case.name,
                use_case.model,
                use_case.backend or settings.llm_backend,
                use_case.prompt_style,
                origins={
                    "model": _origin(settings, "use_case_models", use_case.name in models, "model"),
                    "backend": _origin(
                        settings, "use_case_backends", use_case.name in backends, "llm_backend"
                    ),
                    "prompt_style": _origin(
                        settings, "use_case_prompt_styles", use_case.name in styles, "prompt_style"
                    ),
                },
                models=tuple(dict.fromkeys(use_case.steps.models))
                if use_case.steps is not None
                else (use_case.model,),
            )
        )
    return listed


def judge_choice(settings: Settings) -> tuple[str, str]:
    """(the judge model, its prompt style) as the settings say."""
    models, styles, _ = (dict(pairs) for pairs in _per_use_case(settings))
    model = models.get(JUDGE, settings.judge_model)
    style = styles.get(JUDGE, settings.prompt_style)
    if style == AUTO_STYLE and settings.llm_backend == "embedded":
        style = COMPLETION_STYLE
    return model, style


def _chosen(use_case: UseCase, settings: Settings, default_model: str) -> UseCase:
    if not use_case.uses_llm:
        return use_case
    models, styles, backends = (dict(pairs) for pairs in _per_use_case(settings))
    backend = backends.get(use_case.name, "")
    if backend == settings.llm_backend:
        backend = ""
    model = models.get(use_case.name) or ""
    style = styles.get(use_case.name, settings.prompt_style)
    if style == AUTO_STYLE and (backend or settings.llm_backend) == "embedded":
        style = COMPLETION_STYLE  # the embedded model is a base model; say `chat` for an instruct GGUF
    if not use_case.has_chat_form:
        if use_case.name in styles and style != COMPLETION_STYLE:
            raise DeclarationError(
                f"PIPELINE_PROMPT_STYLES: {use_case.name} has no chat form; it runs in completion form only"
            )
        style = COMPLETION_STYLE
    chosen = replace(use_case, backend=backend, prompt_style=style)
    if use_case.steps is not None:
        steps = _chain_models(use_case.steps, model, settings.model, default_model)
        return replace(chosen, steps=steps, model="")  # its model is its first LLM step's
    return replace(chosen, model=_model(use_case.model, model, settings.model, default_model))


def _model(declared: str, for_this_use_case: str, for_every: str, default_model: str) -> str:
    if for_this_use_case:
        return for_this_use_case
    if for_every and declared == default_model:
        return for_every
    return declared


def _chain_models(chain: Chain, for_this_use_case: str, for_every: str, default_model: str) -> Chain:
    steps = tuple(
        replace(step, model=_model(step.model, for_this_use_case, for_every, default_model))
        if isinstance(step, LLMStep)
        else step
        for step in chain.steps
    )
    return replace(chain, steps=steps)


def _per_use_case(settings: Settings) -> tuple[tuple, tuple, tuple]:
    return settings.use_case_models, settings.use_case_prompt_styles, settings.use_case_backends


def _refuse_unknown(settings: Settings, names: set[str]) -> None:
    """A per-use-case setting that names no declared use case, or a style or backend that does not
    exist, is one clear error (a typo would otherwise run the default silently)."""
    for variable, pairs in (
        ("PIPELINE_MODELS", settings.use_case_models),
        ("PIPELINE_PROMPT_STYLES", settings.use_case_prompt_styles),
        ("PIPELINE_BACKENDS", settings.use_case_backends),
    ):
        for name, value in pairs:
            if name not in names and name != JUDGE:
                raise DeclarationError(
                    f"{variable}: no use case {name!r} is declared (declared: {', '.join(sorted(names))})"
                )
            if variable == "PIPELINE_PROMPT_STYLES" and value not in PROMPT_STYLES:
                raise DeclarationError(
                    f"{variable}: {name}={value}: a style is one of {', '.join(PROMPT_STYLES)}"
                )
            if variable == "PIPELINE_BACKENDS" and value not in LLM_BACKENDS:
                raise DeclarationError(
                    f"{variable}: {name}={value}: a backend is one of {', '.join(LLM_BACKENDS)}"
                )


def _origin(settings: Settings, per_use_case: str, named: bool, every: str) -> str:
    if named:
        return settings.origin(per_use_case)
    return settings.origin(every) if every != "model" or settings.model else "declared"
