"""Multi-step use cases, declared as data: steps, first-match branch rules, budgets.

A `UseCase(steps=Chain(...))` is a short chain of LLM steps (model, prompt, output
schema) and script steps (a Python callable); `assets/chain_runner.py` runs it. Example::

    Chain(
        steps=(
            LLMStep("extract", "gemma3:270m", EXTRACT_PROMPT, SUMMARY_SCHEMA,
                    output_name="current_summary", routes=(Route("grade"),)),
            ScriptStep("grade", grade_summary, routes=(
                Route("final", when="grade.passed == true", priority=1),
                Route("improve"),                       # the default route
            )),
            LLMStep("improve", "gemma3:270m", IMPROVE_PROMPT, SUMMARY_SCHEMA,
                    output_name="current_summary", max_visits=3, routes=(Route("grade"),)),
            ScriptStep("final", keep_best_summary),     # no routes: the chain ends here
        ),
        max_steps_per_subject=10,
        fallback="final",
    )

Routing. After a step, its routes are tried by `priority` (highest first, ties in
declared order) and the FIRST one whose condition holds is taken: exactly one next
step, never one per matching rule. A route without `when` is the step's default,
tried last; a step with conditional routes must have one. `Route(END)` ends the
chain, as does a step without routes. The chain's output is the output of the step
that ended it (it must satisfy the use case's `output_schema`).

Conditions. `when="grade.passed == true"` tests a field of a structured output
(`==`, `!=`, `<`, `<=`, `>`, `>=` against a JSON literal: true, false, null, a number
or a "string"); `when=Marker("[SKIP]")` matches a marker in the step's raw response.
A field that is missing from the output never matches.

Budgets. A step runs at most `max_visits` times per posting, and a posting takes at
most `max_steps_per_subject` steps per run. A route into a spent step, or any route
once the step budget is spent, goes to the chain's `fallback` step instead (which
then ends the chain, e.g. keeping the best-graded version); the interaction records
why. Without a fallback, exhausting a budget is the posting's item error.

Template variables, in order of precedence: this posting's chain state (earlier
steps' outputs by `output_name`, e.g. `{current_summary.summary}`, `{grade.feedback}`),
then upstream use cases' outputs, then posting fields (`{title}`, `{description}`).
At load time every variable must resolve on every path that reaches its step: a
variable set only on some paths, or by no step at all, is a `DeclarationError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from domain.language.chat_prompts import ChatPrompt
from domain.language.declaration_parts import DeclarationError, ScriptContext
from domain.language.templates import render_templates, template_variables

END = "END"
"""Route target that ends the chain: `Route(END, when=Marker("[SKIP]"))`."""

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_FIELD_TEST = re.compile(
    r"^\s*(?P<variable>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\s*"
    r"(?P<operator>==|!=|<=|>=|<|>)\s*(?P<literal>.+?)\s*$"
)
_JSON_TYPES = {bool: "boolean", int: "number", float: "number", str: "string", type(None): "null"}


# --- conditions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """Matches when the step's raw response contains `text` (e.g. `[SKIP]`, `[RUN]`, `[ERROR]`)."""

    text: str

    def __post_init__(self) -> None:
        if not self.text:
            raise DeclarationError("Marker needs a non-empty text")

    def matches(self, state: Mapping[str, Any], raw_response: str) -> bool:
        return self.text in raw_response

    def __str__(self) -> str:
        return f"marker {self.text}"


