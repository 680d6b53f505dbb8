"""What a use case is: a declaration (data), turned into Dagster objects by `assets/factory.py`.

Adding a use case means a `UseCase(...)` in a plugin (for postings, a module in
`plugins/postings/use_cases/`, listed in `shipped.py`); no engine code (docs/adding-a-use-case.md).

A use case is either an LLM use case (model, prompt, output schema) or a script use
case (a Python `function`, no model), such as entity resolution.

Prompt templates name their variables as `{name}`. A variable is a field of the use case's subject
(a posting's `{title}`, `{description}`, ...) or the output of a declared upstream use case
(`{posting_summary}`, or one field of it: `{posting_summary.summary}`). Braces that
do not hold an identifier (such as JSON in few-shot examples) are left alone, and a
template that names an unknown variable is rejected when the declaration is made.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from appdb.retry_policy import DEFAULT_RETRY_POLICY, RetryPolicy
from domain.language.chat_prompts import (
    CHAT_STYLE,
    COMPLETION_STYLE,
    PROMPT_STYLES,
    ChatPrompt,
    messages_text,
)
from domain.language.declaration_parts import DeclarationError, OutputCheck, ScriptContext, validate_json
from domain.language.quality_loop import NO_QUALITY_LOOP, QualityLoop
from domain.language.steps import Chain
from domain.language.subject_kinds import SubjectKind
from domain.language.templates import render_templates, template_variables

_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}\.\d+$")
SCRIPT_BACKEND = "script"
"""The backend name recorded for outputs made by a script (no model)."""


@dataclass(frozen=True)
class Prepared:
    """One item's call as prepared: the prompt (a chat's messages as JSON), the system prompt, the chars
    cut from long values, the input hash (the idempotence key) and, in chat form, the messages."""

    prompt: str
    system_prompt: str
    truncated: dict[str, int]
    input_hash: str
    messages: list[dict[str, str]] | None = None


@dataclass(frozen=True)
class UseCase:
    """One use case, declared as data.

    version: explicit semantic string (`YYYY-MM-DD.N`); bump it when the prompt,
        schema or options change, and every output made by an older version is stale.
    model: the model name the configured backend serves (e.g. `gemma3:270m`).
    prompt: the completion prompt, with `{variables}` (few-shot: it suits base models).
    chat: the prompt's chat form for instruction-tuned models (`ChatPrompt`: a system message, worked
        examples, the subject in a message of its own); None: the use case runs in completion form only.
    prompt_style: which form is sent: `completion`, `chat`, or `auto` (the backend decides by the model:
        Ollama by its template, an OpenAI-compatible server chat, the embedded base model completion);
        the deployment's settings set it (PIPELINE_PROMPT_STYLE), and it is part of the outputs'
        identity, so changing it makes them stale once.
    backend: the backend that serves `model`: "" (the deployment's), `ollama`, `openai` or `embedded`.
    output_schema: JSON schema of the stored output (checked on every output).
    generation_schema: JSON schema the model fills (the grammar / Ollama `format`) when
        it differs from output_schema, e.g. when postprocess adds derived fields.
    function: makes this a script use case: `function(inputs, ScriptContext) -> output`;
        inputs are the subject's fields and upstream outputs. No model is loaded.
    resources: resource keys the function needs (e.g. `taxonomy`).
    reference_inputs: assets other than its subjects that this use case reads (e.g. `skills_taxonomy`);
        they become asset dependencies, and outputs older than them are stale.
    upstream: use cases whose outputs this one reads; they become asset dependencies.
    discovery_where: optional extra SQL condition on the subject (alias `subject`: a row of its kind's
        table) narrowing which subjects this use case takes on, e.g. "subject.key LIKE 'src/%'".
    priority: higher runs first when runs queue (Dagster's `dagster/priority` tag).
    batch_size: subjects per run; the model is loaded once per run.
    options: generation options (temperature, max_tokens, repeat_penalty, stop, seed).
    input_limits: maximum characters per variable; longer values are cut, and the
        cut is recorded in the interaction's options.
    postprocess: `postprocess(output, inputs)` normalizes a parsed output (dedupe,
        trim, ground against the subject's text); may raise ValueError (an item error).
    after_store: `after_store(session, {subject_key: output})` writes derived rows in the
        same transaction as the outputs (e.g. resolved concepts, queryable by concept); it gets
        a group of outputs at a time, as a run stores them.
    steps: makes this a multi-step use case (`domain/language/steps.py`) instead of one call;
        its model (and so its work group) is its first LLM step's model.
    retry: attempts before an item is parked, backoff, claim lease and outage pause
        (`appdb.retry_policy.RetryPolicy`); the default suits most use cases.
    subject: the kind of subject the use case runs on (`domain.language.subject_kinds.SubjectKind`,
        declared by its plugin): its table, and the fields a prompt may name.
    quality: its part in the quality loop (`QualityLoop`: how its outputs are shown in review lists,
        judged, compared with the reviewers' gold and corrected); the default takes no part.
    run_figures: `run_figures(outputs) -> {name: number}` over the outputs one run made: numeric
        metadata of the run's `outputs_valid` check, which the UI plots over runs.
    warm_up: `warm_up(ScriptContext)` loads what `function` needs (the resolver of skill_entities): a
        run started ahead of its inputs calls it while it waits for them (`assets/batch_run.py`).
    """

    name: str
    version: str
    output_schema: Mapping[str, Any]
    model: str = ""
    prompt: str = ""
    description: str = ""
    system_prompt: str = ""
    upstream: tuple[str, ...] = ()
    discovery_where: str | None = None
    priority: int = 0
    batch_size: int = 25
    options: Mapping[str, Any] = field(default_factory=dict)
    input_limits: Mapping[str, int] = field(default_factory=dict)
    postprocess: Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]] | None = None
    checks: tuple[OutputCheck, ...] = ()
    preview_field: str | None = None
    generation_schema: Mapping[str, Any] | None = None
    function: Callable[[Mapping[str, Any], ScriptContext], dict[str, Any]] | None = None
    resources: tuple[str, ...] = ()
    reference_inputs: tuple[str, ...] = ()
    after_store: Callable[[Any, Mapping[str, dict[str, Any]]], None] | None = None
    steps: Chain | None = None
    retry: RetryPolicy = DEFAULT_RETRY_POLICY
    run_figures: Callable[[Sequence[dict[str, Any]]], Mapping[str, float | int]] | None = None
    chat: ChatPrompt | None = None
    prompt_style: str = COMPLETION_STYLE
    backend: str = ""
    warm_up: Callable[[ScriptContext], object] | None = None
    quality: QualityLoop = NO_QUALITY_LOOP
    subject: SubjectKind = field(kw_only=True)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise DeclarationError(f"use case name {self.name!r} must be lower_snake_case")
        if not _VERSION.match(self.version):
            raise DeclarationError(
                f"{self.name}: version {self.version!r} must look like 2026-11-22.1 (date and a counter)"
            )
        if self.batch_size < 1:
            raise DeclarationError(f"{self.name}: batch_size must be at least 1")
        if self.prompt_style not in PROMPT_STYLES:
            raise DeclarationError(
                f"{self.name}: prompt style {self.prompt_style!r} must be one of {', '.join(PROMPT_STYLES)}"
            )
        if self.prompt_style != COMPLETION_STYLE and not self.has_chat_form:
            raise DeclarationError(
                f"{self.name}: has no chat form, so its prompt style must be completion, "
                f"not {self.prompt_style}"
            )
        if self.steps is not None:
            if self.function is not None or self.prompt or self.model not in ("", self.steps.model):
                raise DeclarationError(
                    f"{self.name}: a multi-step use case has steps, not a model, prompt or function"
                )
            object.__setattr__(self, "model", self.steps.model)
            self.steps.validate(self.name, self.upstream, self.subject.variables, self.subject.field_kind)
        elif self.function is None and not (self.model and self.prompt):
            raise DeclarationError(f"{self.name}: an LLM use case needs a model and a prompt")
        if self.function is not None and (self.model or self.prompt):
            raise DeclarationError(f"{self.name}: a script use case has a function, not a model or prompt")
        for label, schema in (
            ("output_schema", self.output_schema),
            ("generation_schema", self.generation_schema),
        ):
            try:
                jsonschema.Draft202012Validator.check_schema(schema or {})
            except jsonschema.SchemaError as exc:
                raise DeclarationError(
                    f"{self.name}: {label} is not a valid JSON schema: {exc.message}"
                ) from exc
        for variable in self.variables:
            if variable.count(".") > 1:
                raise DeclarationError(
                    f"{self.name}: {{{variable}}} goes deeper than one field; use {{name}} or {{name.field}}"
                )
            root = variable.split(".", 1)[0]
            if root not in self.subject.variables and root not in self.upstream:
                raise DeclarationError(
                    f"{self.name}: the prompt uses {{{variable}}}, which is neither "
                    f"{self.subject.field_kind} field "
                    f"({', '.join(self.subject.variables)}) nor a declared upstream use case"
                )

    @property
    def subject_kind(self) -> str:
        """The name of its subjects' kind (its partitions and source asset)."""
        return self.subject.name

    @property
    def subject_variables(self) -> tuple[str, ...]:
        return self.subject.variables

    @property
    def is_script(self) -> bool:
        return self.function is not None

    @property
    def uses_llm(self) -> bool:
        """Whether a run of this use case calls a model (a chain of script steps calls none)."""
        return not self.is_script and bool(self.model)

    @property
    def grammar_schema(self) -> Mapping[str, Any]:
        """The schema the model's output must follow (the generation grammar)."""
        return self.generation_schema or self.output_schema

    @property
    def variables(self) -> tuple[str, ...]:
        """The variables the prompt, the system prompt and the chat form use, in order of first use."""
        chat = self.chat.variables if self.chat is not None else ()
        return tuple(dict.fromkeys((*template_variables(self.prompt, self.system_prompt), *chat)))

    @property
    def has_chat_form(self) -> bool:
        """Whether every model call of this use case has a chat form (a chain: each of its LLM steps)."""
        if self.steps is not None:
            return all(step.chat is not None for step in self.steps.steps if not step.is_script)
        return self.chat is not None

    def render(self, values: Mapping[str, Any]) -> tuple[str, str, dict[str, int]]:
        """Substitute variables; returns (prompt, system prompt, {variable: chars cut})."""
        return render_templates(self.prompt, self.system_prompt, self.input_limits, values)

    def validate_output(self, value: Any) -> None:
        """Raise jsonschema.ValidationError when an output breaks the declared output schema."""
        validate_json(value, self.output_schema)

    def validate_generation(self, value: Any) -> None:
        """Raise jsonschema.ValidationError when the model's raw output breaks the grammar schema."""
        validate_json(value, self.grammar_schema)

    def prepare(
        self, values: Mapping[str, Any], reference_hashes: Mapping[str, str], style: str = COMPLETION_STYLE
    ) -> Prepared:
        """One item's prompt in `style` (the style resolved for the run), chars cut and input hash; a
        script's "prompt" is its inputs as JSON (what the trace shows)."""
        if self.is_script:
            inputs = {name: values.get(name) for name in self.upstream}
            prompt = json.dumps(inputs, ensure_ascii=False, sort_keys=True, default=str)
            return Prepared(prompt, "", {}, self.script_input_hash(values, reference_hashes))
        if style == CHAT_STYLE and self.chat is not None:
            messages, truncated = self.chat.render(self.input_limits, values)
            prompt = messages_text(messages)
            return Prepared(prompt, "", truncated, self.input_hash(self.model, prompt, ""), messages)
        prompt, system_prompt, truncated = self.render(values)
        return Prepared(prompt, system_prompt, truncated, self.input_hash(self.model, prompt, system_prompt))

    def input_hash(self, model: str, prompt: str, system_prompt: str) -> str:
        """Identity of one generation's input: same hash, same work (the idempotence key)."""
        payload = json.dumps(
            [self.name, self.version, model, prompt, system_prompt, dict(self.options)],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def script_input_hash(self, inputs: Mapping[str, Any], reference_hashes: Mapping[str, str]) -> str:
        """Identity of a script call: its version, upstream outputs and reference data content."""
        payload = json.dumps(
            [
                self.name,
                self.version,
                {name: inputs.get(name) for name in self.upstream},
                dict(reference_hashes),
            ],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def display_output(use_case: UseCase | None, output: Any) -> str:
    """An output in one line: the use case's `display`, else its JSON (also for a use case no longer
    declared, None)."""
    if not isinstance(output, dict):
        return "(none)"
    if use_case is not None and use_case.quality.display is not None:
        return use_case.quality.display(output)
    return json.dumps(output, ensure_ascii=False)


def model_label(use_case: UseCase) -> str:
    """The model an output is made by: the LLM's name (and its prompt style when chosen as chat), or
    `script:<function>`. `auto` adds nothing: the backend picks the form per model, the model's name
    already says which, and upgrading must not make every existing output stale."""
    style = f" [{CHAT_STYLE}]" if use_case.prompt_style == CHAT_STYLE else ""
    if use_case.steps is not None:  # a multi-step use case: its steps' models
        models = " + ".join(use_case.steps.models)
        return f"{models}{style}" if models else f"{SCRIPT_BACKEND}:{use_case.name}"
    if not use_case.model:
        return f"{SCRIPT_BACKEND}:{use_case.function.__name__}"
    return f"{use_case.model}{style}"


def code_version(use_case: UseCase) -> str:
    """An output's code identity: the use case's version and its model (Dagster's code version too)."""
    return f"{use_case.version}@{model_label(use_case)}"
