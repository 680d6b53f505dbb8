"""A request whose connection dropped mid-way, sent once more while the server still answers.

An HTTP client reuses kept-alive connections; a server or a proxy in front of it may close one just as
a request goes out, or reset it under load. Taken as an outage, one such drop paused a use case for
minutes (`PIPELINE_PAUSE_SECONDS`) although the server was fine: seen in a 100,000-posting benchmark run
against a simulated server with 16 slots. Only a drop while the server answers a cheap request is
retried, once; a server that is down, or drops the request again, is an outage as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import httpx

DROPPED_CONNECTION = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
"""Transport errors after the connection was made: reset, closed before the answer, broken pipe."""

Answer = TypeVar("Answer")


def once_more_if_dropped(request: Callable[[], Answer], server_answers: Callable[[], bool]) -> Answer:
    """`request()`; if its connection dropped and `server_answers()`, `request()` once more."""
    try:
        return request()
    except DROPPED_CONNECTION:
        if not server_answers():
            raise
    return request()