@dataclass(frozen=True)
class FieldTest:
    """`output.field <op> literal`, parsed from a string such as `"grade.passed == true"`."""

    variable: str
    operator: str
    value: Any
    source: str

    @classmethod
    def parse(cls, text: str) -> FieldTest:
        match = _FIELD_TEST.match(text)
        if not match:
            raise DeclarationError(
                f"condition {text!r} is not `output.field <op> value` (op: == != < <= > >=), "
                "e.g. 'grade.passed == true'"
            )
        literal = match["literal"]
        try:
            value = json.loads(literal)
        except json.JSONDecodeError as exc:
            raise DeclarationError(
                f'condition {text!r}: {literal!r} is not a JSON literal (true, false, null, 3, "text")'
            ) from exc
        if isinstance(value, (list, dict)):
            raise DeclarationError(f"condition {text!r}: compare with a single value, not {literal}")
        operator = match["operator"]
        if operator in ("<", "<=", ">", ">=") and (
            isinstance(value, bool) or not isinstance(value, (int, float))
        ):
            raise DeclarationError(f"condition {text!r}: {operator} needs a number on the right")
        return cls(match["variable"], operator, value, text.strip())

    def matches(self, state: Mapping[str, Any], raw_response: str) -> bool:
        root, _, attribute = self.variable.partition(".")
        value = state.get(root)
        if attribute:
            if not isinstance(value, Mapping) or attribute not in value:
                return False
            value = value[attribute]
        elif root not in state:
            return False
        if self.operator == "==":
            return _same(value, self.value)
        if self.operator == "!=":
            return not _same(value, self.value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return {
            "<": value < self.value,
            "<=": value <= self.value,
            ">": value > self.value,
            ">=": value >= self.value,
        }[self.operator]

    def __str__(self) -> str:
        return self.source


def _same(left: Any, right: Any) -> bool:
    """Equality that keeps true apart from 1 (JSON's booleans are not numbers)."""
    return (
        type(left) is type(right) and left == right
        if isinstance(left, bool) or isinstance(right, bool)
        else left == right
    )


@dataclass(frozen=True)
class Route:
    """Where a step's output goes next: a step name or END, when `when` holds (None: the default)."""

    to: str
    when: str | Marker | None = None
    priority: int = 0
    condition: FieldTest | Marker | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        condition = FieldTest.parse(self.when) if isinstance(self.when, str) else self.when
        if condition is not None and not isinstance(condition, (FieldTest, Marker)):
            raise DeclarationError(f"route to {self.to}: `when` must be a string condition or a Marker")
        object.__setattr__(self, "condition", condition)

    @property
    def is_default(self) -> bool:
        return self.condition is None

    @property
    def rule(self) -> str:
        return "default" if self.condition is None else str(self.condition)


# --- steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepRecord:
    """One finished step of a posting's chain, as script steps see the chain's history."""

    step: str
    output_name: str
    visit: int
    value: Any


@dataclass(frozen=True)
class StepContext(ScriptContext):
    """What a script step gets beside its inputs: resources, log, and this posting's chain so far."""

    history: tuple[StepRecord, ...] = ()
    visits: Mapping[str, int] = field(default_factory=dict)
    ending: str | None = None  # why the chain is ending here, when it runs as the budget fallback


@dataclass(frozen=True)
class LLMStep:
    """A model call. `output_schema` is the JSON-schema grammar of its output; None means free
    text (the value is the stripped response; use `stop` options to bound it)."""

    name: str
    model: str
    prompt: str
    output_schema: Mapping[str, Any] | None
    output_name: str = ""
    routes: tuple[Route, ...] = ()
    max_visits: int = 1
    options: Mapping[str, Any] = field(default_factory=dict)
    system_prompt: str = ""
    input_limits: Mapping[str, int] = field(default_factory=dict)
    postprocess: Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]] | None = None
    chat: ChatPrompt | None = None  # its chat form, for instruction-tuned models

    def __post_init__(self) -> None:
        _check_step(self)
        if not self.model or not self.prompt:
            raise DeclarationError(f"step {self.name}: an LLM step needs a model and a prompt")

    @property
    def is_script(self) -> bool:
        return False

    # What `domain.language.output_parsing.parse_output` asks of what it parses for (a step or a use case).
    @property
    def generation_schema(self) -> Mapping[str, Any] | None:
        return None

    def validate_generation(self, value: Any) -> None:
        jsonschema.validate(value, self.output_schema or {})

    def validate_output(self, value: Any) -> None:
        jsonschema.validate(value, self.output_schema or {})

    @property
    def variables(self) -> tuple[str, ...]:
        chat = self.chat.variables if self.chat is not None else ()
        return tuple(dict.fromkeys((*template_variables(self.prompt, self.system_prompt), *chat)))

    def render(self, values: Mapping[str, Any]) -> tuple[str, str, dict[str, int]]:
        """(prompt, system prompt, {variable: chars cut}); raises TemplateVariableError."""
        return render_templates(self.prompt, self.system_prompt, self.input_limits, values)

    def render_chat(self, values: Mapping[str, Any]) -> tuple[list[dict[str, str]], dict[str, int]]:
        """The chat form's messages and {variable: chars cut}; raises TemplateVariableError."""
        if self.chat is None:
            raise DeclarationError(f"step {self.name} has no chat form")
        return self.chat.render(self.input_limits, values)


