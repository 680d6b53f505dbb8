"""`pipeline config`: the effective configuration, every setting with its value and where it came from
(the environment, the config file, or its default), what each LLM use case runs on (model,
backend, host, prompt style), and the registered plugins (declared or not, their commands). `--check`
asks each server whether it serves each model."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from appdb.redaction import MASK, redact
from console.terminal import EXIT_OK, EXIT_REJECTED, table
from domain.core.configuration import declared_settings
from pipeline_defs.catalog import declared_use_cases
from pipeline_defs.model_choice import JUDGE, choices, judge_choice
from pipeline_defs.registry import registered_plugins
from pipeline_defs.settings import Settings, plugin_sections


def register(commands: argparse._SubParsersAction) -> None:
    config = commands.add_parser(
        "config",
        help="the effective configuration, where each value came from, and each use case's model",
        description="Exit status: 0, or 1 when --check finds a model a server does not serve.",
    )
    config.add_argument("--json", action="store_true", help="as JSON")
    config.add_argument(
        "--check",
        action="store_true",
        help="ask each server whether it serves each configured model (Ollama /api/tags, OpenAI /v1/models)",
    )
    config.set_defaults(handler=cmd_config)


def shown(value: object, secret: bool) -> str:
    """A value as `pipeline config` shows it: a secret URL with its password masked, a key masked."""
    if value in (None, "", ()):
        return "-"
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    if secret and "://" not in text:
        return MASK
    return redact(text)


def effective(settings: Settings) -> list[dict[str, str]]:
    rows = []
    sections = [("", Settings, settings)] + [
        (f"{name}.", section, settings.section(name)) for name, section in plugin_sections().items()
    ]
    for prefix, section, values in sections:
        for name, declared in declared_settings(section):
            rows.append(
                {
                    "setting": f"{prefix}{name}",
                    "variable": declared.variable,
                    "value": shown(getattr(values, name), declared.secret),
                    "from": settings.origin(f"{prefix}{name}"),
                }
            )
    return rows


@dataclass(frozen=True)
class ModelRow:
    """One model a use case (or the judge) calls, and where: one row per host that may serve it."""

    use_case: str
    model: str
    backend: str
    host: str
    prompt_style: str
    origin: str


def model_rows(settings: Settings) -> list[ModelRow]:
    """Each LLM use case's models (a chain's every LLM step), the judge's, on each host that serves them."""
    rows = []
    for choice in choices(declared_use_cases(settings), settings):
        origin = ", ".join(f"{part} {where}" for part, where in choice.origins.items())
        for model in choice.models:
            for host in _hosts(settings, choice.backend, model):
                rows.append(
                    ModelRow(choice.use_case, model, choice.backend, host, choice.prompt_style, origin)
                )
    judge_model, judge_style = judge_choice(settings)
    if judge_model != "deterministic" and settings.judge_sample > 0:
        origin = f"model {settings.origin('judge_model')}, prompt_style {settings.origin('prompt_style')}"
        for host in _hosts(settings, settings.llm_backend, judge_model):
            rows.append(ModelRow(JUDGE, judge_model, settings.llm_backend, host, judge_style, origin))
    return rows


def _hosts(settings: Settings, backend: str, model: str) -> list[str]:
    if backend == "embedded":
        return ["in process"]
    if backend != settings.llm_backend:  # a use case sent to the other server backend: its one server
        return [settings.openai_url if backend == "openai" else settings.ollama_url]
    return [host.label for host in settings.resolved_hosts() if host.serves(model)]


def check_rows(settings: Settings, rows: list[ModelRow]) -> list[dict[str, str]]:
    """Ask each (backend, host) once per model; a row per use case with the answer."""
    from pipeline_defs.wiring import build_llm_resource  # the backends load only for --check

    answers: dict[tuple[str, str, str], tuple[bool, str]] = {}
    checked = []
    for row in rows:
        key = (row.backend, row.host, row.model)
        if key not in answers:
            on_host = settings
            if row.backend == settings.llm_backend and settings.llm_hosts:
                on_host = settings.changed(
                    llm_hosts=tuple(h for h in settings.llm_hosts if redact(h.split()[0]) == row.host)
                )
            resource = build_llm_resource(on_host, backend=row.backend)
            answer = resource.check_model(row.model)
            answers[key] = (answer.served, answer.detail)
        served, detail = answers[key]
        checked.append({**row.__dict__, "served": "yes" if served else "NO", "detail": detail})
    return checked


def cmd_config(settings: Settings, args: argparse.Namespace) -> int:
    rows = model_rows(settings)
    if args.check:
        checked = check_rows(settings, rows)
        if args.json:
            print(json.dumps(checked, indent=2))
        else:
            print(
                table(
                    ["use case", "model", "backend", "host", "style", "served", "what the server says"],
                    [
                        [
                            r["use_case"],
                            r["model"],
                            r["backend"],
                            r["host"],
                            r["prompt_style"],
                            r["served"],
                            r["detail"],
                        ]
                        for r in checked
                    ],
                )
            )
        return EXIT_OK if all(r["served"] == "yes" for r in checked) else EXIT_REJECTED
    settings_rows = effective(settings)
    plugins = plugin_rows(settings)
    if args.json:
        print(
            json.dumps(
                {"settings": settings_rows, "models": [r.__dict__ for r in rows], "plugins": plugins},
                indent=2,
            )
        )
        return EXIT_OK
    print(table(["setting", "variable", "value", "from"], [list(row.values()) for row in settings_rows]))
    print()
    print(
        table(
            ["use case", "model", "backend", "host", "style", "from"],
            [[r.use_case, r.model, r.backend, r.host, r.prompt_style, r.origin] for r in rows],
        )
    )
    print()
    print(
        table(["plugin", "declared", "commands", "what it brings"], [list(row.values()) for row in plugins])
    )
    return EXIT_OK


def plugin_rows(settings: Settings) -> list[dict[str, str]]:
    """Each registered plugin: whether PIPELINE_DOMAINS declares it, its commands, its description."""
    return [
        {
            "plugin": name,
            "declared": "yes" if name in settings.domains else "no",
            "commands": ", ".join(command.name for command in plugin.commands) or "-",
            "description": plugin.description,
        }
        for name, plugin in registered_plugins().items()
    ]
