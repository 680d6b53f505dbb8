"""A RabbitMQ node of a test's own (its own ports, data and log folders), so a test can stop and start
its broker without touching the machine's (which other tests and engineers use). It runs as the
`rabbitmq` user, as the packaged server does (its Erlang cookie is that user's); it needs root to
become that user and `rabbitmq-server` installed, else the test skips saying why."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.live_pipeline import free_port

RABBITMQ_HOME = "/var/lib/rabbitmq"  # the packaged server's home: its Erlang cookie
START_SECONDS = 120.0


def unavailable_reason() -> str | None:
    if shutil.which("rabbitmq-server") is None or shutil.which("rabbitmqctl") is None:
        return "rabbitmq-server is not installed"
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "a RabbitMQ node of the test's own runs as the rabbitmq user: needs root and runuser"
    try:
        import pwd

        pwd.getpwnam("rabbitmq")
    except KeyError:
        return "no rabbitmq user"
    return None


@dataclass
class RabbitNode:
    name: str
    port: int
    env: dict[str, str]

    @property
    def url(self) -> str:
        return f"pyamqp://guest:guest@127.0.0.1:{self.port}//"

    def ctl(self, *args: str, timeout: float = 120) -> None:
        """`rabbitmqctl -n NODE ARGS`, as the rabbitmq user."""
        command = ["runuser", "-u", "rabbitmq", "--", "env", *(f"{k}={v}" for k, v in self.env.items())]
        done = subprocess.run(
            [*command, "rabbitmqctl", "-n", self.name, *args], capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def wait_accepting(self, timeout: float = START_SECONDS) -> None:
        from kombu import Connection

        deadline = time.monotonic() + timeout
        while True:
            try:
                with Connection(self.url, connect_timeout=2) as connection:
                    connection.ensure_connection(max_retries=1)
                return
            except Exception:  # the transport's own errors, while the node starts
                assert time.monotonic() < deadline, f"node {self.name} not accepting within {timeout} s"
                time.sleep(1)


@contextmanager
def private_rabbitmq() -> Iterator[RabbitNode]:
    """A started node on a free port; stopped, its processes ended and its folder removed when left.
    Its folder is a fresh one in the system's temporary folder: pytest's own are its owner's only."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"broker restart test: {reason}")
    folder = Path(tempfile.mkdtemp(prefix="rabbitmq-node-"))
    try:
        with _node_in(folder) as node:
            yield node
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def _node_in(folder: Path) -> Iterator[RabbitNode]:
    (folder / "enabled_plugins").write_text("[].\n")  # no management plugin: no port of the machine's
    (folder / "rabbitmq.conf").write_text("")
    shutil.chown(folder, "rabbitmq", "rabbitmq")
    for child in folder.iterdir():
        shutil.chown(child, "rabbitmq", "rabbitmq")
    port, name = free_port(), f"test-{uuid.uuid4().hex[:8]}@localhost"
    env = {
        "HOME": RABBITMQ_HOME,
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "RABBITMQ_NODENAME": name,
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
        "RABBITMQ_LOG_BASE": str(folder / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(folder / "rabbitmq"),
        "RABBITMQ_PID_FILE": str(folder / "node.pid"),
    }
    node = RabbitNode(name, port, env)
    command = ["runuser", "-u", "rabbitmq", "--", "env", *(f"{k}={v}" for k, v in env.items())]
    command.append("rabbitmq-server")
    with (folder / "server.log").open("w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        node.wait_accepting()
        yield node
    finally:
        with suppress(AssertionError, subprocess.TimeoutExpired):
            node.ctl("stop", timeout=60)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait()
