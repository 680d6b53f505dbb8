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
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GRAPHQL_PATH = "/graphql"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_MUTATION = re.compile(r"(^|[\s{};,])mutation\b", re.IGNORECASE)
_COMMENT = re.compile(r"#[^\n]*")


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
        if graphql and method in ("GET", "HEAD") and _is_mutation(scope.get("query_string", b"")):
            return "a GraphQL mutation over GET (send it with POST from the UI)"
        return None


def _is_mutation(query_string: bytes) -> bool:
    """Whether a GET's `query` parameter holds a GraphQL mutation (comments ignored)."""
    params = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    return any(_MUTATION.search(_COMMENT.sub("", document)) for document in params.get("query", []))


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