@dataclass(frozen=True)
class ScriptStep:
    """A Python step: `function(inputs, StepContext) -> output` (a dict, or text).

    inputs are the posting fields, upstream outputs and chain state (same precedence as
    templates); `output_schema`, when given, is checked on the output."""

    name: str
    function: Callable[[Mapping[str, Any], StepContext], Any]
    output_name: str = ""
    routes: tuple[Route, ...] = ()
    max_visits: int = 1
    output_schema: Mapping[str, Any] | None = None
    # Called once with the inputs of every subject of a wave, in order, before `function` runs for each:
    # to do their work together (posting_skills encodes several postings' sentences in one batch). A
    # failure in it is no subject's: the steps then run as they would without it.
    prepare: Callable[[Sequence[Mapping[str, Any]]], None] | None = None

    def __post_init__(self) -> None:
        _check_step(self)
        if not callable(self.function):
            raise DeclarationError(f"step {self.name}: a script step needs a callable function")

    @property
    def is_script(self) -> bool:
        return True

    @property
    def model(self) -> str:
        return f"script:{getattr(self.function, '__name__', 'function')}"

    @property
    def variables(self) -> tuple[str, ...]:
        return ()


Step = LLMStep | ScriptStep


def _check_step(step: Step) -> None:
    if not _NAME.match(step.name) or step.name == END.lower():
        raise DeclarationError(f"step name {step.name!r} must be lower_snake_case (and not 'end')")
    if not step.output_name:
        object.__setattr__(step, "output_name", step.name)
    if not _NAME.match(step.output_name):
        raise DeclarationError(f"step {step.name}: output_name {step.output_name!r} must be lower_snake_case")
    if step.max_visits < 1:
        raise DeclarationError(f"step {step.name}: max_visits must be at least 1")
    routes = tuple(step.routes)
    object.__setattr__(step, "routes", routes)
    defaults = [route for route in routes if route.is_default]
    if len(defaults) > 1:
        raise DeclarationError(f"step {step.name}: more than one default route (routes without `when`)")
    if routes and not defaults:
        raise DeclarationError(
            f"step {step.name}: conditional routes need a default route (a Route without `when`, "
            "e.g. Route(END)) for when none matches"
        )
    if step.output_schema is not None:
        try:
            jsonschema.Draft202012Validator.check_schema(step.output_schema)
        except jsonschema.SchemaError as exc:
            raise DeclarationError(
                f"step {step.name}: output_schema is not a valid JSON schema: {exc.message}"
            ) from exc


# --- the chain ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """Where one posting goes after a step, and why."""

    to: str  # the next step, or END
    rule: str  # the route that matched ("grade.passed == true", "default", "no routes", ...)
    fallback_reason: str | None = None  # a budget was spent: going to the fallback (or failing)
    failed: bool = False  # a budget was spent and there is no fallback


