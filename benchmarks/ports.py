"""Free local ports for the servers the benchmarks and the end-to-end tests start: any free port, or
on a machine shared by several people (PIPELINE_PORT_RANGE=first-last) a free one of that range."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

PORT_RANGE_VARIABLE = "PIPELINE_PORT_RANGE"  # e.g. 24100-24199
_ports_given: set[int] = set()  # handed out in this process, perhaps not bound yet


def free_port() -> int:
    first, _, last = os.environ.get(PORT_RANGE_VARIABLE, "").partition("-")
    candidates = _this_process_share(range(int(first), int(last or first) + 1)) if first else [0]
    found = free_port_in(candidates, _ports_given)
    if found is None:
        raise RuntimeError(f"no free port in {PORT_RANGE_VARIABLE}={os.environ[PORT_RANGE_VARIABLE]}")
    return found


def free_port_in(candidates: Iterable[int], given: set[int]) -> int | None:
    """The first of `candidates` (0: any) not in `given` that nothing listens on; added to `given`."""
    for port in candidates:
        if port in given:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            found = probe.getsockname()[1]
        given.add(found)
        return found
    return None


def _this_process_share(ports: range) -> range:
    """Under pytest-xdist each test process takes every n-th port of the range, so two of them never
    hand out the same port before either server has bound it."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count and count.isdigit()):
        return ports
    return ports[int(worker[2:]) :: max(1, int(count))]
