"""The guard in front of the webserver (pipeline_defs/runtime/request_guard.py), over a stand-in app that
records what reached it: forged requests get 403 and never reach it; the UI's own requests do."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from pipeline_defs.runtime.dev import swap_modules
from pipeline_defs.runtime.request_guard import RequestGuard, allowed_hosts
from pipeline_defs.runtime.webserver import guarded_app_hosts
from pipeline_defs.settings import Settings

PORT = 3000
OWN = f"http://127.0.0.1:{PORT}"
MUTATION = "mutation { launchPartitionBackfill(backfillParams: {}) { __typename } }"
reached: list[str] = []


async def graphql(request: Request) -> JSONResponse:
    reached.append(f"{request.method} {request.url.path}")
    return JSONResponse({"data": {"ok": True}})


async def subscriptions(websocket: WebSocket) -> None:
    await websocket.accept()
    reached.append("websocket")
    await websocket.close()


@pytest.fixture
def client() -> TestClient:
    reached.clear()
    app = Starlette(
        routes=[
            Route("/graphql", graphql, methods=["GET", "POST"]),
            Route("/assets", graphql, methods=["GET"]),
            WebSocketRoute("/graphql", subscriptions),
        ]
    )
    return TestClient(RequestGuard(app, allowed_hosts(PORT)), base_url=OWN)


def post(client: TestClient, **headers: str) -> Any:
    return client.post("/graphql", json={"query": MUTATION}, headers=headers)


def test_the_uis_own_requests_go_through(client: TestClient) -> None:
    assert post(client, Origin=OWN, **{"Sec-Fetch-Site": "same-origin"}).status_code == 200
    assert post(client).status_code == 200  # no Origin: a script or curl on this machine
    assert post(client, Host=f"localhost:{PORT}", Origin=f"http://localhost:{PORT}").status_code == 200
    assert client.get("/graphql", params={"query": "{ version }"}).status_code == 200
    assert client.get("/assets", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200  # a link
    with client.websocket_connect("/graphql", headers={"Host": f"127.0.0.1:{PORT}", "Origin": OWN}):
        pass
    assert reached == ["POST /graphql"] * 3 + ["GET /graphql", "GET /assets", "websocket"]


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},  # DNS rebinding: evil.example resolves to 127.0.0.1
        {"Host": f"evil.example:{PORT}", "Origin": f"http://evil.example:{PORT}"},
        {"Origin": "http://evil.example"},  # a page elsewhere posting to the UI
        {"Origin": "http://127.0.0.1:8080"},  # another local server's page: same site, other origin
        {"Origin": "null"},  # a sandboxed iframe or a file
        {"Sec-Fetch-Site": "cross-site"},  # a browser that says so without an Origin
    ],
)
def test_forged_graphql_requests_are_refused(client: TestClient, headers: dict[str, str]) -> None:
    response = post(client, **headers)
    assert response.status_code == 403, response.text
    assert response.text.startswith("403 Forbidden")
    assert reached == []


def test_a_mutation_over_get_is_refused(client: TestClient) -> None:
    for query in (
        MUTATION,
        "# a comment\n  MUTATION Wipe { wipeAssets(assetPartitionRanges: []) { __typename } }",
    ):
        response = client.get("/graphql", params={"query": query}, headers={"Origin": OWN})
        assert response.status_code == 403, response.text
    assert reached == []


@pytest.mark.parametrize(
    ("query", "operation_name"),
    [
        ("\ufeff" + MUTATION, None),  # a byte-order mark: GraphQL ignores it, a regex's \s does not
        ("# a comment ended by a carriage return\r" + MUTATION, None),
        ('query Q { version(note: "#") } ' + MUTATION.replace("mutation", "mutation M"), "M"),
        ('subscription S { pipelineRunLogs(runId: "x") { __typename } }', None),
    ],
    ids=["byte-order-mark", "carriage-return-comment", "hash-inside-a-string", "subscription"],
)
def test_a_get_mutation_written_to_slip_past_text_matching_is_refused(
    client: TestClient, query: str, operation_name: str | None
) -> None:
    params = {"query": query} | ({"operationName": operation_name} if operation_name else {})
    response = client.get("/graphql", params=params)
    assert response.status_code == 403, response.text
    assert reached == []


def test_a_get_query_that_does_not_parse_is_refused_and_a_read_with_a_hash_passes(client: TestClient) -> None:
    refused = client.get("/graphql", params={"query": "mutation { unterminated"})
    assert refused.status_code == 403
    assert "does not parse" in refused.text
    read = client.get("/graphql", params={"query": '{ version(note: "# not a comment") }'})
    assert read.status_code == 200, read.text
    assert reached == ["GET /graphql"]


def test_a_foreign_host_is_refused_everywhere_and_a_cross_origin_socket_too(client: TestClient) -> None:
    assert client.get("/assets", headers={"Host": "evil.example"}).status_code == 403
    forged = {"Host": f"127.0.0.1:{PORT}", "Origin": "http://evil.example"}
    with pytest.raises(WebSocketDisconnect), client.websocket_connect("/graphql", headers=forged):
        pass
    assert reached == []


def test_allowed_hosts_add_a_proxy_name_and_the_bound_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPELINE_UI_ALLOWED_HOSTS", "dagster.internal.example, proxy:8443")
    hosts = guarded_app_hosts("10.0.0.5", PORT, Settings.from_env().ui_allowed_hosts)
    assert {
        "127.0.0.1:3000",
        "localhost:3000",
        "dagster.internal.example",
        "proxy:8443",
        "10.0.0.5:3000",
    } <= hosts
    assert "0.0.0.0:3000" not in guarded_app_hosts("0.0.0.0", PORT)


def test_dagster_dev_starts_the_guarded_webserver_and_the_quick_daemon() -> None:
    """`pipeline ui` swaps dagster dev's `python -m dagster_webserver` for the guarded one and its daemon
    for the one whose sensor loop follows the sensor interval; anything else starts as it is."""
    started: list[list[str]] = []
    open_swapped = swap_modules(lambda command, **kwargs: started.append(command))
    open_swapped(["/venv/bin/python", "-m", "dagster_webserver", "--port", "3000"], pass_fds=[5])
    open_swapped(["/venv/bin/python", "-m", "dagster._daemon", "run"], pass_fds=[6])
    open_swapped(["/venv/bin/python", "-m", "dagster", "code-server", "start"], pass_fds=[7])
    assert started == [
        ["/venv/bin/python", "-m", "pipeline_defs.runtime.webserver", "--port", "3000"],
        ["/venv/bin/python", "-m", "pipeline_defs.runtime.daemon", "run"],
        ["/venv/bin/python", "-m", "dagster", "code-server", "start"],
    ]
    # that dagster dev still starts them that way: tests/unit/test_dagster_runtime_swaps.py