@dataclass(frozen=True)
class Chain:
    """The steps of a multi-step use case, where it starts, and its budgets.

    max_steps_per_subject: steps one posting may take in one run (the fallback step may
        run beyond it). fallback: the step that ends the chain when a budget is spent; it
        must not route anywhere but END.
    """

    steps: tuple[Step, ...]
    start: str = ""
    max_steps_per_subject: int = 10
    fallback: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        if not self.steps:
            raise DeclarationError("a chain needs at least one step")
        if not self.start:
            object.__setattr__(self, "start", self.steps[0].name)

    @property
    def by_name(self) -> dict[str, Step]:
        return {step.name: step for step in self.steps}

    @property
    def models(self) -> tuple[str, ...]:
        """The LLM models of the steps, in order of first use."""
        return tuple(dict.fromkeys(step.model for step in self.steps if not step.is_script))

    @property
    def model(self) -> str:
        """The first LLM step's model: it decides the use case's work group ("" if none)."""
        return self.models[0] if self.models else ""

    def step(self, name: str) -> Step:
        return self.by_name[name]

    def route(self, step: Step, state: Mapping[str, Any], raw_response: str) -> Route | None:
        """The first route whose condition holds, by priority (ties: declared order); defaults last."""
        ordered = sorted(
            enumerate(step.routes),
            key=lambda item: (item[1].is_default, -item[1].priority, item[0]),
        )
        for _, route in ordered:
            if route.condition is None or route.condition.matches(state, raw_response):
                return route
        return None

    def decide(
        self,
        step: Step,
        state: Mapping[str, Any],
        raw_response: str,
        visits: Mapping[str, int],
        steps_taken: int,
    ) -> Decision:
        """Route one posting after `step` (already counted in visits and steps_taken), within budgets."""
        route = self.route(step, state, raw_response)
        if route is None:
            return Decision(END, "no routes")
        if route.to == END:
            return Decision(END, route.rule)
        target = self.step(route.to)
        reason = None
        if visits.get(target.name, 0) >= target.max_visits:
            reason = f"{target.name} reached its limit of {target.max_visits} visits"
        elif steps_taken >= self.max_steps_per_subject:
            reason = f"the limit of {self.max_steps_per_subject} steps per run was reached"
        if reason is None:
            return Decision(target.name, route.rule)
        if self.fallback is None:
            return Decision(END, route.rule, fallback_reason=reason, failed=True)
        return Decision(self.fallback, route.rule, fallback_reason=reason)

    # --- validation at declaration load -----------------------------------------------------

    def validate(
        self,
        use_case: str,
        upstream: Sequence[str],
        subject_variables: Sequence[str],
        field_kind: str,
    ) -> None:
        """Raise DeclarationError for unknown targets, unreachable steps and unresolvable variables.

        subject_variables: the fields of the use case's subjects a step may name, named `field_kind`
        field in errors ("a posting field")."""
        names = [step.name for step in self.steps]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise DeclarationError(
                f"{use_case}: step names must be unique; repeated: {', '.join(duplicates)}"
            )
        if self.start not in names:
            raise DeclarationError(
                f"{use_case}: the chain starts at {self.start!r}, which is not one of its steps"
            )
        if self.max_steps_per_subject < 1:
            raise DeclarationError(f"{use_case}: max_steps_per_subject must be at least 1")
        for step in self.steps:
            for route in step.routes:
                if route.to != END and route.to not in names:
                    raise DeclarationError(
                        f"{use_case}: step {step.name} routes to {route.to!r}, which is not a step of this "
                        f"chain (steps: {', '.join(names)}; or END)"
                    )
        if self.fallback is not None:
            if self.fallback not in names:
                raise DeclarationError(f"{use_case}: fallback {self.fallback!r} is not a step of this chain")
            if any(route.to != END for route in self.step(self.fallback).routes):
                raise DeclarationError(
                    f"{use_case}: fallback step {self.fallback} must end the chain "
                    "(no routes, or only to END)"
                )
        edges = self._edges()
        reachable = _reachable(self.start, edges)
        unreachable = [name for name in names if name not in reachable]
        if unreachable:
            raise DeclarationError(
                f"{use_case}: steps {', '.join(unreachable)} cannot be reached from {self.start} "
                "(no route leads there)"
            )
        self._validate_variables(use_case, upstream, edges, tuple(subject_variables), field_kind)

    def _edges(self) -> dict[str, set[str]]:
        """step -> steps that may come next (routes, and the fallback wherever a budget may run out)."""
        edges: dict[str, set[str]] = {step.name: set() for step in self.steps}
        for step in self.steps:
            for route in step.routes:
                if route.to != END:
                    edges[step.name].add(route.to)
                    if self.fallback is not None:
                        edges[step.name].add(self.fallback)
        return edges

    def _validate_variables(
        self,
        use_case: str,
        upstream: Sequence[str],
        edges: Mapping[str, set[str]],
        subject_variables: tuple[str, ...],
        field_kind: str,
    ) -> None:
        outputs = {step.output_name: step for step in self.steps}
        schemas: dict[str, list[Mapping[str, Any] | None]] = {}
        for step in self.steps:  # None: a script step's output of unknown shape
            schema = step.output_schema
            if schema is None and not step.is_script:
                schema = {"type": "string"}  # a free-text LLM step has no fields
            schemas.setdefault(step.output_name, []).append(schema)
        available = _definitely_set(self, edges)
        outside = set(subject_variables) | set(upstream)

        def check(step: Step, variable: str, where: str, names: set[str]) -> None:
            if variable.count(".") > 1:
                raise DeclarationError(
                    f"{use_case}: step {step.name}: {{{variable}}} goes deeper than one field; "
                    "use {name} or {name.field}"
                )
            root, _, attribute = variable.partition(".")
            if root in names:
                if attribute:
                    for schema in schemas[root]:
                        if schema is None:
                            continue
                        properties = schema.get("properties")
                        is_text = schema.get("type") == "string"
                        if is_text or (properties is not None and attribute not in properties):
                            raise DeclarationError(
                                f"{use_case}: step {step.name}: {where} uses {{{variable}}}, but the output "
                                f"{root!r} has no field {attribute!r} in its output schema"
                            )
                return
            if root in outside:
                return
            if root in outputs:
                raise DeclarationError(
                    f"{use_case}: step {step.name}: {where} uses {{{variable}}}, but {root!r} is not set on "
                    f"every path that reaches {step.name} (it is set by step {outputs[root].name})"
                )
            raise DeclarationError(
                f"{use_case}: step {step.name}: {where} uses {{{variable}}}, which is neither an earlier "
                f"step's output ({', '.join(sorted(outputs))}), an upstream use case "
                f"({', '.join(upstream) or 'none'}) "
                f"nor {field_kind} field ({', '.join(subject_variables)})"
            )

        for step in self.steps:
            for variable in step.variables:
                check(step, variable, "the prompt", available[step.name])
            after = available[step.name] | {step.output_name}
            for route in step.routes:
                if isinstance(route.condition, FieldTest):
                    check(step, route.condition.variable, f"route condition {route.rule!r}", after)
                    if route.condition.variable.partition(".")[0] not in after:
                        raise DeclarationError(
                            f"{use_case}: step {step.name}: route condition {route.rule!r} must test a chain "
                            f"output ({', '.join(sorted(after))})"
                        )
                    _check_literal_type(use_case, step, route.condition, schemas)


