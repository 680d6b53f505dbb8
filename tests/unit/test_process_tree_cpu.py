"""The daemon benchmark's CPU accounting: every process of a tree counted, also the ones that came and
went between two samples, and each kind apart (the daemon, code server, run workers, webserver)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap

from benchmarks.process_tree_cpu import ProcessTreeCpu, ProcStat, parse_stat, process_kind

# A root that waits for a line, then starts a child that burns CPU and exits (the root reaps it), burns
# some CPU itself, says "done" and waits for a second line before it exits.
ROOT = textwrap.dedent(
    """
    import subprocess, sys, time
    def burn(seconds):
        end = time.process_time() + seconds
        while time.process_time() < end:
            pass
    sys.stdin.readline()
    subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                    "while time.process_time() < end: pass", "burner"], check=True)
    burn(0.3)
    print("done", flush=True)
    sys.stdin.readline()
    """
)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_the_window_counts_a_reaped_child_and_its_parent_as_the_kernel_does() -> None:
    before = _children_cpu()
    root = subprocess.Popen(
        [sys.executable, "-c", ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    tree = ProcessTreeCpu(
        root.pid,
        classify=lambda line: "burner" if line.rstrip().endswith("burner") else "root",
        sample_seconds=0.05,
    )
    tree.start()
    try:
        tree.start_window()
        own_at_start = tree.sample().total
        root.stdin.write("go\n")
        root.stdin.flush()
        assert root.stdout.readline().strip() == "done"
        tree.stop_window()
    finally:
        tree.stop()
        root.stdin.write("exit\n")
        root.stdin.flush()
        root.wait(timeout=60)
    lifetime = _children_cpu() - before
    figures = tree.figures()

    # the child's 0.6 s and the root's 0.3 s, and nothing before the window
    assert 0.85 <= figures["total_cpu_seconds"] <= lifetime - own_at_start + 0.05
    assert figures["processes_started_by_kind"] == {"burner": 1}
    assert figures["cpu_seconds_by_kind"]["burner"] >= 0.4  # sampled: its last instants may fall between
    assert figures["cpu_seconds_by_kind"]["root"] >= 0.25
    assert figures["between_samples_cpu_seconds"] >= -0.02
    assert (
        abs(
            sum(figures["cpu_seconds_by_kind"].values())
            + figures["between_samples_cpu_seconds"]
            - figures["total_cpu_seconds"]
        )
        < 0.02
    )


def test_a_command_name_with_spaces_and_parentheses_is_read_right() -> None:
    fields = ["S", "41", *["0"] * 9, "150", "50", "30", "20", *["0"] * 30]
    stat = parse_stat(42, "42 (python (run) x) " + " ".join(fields))
    assert (stat.pid, stat.ppid) == (42, 41)
    assert stat.reaped_children > 0
    assert stat.own == 4 * stat.reaped_children  # utime + stime (200 ticks), cutime + cstime (50)


def test_the_processes_of_pipeline_ui_are_told_apart_by_their_command_line() -> None:
    python = "/work/.venv/bin/python"
    assert process_kind(f"{python} -m pipeline_defs.runtime.daemon run -w workspace.yaml") == "daemon"
    assert process_kind(f"{python} -m pipeline_defs.runtime.webserver -h 127.0.0.1 -p 3000") == "webserver"
    assert process_kind(f"{python} -m dagster api grpc --lazy-load-user-code --port 4000") == "code server"
    assert (
        process_kind(f'{python} -m dagster api execute_run {{"job_name": "x", "api grpc": 1}}')
        == "run worker"
    )
    assert process_kind(f"{python} -m pipeline_defs.cli.main ui --port 3000") == "dagster dev (pipeline ui)"


def test_a_code_servers_multiprocessing_child_is_a_run_worker_and_its_helpers_stay_code_server() -> None:
    """Dagster's code server starts each run as a `multiprocessing` child, whose command line names no
    run: counted as the code server's, the runs' CPU would hide in the code server's."""
    lines = {
        1: "python -m pipeline_defs.cli.main ui --port 3000",
        2: "python -m dagster api grpc --lazy-load-user-code",
        3: "python -B -c from multiprocessing.spawn import spawn_main; spawn_main() --multiprocessing-fork",
        4: "python -B -c from multiprocessing.resource_tracker import main;main(25)",
        5: "python -B -c from multiprocessing.spawn import spawn_main; spawn_main() --multiprocessing-fork",
    }
    own = {1: 1.0, 2: 1.0, 4: 0.0}  # the run (3) and its step (5) start later
    parents = {1: 0, 2: 1, 3: 2, 4: 2, 5: 3}

    def stats() -> dict[int, ProcStat]:
        return {pid: ProcStat(pid, parents[pid], own[pid], 0.0) for pid in own}

    tree = ProcessTreeCpu(1, read_stats=stats, command_line=lambda pid: lines[pid])
    tree.start_window()
    own.update({2: 1.5, 4: 0.1, 3: 0.5})
    tree.sample()
    own[5] = 2.0  # the multiprocess executor's step: the run's work
    tree.sample()
    tree.stop_window()
    figures = tree.figures()
    assert figures["cpu_seconds_by_kind"] == {
        "code server": 0.6,
        "dagster dev (pipeline ui)": 0.0,
        "run worker": 2.5,
    }
    assert figures["total_cpu_seconds"] == 3.1
    assert figures["processes_started_by_kind"] == {"run worker": 2}
    assert [(cpu, pid) for _, cpu, pid in figures["run_workers"]] == [(2.5, 3)]  # one run: process and step


