"""The chat form of a prompt, for instruction-tuned models (qwen2.5-instruct, llama3.1, gemma3 it).

A use case's few-shot completion prompt (`UseCase.prompt`) suits a base model: examples, then the subject,
then a cue the model completes. An instruction-tuned model is best driven through its chat template: a
system message with the task and the shape of the answer, worked examples as user and assistant turns,
and the subject in a user message of its own. `ChatPrompt` declares that form beside the completion
one; the prompt style (`completion`, `chat`, or `auto`: by the model, see `resources/llm.py`) chooses
which is sent, and the trace keeps the messages exactly as sent.

Values go in through the same `render_templates` as completion prompts: a subject's text cannot imitate
the template's structure (its tags, its labels, the answer's JSON shape), whichever message it is in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.language.templates import render_templates, template_variables

COMPLETION_STYLE = "completion"
CHAT_STYLE = "chat"
AUTO_STYLE = "auto"
PROMPT_STYLES = (COMPLETION_STYLE, CHAT_STYLE, AUTO_STYLE)

Message = Mapping[str, str]


@dataclass(frozen=True)
class ChatPrompt:
    """system: the task, its rules and the answer's shape (may name variables, e.g. an upstream output);
    user: the subject (and whatever else this call is about), a message of its own; examples: worked
    (user, assistant) turns, fixed text, shown before the subject."""

    system: str
    user: str
    examples: tuple[tuple[str, str], ...] = ()

    @property
    def variables(self) -> tuple[str, ...]:
        return template_variables(self.user, self.system)

    def render(
        self, input_limits: Mapping[str, int], values: Mapping[str, Any]
    ) -> tuple[list[dict[str, str]], dict[str, int]]:
        """The messages as sent, and {variable: chars cut}; raises TemplateVariableError. The examples'
        shape is the template's structure too: a value may not forge an example turn."""
        example_texts = [text for pair in self.examples for text in pair]
        user, system, truncated = render_templates(
            self.user, self.system, input_limits, values, structure=example_texts
        )
        messages = [{"role": "system", "content": system}]
        for question, answer in self.examples:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": user})
        return messages, truncated


def messages_text(messages: Sequence[Message]) -> str:
    """The messages as stored in an interaction's prompt (and hashed into its input identity)."""
    return json.dumps(list(messages), ensure_ascii=False, indent=1)


def messages_of(text: str) -> list[dict[str, str]] | None:
    """The messages an interaction's prompt holds, or None when it is a completion prompt."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return None
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return value
    return None


def retry_messages(messages: Sequence[Message], note: str) -> list[dict[str, str]]:
    """The messages of a retry: the earlier answer's error after the subject, so the model does not
    make the same mistake again."""
    *head, last = [dict(message) for message in messages]
    return [*head, {**last, "content": f"{last['content']}\n\n{note}"}]
