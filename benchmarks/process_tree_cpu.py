"""CPU seconds of a process tree, by kind of process, from the kernel's own accounting (Linux `/proc`).

Wall time on a shared machine says more about the neighbours than about the code; CPU seconds do
not. `ProcessTreeCpu` samples `/proc/<pid>/stat` of every descendant of a root process (every
`SAMPLE_SECONDS`, on a thread of its own) and keeps, per process, its own CPU (utime + stime) and
that of its children it has reaped (cutime + cstime), and its peak resident memory (`VmHWM`).

Why the total is exact: when a process exits and its parent reaps it, the kernel adds all its CPU
(its own and its reaped children's) to the parent's children time. So at any moment the sum, over
the live processes of the tree, of own + reaped-children time is all the CPU the tree has spent,
including every process that came and went between two samples (as long as it was reaped inside the
tree). The difference of that sum between two snapshots is the CPU spent between them.

The breakdown by kind (daemon, code server, run worker, webserver, ...) is sampled: a process's own
time as last seen, so the last fraction of a second of a short process falls between samples; that
remainder is reported apart (`between_samples`), never hidden in a kind.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE_SECONDS = 0.2
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")
PR_SET_CHILD_SUBREAPER = 36

# (kind, substrings of the command line that mark it), first match wins: a run worker's command line
# names the code location too, so it comes before the code server.
PROCESS_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run worker", ("api execute_run", "api execute_step", "api resume_run", "execute_run", "execute_step")),
    ("code server", ("api grpc", "code-server start", "code_server")),
    ("daemon", ("pipeline_defs.runtime.daemon", "dagster._daemon", "dagster-daemon")),
    ("webserver", ("pipeline_defs.runtime.webserver", "dagster_webserver", "dagster-webserver")),
    ("dagster dev (pipeline ui)", ("pipeline_defs.cli.main ui", "dagster dev")),
)
OTHER_KIND = "other"
RUN_WORKER_KIND = "run worker"
CODE_SERVER_KIND = "code server"
MULTIPROCESSING_CHILD = "multiprocessing.spawn"
FORKSERVER = "multiprocessing.forkserver"  # the code server's forkserver: each child of it is a run
TOP_PROCESSES = 12
COMMAND_LINE_CHARS = 160


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux `PR_SET_CHILD_SUBREAPER`): a
    process whose parent exits first is then reaped here, so its CPU still reaches this process's
    RUSAGE_CHILDREN instead of init's. False where the call is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans() -> int:
    """Reap the descendants that ended orphaned here (see `become_subreaper`); how many."""
    reaped = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped += 1


def process_kind(command_line: str) -> str:
    """What a process of `pipeline ui` is, from its command line."""
    for kind, marks in PROCESS_KINDS:
        if any(mark in command_line for mark in marks):
            return kind
    return OTHER_KIND


@dataclass(frozen=True)
class ProcStat:
    """One process's CPU as the kernel accounts it, in seconds."""

    pid: int
    ppid: int
    own: float  # utime + stime
    reaped_children: float  # cutime + cstime: every reaped child's own and reaped children's time
    started_after_boot: float = 0.0  # seconds
    name: str = ""  # the command name (field 2), as `ps -o comm` shows it


def parse_stat(pid: int, text: str) -> ProcStat:
    """`/proc/<pid>/stat`: the command name (field 2) may hold spaces and parentheses, so split after it."""
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14-17
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(value) for value in rest[11:15])
    started = int(rest[19]) / CLOCK_TICKS if len(rest) > 19 else 0.0  # field 22
    name = text[text.index("(") + 1 : text.rindex(")")]
    own, reaped = (utime + stime) / CLOCK_TICKS, (cutime + cstime) / CLOCK_TICKS
    return ProcStat(pid, ppid, own, reaped, started, name)


