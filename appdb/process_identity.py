"""Which process a heartbeat belongs to, and whether this process can check on it.

A pid names a process only inside one PID namespace on one boot. A run in a container, or under
`unshare --pid`, can share the host's hostname and still have pids that mean other processes on the
host (a host-side reaper found "pid 7 gone" and gave a live run's claims away, and the other way round).
So a heartbeat records, beside host and pid:

- `instance_id`: random per process (a new one after a fork): the process itself, wherever it runs;
- `boot_id` (`/proc/sys/kernel/random/boot_id`) and `pid_namespace` (`/proc/self/ns/pid`): where its
  pid means something;
- `process_started`: its start in clock ticks since boot (`/proc/self/stat`, field 22), so a pid reused
  by a later process is told apart without comparing any clock.

Another process may look the pid up only when it is provably in the same PID namespace on the same boot,
with a /proc that shows that namespace (`same_pid_space`); everywhere else the heartbeat's age alone
decides (`sensors/run_liveness.py`).
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as a heartbeat names it; the None fields are unknown (no /proc, an older version)."""

    instance_id: str | None
    host: str
    pid: int
    boot_id: str | None = None
    pid_namespace: str | None = None
    started: int | None = None  # clock ticks since boot

    @staticmethod
    def elsewhere(host: str, pid: int) -> ProcessIdentity:
        """A process this one can never check (another host, say): its heartbeat's age decides."""
        return ProcessIdentity(None, host, pid)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def boot_id() -> str | None:
    return _read(PROC / "sys" / "kernel" / "random" / "boot_id")


def pid_namespace() -> str | None:
    """This process's PID namespace, e.g. `pid:[4026531836]` (the same string for every process in it)."""
    try:
        return os.readlink(PROC / "self" / "ns" / "pid")
    except OSError:
        return None


def proc_shows_own_namespace() -> bool:
    """Whether /proc here shows this process's own PID namespace: under `unshare --pid` without a new
    /proc mount it shows the parent's, and a pid looked up there would be another process."""
    try:
        return int(os.readlink(PROC / "self")) == os.getpid()
    except (OSError, ValueError):
        return False


def state_and_start(pid: int) -> tuple[str, int] | None:
    """A process's state letter and its start in clock ticks since boot (fields 3 and 22 of
    /proc/PID/stat); None when there is no such process or no /proc."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


_instance: tuple[int, ProcessIdentity] | None = None


def this_process() -> ProcessIdentity:
    """This process's identity, made once per process (a forked child makes its own)."""
    global _instance
    pid = os.getpid()
    if _instance is None or _instance[0] != pid:
        checkable = proc_shows_own_namespace()
        found = state_and_start(pid) if checkable else None
        _instance = (
            pid,
            ProcessIdentity(
                instance_id=uuid.uuid4().hex,
                host=socket.gethostname(),
                pid=pid,
                boot_id=boot_id() if checkable else None,
                pid_namespace=pid_namespace() if checkable else None,
                started=found[1] if found else None,
            ),
        )
    return _instance[1]


def same_pid_space(other: ProcessIdentity) -> bool:
    """Whether `other`'s pid can be looked up here: the same boot, the same PID namespace, and a /proc
    that shows it. Host names are not compared: containers share them, and a boot id is enough."""
    me = this_process()
    return (
        other.boot_id is not None
        and other.pid_namespace is not None
        and other.started is not None
        and other.boot_id == me.boot_id
        and other.pid_namespace == me.pid_namespace
        and proc_shows_own_namespace()
    )