def _check_literal_type(
    use_case: str, step: Step, test: FieldTest, schemas: Mapping[str, list[Mapping[str, Any] | None]]
) -> None:
    """`grade.passed == "yes"` against a boolean field can never hold: say so at load time."""
    root, _, attribute = test.variable.partition(".")
    for schema in schemas.get(root, []):
        declared = ((schema or {}).get("properties") or {}).get(attribute, {}) if attribute else schema or {}
        kinds = declared.get("type")
        if kinds is None:
            continue
        kinds = {kinds} if isinstance(kinds, str) else set(kinds)
        if "integer" in kinds:
            kinds.add("number")
        literal = _JSON_TYPES[type(test.value)]
        if literal not in kinds:
            raise DeclarationError(
                f"{use_case}: step {step.name}: route condition {test.source!r} compares a "
                f"{'/'.join(sorted(kinds))} field with a {literal}; it could never match"
            )


def _reachable(start: str, edges: Mapping[str, set[str]]) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for target in edges[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _definitely_set(chain: Chain, edges: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """For each step, the outputs set on EVERY path from the start to it (a must-analysis)."""
    every = {step.output_name for step in chain.steps}
    entry = {step.name: set(every) for step in chain.steps}
    entry[chain.start] = set()
    predecessors: dict[str, set[str]] = {step.name: set() for step in chain.steps}
    for source, targets in edges.items():
        for target in targets:
            predecessors[target].add(source)
    changed = True
    while changed:
        changed = False
        for step in chain.steps:
            if step.name == chain.start:  # the first visit starts with nothing set
                continue
            incoming = [
                entry[source] | {chain.step(source).output_name} for source in predecessors[step.name]
            ]
            new = set.intersection(*incoming) if incoming else set()
            if new != entry[step.name]:
                entry[step.name] = new
                changed = True
    return entry