def test_a_fork_of_the_code_servers_forkserver_is_a_run_worker_and_the_forkserver_code_server() -> None:
    """With runs forked (pipeline_defs/runtime/run_processes.py) each run is a child of the code server's
    forkserver, with the forkserver's own command line: the runs are run workers, the forkserver (idle
    but for the first import) the code server's."""
    forkserver = (
        "python -c from multiprocessing.forkserver import main; main(8, 9, ['pipeline_defs.definitions'])"
    )
    lines = {
        1: "python -m pipeline_defs.cli.main ui",
        2: "python -m dagster api grpc",
        3: forkserver,
        4: forkserver,
    }
    own = {1: 1.0, 2: 1.0, 3: 2.5}
    parents = {1: 0, 2: 1, 3: 2, 4: 3}

    def stats() -> dict[int, ProcStat]:
        return {pid: ProcStat(pid, parents[pid], own[pid], 0.0) for pid in own}

    tree = ProcessTreeCpu(1, read_stats=stats, command_line=lambda pid: lines[pid])
    tree.start_window()
    own[4] = 3.0  # a run forked in the window
    tree.sample()
    tree.stop_window()
    figures = tree.figures()
    assert figures["cpu_seconds_by_kind"]["run worker"] == 3.0
    assert figures["processes_started_by_kind"] == {"run worker": 1}
    assert [pid for _, _, pid in figures["run_workers"]] == [4]


def test_the_peak_memory_of_each_kind_is_its_largest_process() -> None:
    """A run worker that grew to 300 MB and exits shows 300 MB, not the small one beside it nor 0."""
    stats = {
        1: ProcStat(1, 0, 1.0, 0.0),
        2: ProcStat(2, 1, 1.0, 0.0),
        3: ProcStat(3, 1, 1.0, 0.0),
    }
    kinds = {1: "dagster dev (pipeline ui)", 2: "run worker", 3: "run worker"}
    peaks = {1: 50_000, 2: 100_000, 3: 307_200}
    tree = ProcessTreeCpu(
        1,
        classify=lambda line: line,
        read_stats=lambda: dict(stats),
        command_line=lambda pid: kinds[pid],
        read_peak_rss=lambda pid: peaks.get(pid, 0),
    )
    tree.start_window()
    tree.sample()
    del stats[3]  # the big worker exits: its peak stays counted
    peaks.pop(3)
    tree.stop_window()
    assert tree.figures()["peak_rss_mb_by_kind"] == {"dagster dev (pipeline ui)": 48.8, "run worker": 300.0}


def test_the_peak_memory_of_this_process_is_read_from_proc() -> None:
    from benchmarks.process_tree_cpu import read_peak_rss_kb

    usage_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
    assert abs(read_peak_rss_kb(os.getpid()) - usage_kb) <= usage_kb * 0.05
    assert read_peak_rss_kb(2**22 + 7) == 0  # no such process


def test_a_servers_cpu_counts_its_live_processes_and_the_ended_ones_it_reaped(tmp_path) -> None:  # noqa: ANN001
    from benchmarks.process_tree_cpu import server_cpu_seconds

    def process(pid: int, name: str, ppid: int, own_ticks: int, reaped_ticks: int) -> None:
        fields = ["S", str(ppid), *["0"] * 9, str(own_ticks), "0", str(reaped_ticks), "0", *["0"] * 30]
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(fields))

    process(10, "postgres", 1, 100, 300)  # the postmaster: its ended backends are in its reaped time
    process(11, "postgres", 10, 50, 0)  # a live backend
    process(12, "python", 1, 900, 900)  # not the server
    (tmp_path / "stat").write_text("btime 0\n")  # not a process
    ticks = os.sysconf("SC_CLK_TCK")
    assert server_cpu_seconds("postgres", tmp_path) == round(450 / ticks, 2)
    assert server_cpu_seconds("mysqld", tmp_path) is None
