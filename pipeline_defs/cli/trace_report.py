"""The trace report of one subject: its fields, and per use case the exact prompts, responses and outputs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from appdb import discovery, reports
from appdb.discovery import WorkSpec
from appdb.models import Interaction, UseCaseOutput
from console.terminal import clip, markdown_code_block, markdown_text, one_line, safe_text
from domain.language.chat_prompts import messages_of
from domain.language.subject_kinds import SubjectKind
from domain.quality.judge_rubric import JUDGE_SUFFIX


@dataclass(frozen=True)
class Block:
    """A piece of the report: a heading, a line of facts, or a verbatim text (prompt, response)."""

    kind: str  # "h1" | "h2" | "h3" | "line" | "verbatim"
    text: str
    label: str = ""


class SubjectNotFound(LookupError):
    pass


LONG_FIELD_CHARS = 120  # a field this long (or with line breaks) is shown verbatim, in a block of its own


def output_state(session: Session, output: UseCaseOutput | None, spec: WorkSpec | None, noun: str) -> str:
    """Whether the output is current, by the rule `pipeline reprocess --stale` counts with
    (`discovery.stale_outputs`), and when stale why it is not redone yet, if it is not."""
    if output is None:
        return "no output yet"
    if spec is None:
        return "use case no longer declared"
    outdated = discovery.stale_outputs(session, spec, [output.subject_key]).get(output.subject_key)
    if outdated is None:
        return "current"
    waiting = f"; not redone yet: {outdated.waiting}" if outdated.waiting else ""
    if outdated.reason == "version":
        why = f"made by version {output.use_case_version}, current version is {spec.version}"
    elif outdated.reason == "model":
        why = f"made by {output.model}, the use case now uses {spec.model}"
    elif outdated.reason == "content":
        why = f"the {noun} changed since"
    else:
        why = "an input it read changed since (an upstream output or reference data)"
    return f"stale: {why}{waiting}"


def _subject_header(
    kind: SubjectKind, key: str, fields: dict[str, Any], row: Any, full: bool = True
) -> Iterator[Block]:
    label = fields.get(kind.table.label_field) if kind.table.label_field else None
    yield Block("h1", f"{kind.noun.capitalize()} {key}" + (f": {label}" if label else ""))
    short, long = [], []
    for name, value in fields.items():
        if name in ("key", "content_hash", kind.table.label_field):
            continue
        text = "" if value is None else str(value)
        (long if len(text) > LONG_FIELD_CHARS or "\n" in text else short).append((name, text))
    if short:
        yield Block("line", " · ".join(f"{name}: {text or '-'}" for name, text in short))
    yield Block(
        "line",
        f"content hash {row.content_hash[:12]} · updated {row.updated_at:%Y-%m-%d %H:%M:%S} (UTC)",
    )
    if not full:
        if long:
            yield Block("line", " · ".join(f"{name}: {len(text):,} characters" for name, text in long))
        return
    for name, text in long:
        yield Block("verbatim", text, name.replace("_", " ").capitalize())


def _find_subject(session: Session, key: str, kinds: Sequence[SubjectKind]) -> tuple[SubjectKind, Any]:
    for kind in kinds:
        row = kind.table.get(session, key)
        if row is not None:
            return kind, row
    raise SubjectNotFound(f"no {' or '.join(kind.noun for kind in kinds)} with key {key!r}")


PREVIEW_CHARS = 100


def output_preview(value: Any) -> str:
    """An output in a few words: its one text field when it has one (a summary), else compact JSON."""
    if isinstance(value, dict):
        texts = [text for text in value.values() if isinstance(text, str)]
        if len(value) == 1 and texts:
            return texts[0]
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def trace_summary(
    session: Session, key: str, kinds: Sequence[SubjectKind], specs: Sequence[WorkSpec]
) -> Iterator[Block]:
    """The short trace `pipeline trace KEY` prints: the subject's fields, then one line per use case
    (state, model, version, calls, the output in a few words); `--full` adds the prompts and responses."""
    kind, row = _find_subject(session, key, kinds)
    yield from _subject_header(kind, key, kind.table.fields(row), row, full=False)
    by_name = {spec.use_case: spec for spec in specs if spec.subject_kind == kind.name}
    outputs = reports.subject_outputs(session, key)
    interactions = reports.subject_interactions(session, key)
    names = list(dict.fromkeys([*by_name, *outputs, *(i.use_case for i in interactions)]))
    yield Block("h2", "use cases")
    for name in names:
        output, spec = outputs.get(name), by_name.get(name)
        calls = [interaction for interaction in interactions if interaction.use_case == name]
        if name.endswith(JUDGE_SUFFIX):
            state = f"the judge's grades of {name.removesuffix(JUDGE_SUFFIX)} outputs"
        else:
            state = output_state(session, output, spec, kind.noun)
        model = output.model if output is not None else (spec.model if spec else "-")
        version = output.use_case_version if output is not None else (spec.version if spec else "-")
        failed = sum(1 for call in calls if call.status != "ok")
        parts = [name, state, model or "no model", f"version {version}"]
        parts.append(
            f"{len(calls)} call{'' if len(calls) == 1 else 's'}" + (f" ({failed} failed)" if failed else "")
        )
        if output is not None:
            parts.append(clip(output_preview(output.value), PREVIEW_CHARS))
        elif calls and calls[-1].error:
            parts.append("last error: " + clip(calls[-1].error, PREVIEW_CHARS))
        yield Block("line", " · ".join(parts))
    yield Block("line", "")
    yield Block("line", f"the prompts, responses and outputs in full: pipeline trace {key} --full")


def trace_blocks(
    session: Session, key: str, kinds: Sequence[SubjectKind], specs: Sequence[WorkSpec]
) -> Iterator[Block]:
    kind, row = _find_subject(session, key, kinds)
    yield from _subject_header(kind, key, kind.table.fields(row), row)
    specs = [spec for spec in specs if spec.subject_kind == kind.name]
    by_name = {spec.use_case: spec for spec in specs}
    outputs = reports.subject_outputs(session, key)
    interactions = reports.subject_interactions(session, key)
    names = list(dict.fromkeys([*by_name, *outputs, *(i.use_case for i in interactions)]))
    for name in names:
        output = outputs.get(name)
        yield Block("h2", f"{name}")
        if name.endswith(JUDGE_SUFFIX):  # the gym's judge: its calls grade another use case's outputs
            judged = name.removesuffix(JUDGE_SUFFIX)
            yield Block("line", f"the judge's grades of {judged} outputs (the parsed output of each call)")
        else:
            yield Block("line", f"output: {output_state(session, output, by_name.get(name), kind.noun)}")
        if output is not None:
            yield Block("verbatim", json.dumps(output.value, indent=2, ensure_ascii=False), "Current output")
            yield Block(
                "line",
                f"made by {output.backend} {output.model}, version {output.use_case_version}, "
                f"run {output.run_id}, at {output.updated_at:%Y-%m-%d %H:%M:%S} UTC, "
                f"from interaction {output.interaction_id}",
            )
        calls = [interaction for interaction in interactions if interaction.use_case == name]
        yield from chain_path_blocks(calls)
        for interaction in reversed(calls):
            tokens = f"{interaction.prompt_tokens}+{interaction.completion_tokens} tokens"
            latency = f"{interaction.latency_ms / 1000:.1f}s" if interaction.latency_ms is not None else "-"
            step = (interaction.options or {}).get("chain")
            yield Block(
                "h3",
                f"interaction {interaction.id} · {interaction.status} · "
                + (f"step {step['step']} #{step['visit']} · " if step else "")
                + f"{interaction.started_at:%Y-%m-%d %H:%M:%S} UTC",
            )
            yield Block(
                "line",
                f"{interaction.backend} {interaction.model} · version {interaction.use_case_version}"
                f" · run {interaction.run_id} ({interaction.source}) · {tokens} · {latency}"
                + (f" · cost {interaction.cost:.6f}" if interaction.cost else "")
                + f" · options {json.dumps(interaction.options, sort_keys=True)}",
            )
            if interaction.error:
                yield Block("line", f"error: {interaction.error}")
            messages = messages_of(interaction.prompt)
            if messages is None:
                yield Block("verbatim", interaction.system_prompt or "(none)", "System prompt")
                yield Block("verbatim", interaction.prompt, "Prompt sent")
            else:  # chat form: each message as sent
                for number, message in enumerate(messages, 1):
                    yield Block(
                        "verbatim", message.get("content", ""), f"Message {number} ({message['role']})"
                    )
            yield Block(
                "verbatim",
                interaction.raw_response if interaction.raw_response is not None else "(none)",
                "Raw response",
            )
            parsed = json.dumps(interaction.parsed_output, indent=2, ensure_ascii=False)
            yield Block(
                "verbatim", parsed if interaction.parsed_output is not None else "(none)", "Parsed output"
            )
        if not calls:
            yield Block("line", "no LLM calls recorded")


def chain_path_blocks(calls: Sequence[Interaction]) -> Iterator[Block]:
    """The path the posting took through a multi-step use case in its latest run, step by step.

    Each step's interaction records (in options["chain"]) its visit, the route taken
    and the rule that chose it, the budget state and, on the last step, why it ended.
    """
    steps = [call for call in calls if (call.options or {}).get("chain")]
    if not steps:
        return
    run_id = steps[-1].run_id
    latest = [call for call in steps if call.run_id == run_id]
    yield Block("line", f"chain path (run {run_id}, {len(latest)} steps):")
    for call in latest:
        step = call.options["chain"]
        budget = f"visit {step['visit']}/{step['max_visits']}, step {step['step_number']}/{step['max_steps']}"
        if step.get("route") is None:
            where = "✗ " + (step.get("ended") or call.error or "failed")
        else:
            where = f"→ {step['route']} ({step['rule']})"
            if step.get("budget_exhausted"):
                where += f" · budget spent: {step['budget_exhausted']}, to the fallback"
        yield Block("line", f"  {step['step_number']}. {step['step']} [{budget}] {where}")
    ended = latest[-1].options["chain"].get("ended")
    yield Block("line", f"ended: {ended}" if ended else "ended: not yet (the run stopped mid-chain)")


def render_text(blocks: Sequence[Block]) -> str:
    """The report for a terminal: postings and model output are shown without their control
    sequences (`safe_text`), headings and lines on one line each."""
    out: list[str] = []
    for block in blocks:
        text = one_line(block.text) if block.kind != "verbatim" else safe_text(block.text)
        if block.kind == "h1":
            out += [text, "=" * min(len(text), 100)]
        elif block.kind == "h2":
            out += ["", f"== {text} =="]
        elif block.kind == "h3":
            out += ["", f"-- {text}"]
        elif block.kind == "line":
            out.append(text)
        else:
            out.append(f"{block.label}:")
            out += [f"  | {line}" for line in text.splitlines() or [""]]
    return "\n".join(out) + "\n"


def render_markdown(blocks: Sequence[Block]) -> str:
    """The report as Markdown: quoted text escaped in prose, verbatim text in fences it cannot close."""
    out: list[str] = []
    for block in blocks:
        if block.kind in ("h1", "h2", "h3"):
            level = {"h1": "#", "h2": "##", "h3": "###"}[block.kind]
            out += [f"{level} {markdown_text(block.text)}", ""]
        elif block.kind == "line":
            out += [markdown_text(block.text), ""]
        else:
            out += [f"**{block.label}**", "", markdown_code_block(block.text), ""]
    return "\n".join(out)
