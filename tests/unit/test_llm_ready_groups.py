"""A run stores the model's answers a transaction at a time when several are in already
(`assets/llm_calls.py: generate_in_ready_groups`), in the order asked, and never puts an outage in a
group with answers (the caller stops on it, so what was answered before must be stored first)."""

from __future__ import annotations

import threading
from typing import Any

from assets.llm_calls import LLMRequest, generate_in_ready_groups
from domain.language.llm_types import BackendUnavailable, Generation


class _Server:
    """Answers prompt "0" only once every other prompt is answered; "down" is an outage."""

    def __init__(self, others: int, in_flight: int) -> None:
        self.in_flight_limit = in_flight
        self._others, self._answered, self._all_in = others, 0, threading.Event()
        self._lock = threading.Lock()

    def generate(self, model: str, prompt: str, *_: Any) -> Generation:  # noqa: ANN401
        if prompt == "down":
            raise BackendUnavailable("the server went away")
        if prompt == "0":
            assert self._all_in.wait(10)
        else:
            with self._lock:
                self._answered += 1
                if self._answered == self._others:
                    self._all_in.set()
        return Generation(f"answer {prompt}", None, None, 1.0)


def _requests(prompts: list[str]) -> list[tuple[str, LLMRequest]]:
    return [(prompt, LLMRequest("m", prompt)) for prompt in prompts]


def test_answers_already_in_are_stored_together_in_the_order_asked() -> None:
    prompts = [str(n) for n in range(6)]
    groups = list(generate_in_ready_groups(_Server(5, in_flight=6), _requests(prompts), most=50))
    assert groups[0][0][0] == "0" and len(groups[0]) == 6  # 1-5 were in when 0 came
    assert [item for group in groups for item, _ in group] == prompts
    assert all(result.text == f"answer {item}" for group in groups for item, result in group)


def test_a_group_holds_at_most_the_given_number() -> None:
    prompts = [str(n) for n in range(6)]
    groups = list(generate_in_ready_groups(_Server(5, in_flight=6), _requests(prompts), most=4))
    assert [len(group) for group in groups] == [4, 2]


def test_an_outage_comes_alone_after_the_answers_before_it() -> None:
    prompts = ["0", "1", "2", "down", "4"]
    groups = list(generate_in_ready_groups(_Server(2, in_flight=3), _requests(prompts), most=50))
    flat = [(item, type(result).__name__) for group in groups for item, result in group]
    outage = next(group for group in groups if any(isinstance(r, BackendUnavailable) for _, r in group))
    assert outage == [("down", outage[0][1])] and len(outage) == 1
    assert flat[:3] == [("0", "Generation"), ("1", "Generation"), ("2", "Generation")]
    assert flat[3] == ("down", "BackendUnavailable")
