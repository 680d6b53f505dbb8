"""The real `pipeline ui` refuses what a hostile web page or a DNS-rebinding name would send through the
operator's browser (a foreign Host, another origin, a mutation over GET) and still serves the UI's own
requests. Uses the shared `dagster dev` of tests/support/live_pipeline.py; the mutation tried is the
harmless `setNuxSeen`."""

from __future__ import annotations

import http.client
import json
from urllib.parse import quote, urlsplit

import pytest

from tests.support.live_pipeline import LivePipeline

pytestmark = pytest.mark.live_dagster

MUTATION = "mutation { setNuxSeen }"


def send(
    live: LivePipeline, method: str, path: str, body: dict | None = None, **headers: str
) -> tuple[int, str]:
    address = urlsplit(live.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    try:
        payload = json.dumps(body).encode() if body is not None else None
        sent = {
            "Host": address.netloc,
            **({"Content-Type": "application/json"} if payload else {}),
            **headers,
        }
        connection.request(method, path, body=payload, headers=sent)
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


def test_forged_requests_are_refused_and_the_uis_own_work(live_pipeline: LivePipeline) -> None:
    own_origin = live_pipeline.url
    forged = {
        "foreign Host (DNS rebinding)": send(
            live_pipeline, "POST", "/graphql", {"query": MUTATION}, Host="evil.example"
        ),
        "another site's page": send(
            live_pipeline, "POST", "/graphql", {"query": MUTATION}, Origin="http://evil.example"
        ),
        "a mutation over GET (an <img> or a link)": send(
            live_pipeline, "GET", f"/graphql?query={quote(MUTATION)}", Origin=own_origin
        ),
    }
    for what, (status, text) in forged.items():
        assert status == 403, f"{what}: HTTP {status}: {text[:300]}"
    # the UI's own requests: a same-origin POST from its pages, and the page itself
    status, text = send(
        live_pipeline,
        "POST",
        "/graphql",
        {"query": "{ version }"},
        Origin=own_origin,
        **{"Sec-Fetch-Site": "same-origin"},
    )
    assert status == 200 and json.loads(text)["data"]["version"], text[:300]
    assert send(live_pipeline, "GET", "/", **{"Sec-Fetch-Site": "none"})[0] == 200
    assert live_pipeline.graphql(MUTATION)["setNuxSeen"] is True  # a script on this machine (no Origin)
