"""Separate hosts on one machine: a network namespace each (`ip netns`), joined by veth pairs to a
bridge in the machine's own namespace, each with its own address, its own host name and its own PID
namespace (so `socket.gethostname()` differs and no host can look up another's processes, as on real
hosts). Services that listen on loopback only
(PostgreSQL, RabbitMQ here) are reached through a forwarder (socat) on the bridge's address.

Needs root and iproute2; `netns_unavailable_reason()` says why not where it cannot run (a container
without CAP_NET_ADMIN, no `ip`). Everything it makes carries a random suffix and is removed on exit."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.celery_workers import stop_group


def _ip(*args: str, namespace: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, text=True)


def netns_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "unshare", "socat"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (iproute2, util-linux, socat)"
    probe = f"pe-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is not allowed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    veth: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run on this host: in its network namespace, under its own host name, in a PID
        namespace of its own (with its own /proc): another host's reaper cannot look its processes up,
        so the liveness rules judge its runs by their heartbeats' age alone, as across real hosts."""
        script = f'hostname {self.name} && exec "$@"'
        isolated = ["unshare", "--uts", "--pid", "--fork", "--mount-proc"]
        return ["ip", "netns", "exec", self.namespace, *isolated, "sh", "-c", script, "sh", *argv]

    def cut_off(self) -> None:
        """Its network gone, its processes left running (a cable pulled, a switch port down)."""
        _ip("link", "set", "eth0", "down", namespace=self.namespace)


@dataclass
class Network:
    gateway: str
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[subprocess.Popen] = field(default_factory=list)

    def start(
        self, host: str | None, argv: Sequence[str], env: dict[str, str], log: Path
    ) -> subprocess.Popen:
        """A process on `host` (None: the machine itself), in a process group of its own, stopped on exit."""
        command = self.hosts[host].command(argv) if host else list(argv)
        with log.open("w") as output:
            process = subprocess.Popen(
                command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.processes.append(process)
        return process

    def forward(self, port: int, to: str, log: Path) -> None:
        """The machine's loopback-only service at `to` (host:port) reachable at gateway:port."""
        listen = f"TCP-LISTEN:{port},bind={self.gateway},reuseaddr,fork"
        self.start(None, ["socat", listen, f"TCP:{to}"], dict(os.environ), log)


@contextmanager
def network(names: Sequence[str]) -> Iterator[Network]:
    """A bridge and one namespace per name, addresses 10.207.N.11, .12, ...; the machine is .1."""
    suffix = uuid.uuid4().hex[:4]
    subnet = f"10.207.{random.randint(0, 255)}"
    bridge = f"pe-br-{suffix}"
    net = Network(gateway=f"{subnet}.1")
    try:
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{net.gateway}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for index, name in enumerate(names, start=11):
            host = Host(name, f"pe-{name}-{suffix}", f"{subnet}.{index}", f"pe-{name}-{suffix}")
            subprocess.run(["ip", "netns", "add", host.namespace], check=True)
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
            _ip("link", "set", host.veth, "master", bridge, "up")
            _ip("addr", "add", f"{host.address}/24", "dev", "eth0", namespace=host.namespace)
            _ip("link", "set", "eth0", "up", namespace=host.namespace)
            _ip("link", "set", "lo", "up", namespace=host.namespace)
            net.hosts[name] = host
        yield net
    finally:
        for process in reversed(net.processes):
            stop_group(process, grace=10)
        for host in net.hosts.values():
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
            subprocess.run(["ip", "link", "del", host.veth], capture_output=True)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
