"""The live servers of the tests and benchmarks keep to PIPELINE_PORT_RANGE; under pytest-xdist (`make
test`) the test processes share it without handing out the same port twice."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from benchmarks import ports


@pytest.fixture
def fresh_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_ports_given", set())
    monkeypatch.setenv("PIPELINE_PORT_RANGE", "24100-24109")


def _handed_out(monkeypatch: pytest.MonkeyPatch, worker: str | None, count: int) -> list[int]:
    monkeypatch.setattr(ports, "_ports_given", set())
    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    return [ports.free_port() for _ in range(count)]


def test_two_test_processes_take_different_ports_of_the_range(
    fresh_ports: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _handed_out(monkeypatch, "gw0", 2)
    second = _handed_out(monkeypatch, "gw1", 2)
    assert not set(first) & set(second)
    assert all(24100 <= port <= 24109 for port in first + second)


def test_one_process_takes_the_range_in_order(fresh_ports: None, monkeypatch: pytest.MonkeyPatch) -> None:
    handed = _handed_out(monkeypatch, None, 3)
    assert handed == sorted(handed) and len(set(handed)) == 3 and handed[0] >= 24100


def test_a_range_with_no_free_port_left_says_which_variable(
    fresh_ports: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: this test took 24101 as this process's only port, and failed whenever another process
    held it (issue 64). Now the test holds that port itself: taken either way, the error must name the
    range."""
    monkeypatch.setenv("PIPELINE_PORT_RANGE", "24100-24101")
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    with _held(24101), pytest.raises(RuntimeError, match="PIPELINE_PORT_RANGE=24100-24101"):
        ports.free_port()  # 24101 is this process's only port of the range, and it is taken


@contextlib.contextmanager
def _held(port: int) -> Iterator[None]:
    """`port` taken while the block runs: listened on here, unless another process holds it already."""
    with socket.socket() as holder:
        with contextlib.suppress(OSError):  # held elsewhere: taken all the same
            holder.bind(("127.0.0.1", port))
            holder.listen()
        yield
