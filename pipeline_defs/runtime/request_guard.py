"""A thin ASGI layer in front of dagster-webserver: only requests from the UI's own pages act.

Dagster's GraphQL endpoint runs mutations over GET and checks neither Host nor Origin, so any web page
the operator opens (a form, an <img>, a fetch) or a DNS-rebinding name resolving to 127.0.0.1 could
launch backfills, wipe assets or stop sensors through the operator's browser. This layer refuses, with
403 and before Dagster sees them:

- any request whose Host header is not one of the server's own names (DNS rebinding);
- a GraphQL request (HTTP or WebSocket) whose Origin is another site's, or that a browser marks
  cross-site (`Sec-Fetch-Site`), and any other state-changing method from another origin;
- a GraphQL mutation sent with GET (a link or an <img> must never change anything).

Requests without Origin (curl, scripts, Dagster's Python clients) pass when their Host is right: they
are not a browser acting for another site. It is no authentication: anyone who can reach the port can
use the UI. See docs/operations.md (a reverse proxy with authentication for a shared deployment).
Pinned by `tests/unit/test_request_guard.py` (what it refuses) and `tests/unit/test_dagster_runtime_swaps.py`
(dagster-webserver still hands its app to the `uvicorn.run` that `webserver.py` wraps).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GRAPHQL_PATH = "/graphql"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
# far above any read-only query the UI sends over GET; bounds the parser's work on a hostile URL
_MAX_GET_QUERY_TOKENS = 20_000


def allowed_hosts(port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host header values this server answers: its loopback names with the port, and `extra`
    (PIPELINE_UI_ALLOWED_HOSTS: the name a reverse proxy forwards, `name` or `name:port`)."""
    names = {f"{name}:{port}" for name in LOOPBACK_NAMES}
    return frozenset(names | {host.strip().lower() for host in extra if host.strip()})


class RequestGuard:
    """Wraps an ASGI app (dagster-webserver's) and refuses foreign-Host, cross-origin and GET-mutation
    requests with 403; everything else goes through unchanged."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str]) -> None:
        self.app = app
        self.hosts = frozenset(host.lower() for host in hosts)
        self.origins = frozenset(f"{scheme}://{host}" for host in self.hosts for scheme in ("http", "https"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            problem = self.refusal(scope)
            if problem is not None:
                await _refuse(scope, send, problem)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> str | None:
        """Why this request is refused, or None to let it through."""
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        host = headers.get("host", "").strip().lower()
        if host not in self.hosts:
            return f"foreign Host {host!r}: this server answers {', '.join(sorted(self.hosts))}"
        origin = headers.get("origin")
        method = scope.get("method", "GET").upper()
        graphql = scope.get("path", "").rstrip("/").endswith(GRAPHQL_PATH)
        acts = graphql or scope["type"] == "websocket" or method not in SAFE_METHODS
        if origin is not None and origin.lower() != "null" and origin.lower() not in self.origins and acts:
            return f"cross-origin request from {origin!r}"
        if origin is not None and origin.lower() == "null" and (graphql or method not in SAFE_METHODS):
            return "request from an opaque origin (a sandboxed page or a file)"
        if graphql and headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return f"{headers['sec-fetch-site']} GraphQL request"
        if graphql and method in ("GET", "HEAD"):
            return _get_query_refusal(scope.get("query_string", b""))
        return None


def _get_query_refusal(query_string: bytes) -> str | None:
    """Why a GET's `query` parameters are refused: one that is not plainly a read-only query.

    The decision is graphql-core's, the parser Dagster itself runs, so a BOM, a comment ended by a
    carriage return or a `#` inside a string reads here exactly as it reads there. A document the
    parser cannot read is refused too: Dagster would answer it with an error anyway, and text that
    two parsers might read differently is exactly what an attacker would send. The parameters are
    split as Starlette splits them for Dagster (latin-1, then percent-decoding as UTF-8).
    """
    params = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    for document in params.get("query", []):
        try:
            parsed = parse(document, no_location=True, max_tokens=_MAX_GET_QUERY_TOKENS)
        except GraphQLError as error:
            return f"a GraphQL document over GET that does not parse ({error.message}); send it with POST"
        for definition in parsed.definitions:
            if (
                isinstance(definition, OperationDefinitionNode)
                and definition.operation != OperationType.QUERY
            ):
                return f"a GraphQL {definition.operation.value} over GET (send it with POST from the UI)"
    return None


async def _refuse(scope: Scope, send: Send, problem: str) -> None:
    body = f"403 Forbidden: {problem}\n".encode()
    if scope["type"] == "websocket":
        # closing before accepting makes the server answer the handshake with 403
        await send({"type": "websocket.close", "code": 1008, "reason": problem[:100]})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
