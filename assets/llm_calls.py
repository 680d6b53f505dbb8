"""The one place that calls the LLM: single calls, chain steps and the judge all go through here.

Requests go out in order with up to `llm.in_flight_limit` open at once, and results come back in order. A
request is sent as soon as a slot frees, before the caller stores the previous result, so the bookkeeping
of each item (output, interaction, Dagster event) overlaps the next call instead of leaving the backend
idle: even with one request in flight the backend stays busy. After a `BackendUnavailable` nothing more
is sent (the caller stops the run).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from domain.language.llm_types import BackendUnavailable, Generation
from resources.llm import LLMResource

Item = TypeVar("Item")

Fence = Callable[[Item], Exception | None]
"""Asked on the request's thread right before the call: an exception stands for the call, which is not
made (the run no longer holds the subject's claim: `assets/batch_state.ClaimLost`)."""

REQUEST_HANDOFF_SECONDS = 0.002
"""Let the request thread put its request on the wire before the caller's bookkeeping holds the GIL:
CPU-bound Python keeps it in 5 ms slices, which delayed each send by ~10 ms."""


@dataclass(frozen=True)
class LLMRequest:
    """One request, exactly as the backend gets it: a completion of `prompt`, or with `messages` a chat
    (then `prompt` is those messages as stored in the trace)."""

    model: str
    prompt: str
    system_prompt: str = ""
    schema: Mapping[str, Any] | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    messages: Sequence[Mapping[str, str]] | None = None


def call_llm(llm: LLMResource, request: LLMRequest) -> Generation | Exception:
    """One call; every failure becomes the returned outcome, never a crashed run."""
    try:
        return llm.generate(
            request.model,
            request.prompt,
            request.system_prompt,
            dict(request.schema) if request.schema is not None else None,
            dict(request.options),
            request.messages,
        )
    except Exception as exc:
        return exc


def generate_in_order(
    llm: LLMResource, requests: Iterable[tuple[Item, LLMRequest]]
) -> Iterator[tuple[Item, Generation | Exception]]:
    """Each item's outcome, in the order given, with up to `llm.in_flight_limit` requests open."""
    for item, result, _next_is_ready in _outcomes_in_order(llm, requests):
        yield item, result


def generate_in_ready_groups(
    llm: LLMResource,
    requests: Iterable[tuple[Item, LLMRequest]],
    most: int,
    fence: Fence | None = None,
) -> Iterator[list[tuple[Item, Generation | Exception]]]:
    """The outcomes in the order given, in groups: the next outcome and those after it that are answered
    already (up to `most`), so a busy server's answers are stored a transaction at a time and a slow
    one's as each comes. A `BackendUnavailable` comes alone: the caller stops on it, and what was
    answered before it is stored first. `fence` is asked right before each call (see `Fence`)."""
    group: list[tuple[Item, Generation | Exception]] = []
    for item, result, next_is_ready in _outcomes_in_order(llm, requests, fence):
        if isinstance(result, BackendUnavailable):
            if group:
                yield group
                group = []
            yield [(item, result)]
            continue
        group.append((item, result))
        if len(group) >= most or not next_is_ready():
            yield group
            group = []
    if group:
        yield group


def _outcomes_in_order(
    llm: LLMResource, requests: Iterable[tuple[Item, LLMRequest]], fence: Fence | None = None
) -> Iterator[tuple[Item, Generation | Exception, Callable[[], bool]]]:
    """Each item's outcome in order, and whether the next one is answered already."""
    slots = llm.in_flight_limit

    def fenced_call(item: Item, request: LLMRequest) -> Generation | Exception:
        stopped = fence(item) if fence is not None else None
        return stopped if stopped is not None else call_llm(llm, request)

    with ThreadPoolExecutor(max_workers=slots) as pool:
        pending = iter(requests)
        window: deque[tuple[Item, Future]] = deque(
            (item, pool.submit(fenced_call, item, request))
            for item, request in itertools.islice(pending, slots)
        )

        def next_is_ready() -> bool:
            return bool(window) and window[0][1].done()

        while window:
            item, future = window.popleft()
            result = future.result()
            if not isinstance(result, BackendUnavailable):
                following = next(pending, None)
                if following is not None:
                    window.append((following[0], pool.submit(fenced_call, *following)))
                    time.sleep(REQUEST_HANDOFF_SECONDS)
            yield item, result, next_is_ready