def boot_time(proc: Path = PROC) -> float:
    """When the machine booted (epoch seconds): a process's start in /proc counts from it."""
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def read_all_stats(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every process's stat now (processes that exit while being read are skipped)."""
    stats = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stats[int(entry.name)] = parse_stat(int(entry.name), (entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return stats


def server_cpu_seconds(name: str = "postgres", proc: Path = PROC) -> float | None:
    """All the CPU a local server has spent so far (PostgreSQL: the postmaster, its live backends, and
    through the postmaster's reaped-children time every backend that has ended), or None when no
    process of that name runs here. Its difference between two moments is the server's CPU between
    them, whoever asked for it: the path's databases are its only clients while a benchmark runs."""
    server = [stat for stat in read_all_stats(proc).values() if stat.name == name]
    return round(sum(stat.own + stat.reaped_children for stat in server), 2) if server else None


def _command_line(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def read_peak_rss_kb(pid: int, proc: Path = PROC) -> int:
    """A process's peak resident set so far (`VmHWM` of /proc/<pid>/status), in KiB; 0 if gone."""
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def descendants(root: int, stats: Mapping[int, ProcStat]) -> set[int]:
    """The root and every process below it."""
    children: dict[int, list[int]] = {}
    for stat in stats.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    tree, pending = set(), [root]
    while pending:
        pid = pending.pop()
        if pid in tree or pid not in stats:
            continue
        tree.add(pid)
        pending.extend(children.get(pid, ()))
    return tree


@dataclass
class _Seen:
    kind: str
    command_line: str
    first_own: float  # own CPU when first seen inside the window (0 for a process born inside it)
    last_own: float
    born_in_window: bool
    started_at: float = 0.0  # epoch seconds
    run_pid: int | None = None  # a run worker's run: its own pid, or the run process it is a step of
    peak_rss_kb: int = 0  # the highest VmHWM seen (a process's last half second can escape it)


@dataclass
class Snapshot:
    """The tree's total CPU at one moment: the sum of own + reaped-children time of its live processes."""

    at: float
    total: float
    own_by_pid: dict[int, float] = field(default_factory=dict)


class ProcessTreeCpu:
    """Samples the process tree under `root` on a thread; `start_window()` and `stop_window()` bound
    the stretch measured (e.g. from ingest to every output current)."""

    def __init__(
        self,
        root: int,
        classify: Callable[[str], str] = process_kind,
        read_stats: Callable[[], dict[int, ProcStat]] = read_all_stats,
        command_line: Callable[[int], str] = _command_line,
        sample_seconds: float = SAMPLE_SECONDS,
        read_peak_rss: Callable[[int], int] = read_peak_rss_kb,
    ) -> None:
        self.root = root
        self.classify = classify
        self.read_stats = read_stats
        self.command_line = command_line
        self.read_peak_rss = read_peak_rss
        self.sample_seconds = sample_seconds
        self.seen: dict[int, _Seen] = {}
        self._boot_time = boot_time() if PROC.exists() else 0.0
        self.window_start: Snapshot | None = None
        self.window_end: Snapshot | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- sampling --------------------------------------------------------------------------------

    def sample(self) -> Snapshot:
        """Read the tree once; update every process's last seen own time."""
        stats = self.read_stats()
        tree = descendants(self.root, stats)
        snapshot = Snapshot(time.time(), 0.0)
        with self._lock:
            for pid in tree:
                stat = stats[pid]
                snapshot.total += stat.own + stat.reaped_children
                snapshot.own_by_pid[pid] = stat.own
                seen = self.seen.get(pid)
                if seen is None and self.window_start is not None:
                    seen = self._see(pid, stats, tree, first_own=0.0, born_in_window=True)
                if seen is not None:
                    seen.last_own = max(seen.last_own, stat.own)
                    seen.peak_rss_kb = max(seen.peak_rss_kb, self.read_peak_rss(pid))
        return snapshot

    def _see(
        self, pid: int, stats: Mapping[int, ProcStat], tree: set[int], first_own: float, born_in_window: bool
    ) -> _Seen:
        """Record a process. One whose command line names no kind (a step's `multiprocessing` child, a
        helper) is of its parent's kind: its CPU is spent for the parent's work."""
        command_line = self.command_line(pid)
        kind = self.classify(command_line)
        parent = stats[pid].ppid
        run_pid = None
        if kind == OTHER_KIND and parent in tree and parent != pid:
            # the one process Dagster's code server starts through multiprocessing is a run
            # (`dagster/_grpc/server.py`, StartRun); its other helpers count as the parent's, and a
            # run's own children (the multiprocess executor's steps) as that run's
            parent_seen = self.seen.get(parent) or self._see(
                parent,
                stats,
                tree,
                first_own=0.0 if born_in_window else stats[parent].own,
                born_in_window=born_in_window,
            )
            kind, run_pid = parent_seen.kind, parent_seen.run_pid
            forked_run = FORKSERVER in parent_seen.command_line  # pipeline_defs/runtime/run_processes.py
            if kind == CODE_SERVER_KIND and (MULTIPROCESSING_CHILD in command_line or forked_run):
                kind, run_pid = RUN_WORKER_KIND, pid
        elif kind == RUN_WORKER_KIND:
            run_pid = pid
        seen = self.seen[pid] = _Seen(
            kind,
            command_line,
            first_own,
            stats[pid].own,
            born_in_window,
            started_at=self._boot_time + stats[pid].started_after_boot,
            run_pid=run_pid,
        )
        return seen

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="process-tree-cpu", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.sample_seconds):
            try:
                self.sample()
            except OSError:
                continue

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def start_window(self) -> None:
        """Everything the tree spends from now on counts; the processes alive now start from their
        current own time."""
        stats = self.read_stats()
        tree = descendants(self.root, stats)
        with self._lock:
            self.seen = {}
            for pid in tree:
                if pid not in self.seen:
                    self._see(pid, stats, tree, first_own=stats[pid].own, born_in_window=False)
            self.window_start = Snapshot(
                time.time(), sum(stats[pid].own + stats[pid].reaped_children for pid in tree)
            )

    def stop_window(self) -> None:
        self.window_end = self.sample()

    # --- figures ---------------------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        """CPU seconds in the window: total (exact), by kind (sampled), the rest between samples, and
        the processes started in it by kind, and each run worker started in it."""
        if self.window_start is None or self.window_end is None:
            raise RuntimeError("start_window() and stop_window() first")
        total = self.window_end.total - self.window_start.total
        by_kind: dict[str, float] = {}
        started: dict[str, int] = {}
        peak_rss_kb: dict[str, int] = {}
        with self._lock:
            for seen in self.seen.values():
                spent = seen.last_own - seen.first_own
                by_kind[seen.kind] = by_kind.get(seen.kind, 0.0) + spent
                peak_rss_kb[seen.kind] = max(peak_rss_kb.get(seen.kind, 0), seen.peak_rss_kb)
                if seen.born_in_window:
                    started[seen.kind] = started.get(seen.kind, 0) + 1
            runs: dict[int, list[float]] = {}  # a run's process: [its start, CPU of it and its steps]
            for pid, seen in self.seen.items():
                if seen.kind == RUN_WORKER_KIND and seen.run_pid == pid and seen.born_in_window:
                    runs[pid] = [round(seen.started_at, 2), 0.0]
            for seen in self.seen.values():
                if seen.run_pid in runs:
                    runs[seen.run_pid][1] += seen.last_own - seen.first_own
            run_workers = sorted([start, round(cpu, 2), pid] for pid, (start, cpu) in runs.items())
            top = sorted(self.seen.values(), key=lambda seen: seen.first_own - seen.last_own)[:TOP_PROCESSES]
            top_processes = [
                [seen.kind, round(seen.last_own - seen.first_own, 2), seen.command_line[:COMMAND_LINE_CHARS]]
                for seen in top
            ]
        sampled = sum(by_kind.values())
        return {
            "window_seconds": round(self.window_end.at - self.window_start.at, 2),
            "total_cpu_seconds": round(total, 2),
            "before_window_cpu_seconds": round(self.window_start.total, 2),  # the tree's start-up
            "cpu_seconds_by_kind": {kind: round(value, 2) for kind, value in sorted(by_kind.items())},
            "between_samples_cpu_seconds": round(total - sampled, 2),
            "processes_started_by_kind": dict(sorted(started.items())),
            # the largest single process of each kind (a run worker's steps are processes of their own)
            "peak_rss_mb_by_kind": {kind: round(kb / 1024, 1) for kind, kb in sorted(peak_rss_kb.items())},
            "run_workers": run_workers,  # each run started in the window: [start, CPU s with steps, pid]
            "top_processes": top_processes,  # kind, CPU seconds in the window, command line (cut)
        }
