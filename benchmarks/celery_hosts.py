"""The CPU a posting costs on the whole path with Celery workers against the single-host path.

    python -m benchmarks.celery_hosts [--postings 300] [--workers 2] [--out results/celery_hosts.json]

Runs the same real postings (SkillSpan, `real_postings`) twice, each on fresh PostgreSQL databases with a
simulated model server (benchmarks/simulated_ollama.py): once with `pipeline daemon` alone (the default
in-process executor: every step in the run's process), once with PIPELINE_EXECUTOR=celery and
`--workers` `pipeline worker` processes (RabbitMQ at 127.0.0.1:5672). Both on this machine: CPU
seconds do not care which host a process is on. Reports each configuration's CPU seconds (user +
system, every process of the daemon's and each worker's tree; the model server apart), per posting,
the ratio, each worker's postings by use case, and the wall time until every posting was current.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.daemon_throughput import postgres_databases, simulated_hosts
from benchmarks.process_tree_cpu import (
    become_subreaper,
    descendants,
    process_kind,
    read_all_stats,
    reap_orphans,
)
from benchmarks.report import shared_data_dir
from benchmarks.skillspan_postings import skillspan_pipeline_postings
from pipeline_defs.settings import PROJECT_ROOT, Settings

PIPELINE = str(Path(sys.executable).with_name("pipeline"))
BROKER_URL = "pyamqp://guest:guest@127.0.0.1:5672//"
FINISHED = re.compile(r"(\w+): finished: (\d+) done")
# the same limits in both configurations: a run per 25 postings, one run per work group at a time
LIMITS = {
    "PIPELINE_BATCH_SIZE": "25",
    "PIPELINE_RUN_CONTINUE_SECONDS": "0",
    "PIPELINE_SCRIPT_RUNS": "1",
    "PIPELINE_RUNS_PER_HOST": "1",
    "PIPELINE_JUDGE_SAMPLE": "0",
}
WORKER_SLOTS = 2
DONE_BOUND_SECONDS = 3600.0


def real_postings(count: int) -> list[dict[str, str]]:
    """`count` postings rebuilt from SkillSpan (train, then dev: 198 postings of 110-1,525 words); past
    those, the same texts again under new keys. Each title names its key, so no two prompts are alike."""
    data = shared_data_dir()
    texts = [  # the two splits number their postings alike: the split goes into the key
        {**row, "key": f"{row['key']}-{split}"}
        for split in ("train", "dev")
        for row in skillspan_pipeline_postings(data / "skillspan" / f"{split}.json")
    ]
    rows = []
    for index in range(count):
        source = texts[index % len(texts)]
        key = source["key"] if index < len(texts) else f"{source['key']}-again{index // len(texts)}"
        rows.append({"key": key, "title": f"Posting {key}", "description": source["description"]})
    return rows


def all_current(settings: Settings) -> bool:
    """Nothing pending, claimed or failed for any use case (what `pipeline status` shows)."""
    from appdb import discovery, reports
    from appdb.database import session_scope
    from pipeline_defs.catalog import declared_work

    with session_scope(settings.database_url) as session:
        for item in declared_work(settings):
            states = reports.work_state_counts(session, item.use_case.name)
            if states.get("claimed") or states.get("failed"):
                return False
            if discovery.find_pending_work(session, item.spec):
                return False
    return True


def tree_cpu_seconds(root: int) -> float:
    stats = read_all_stats()
    return sum(stats[pid].own + stats[pid].reaped_children for pid in descendants(root, stats))


def tree_breakdown(root: int) -> dict[str, float]:
    """Where a tree's CPU went, by process: the root's own, each live process below it by kind (a Celery
    worker's pool processes, the daemon's code server and run processes, ...), and what processes that
    ended left in their parents' reaped time."""
    stats = read_all_stats()
    found: Counter = Counter()
    for pid in descendants(root, stats):
        stat = stats[pid]
        kind = "root" if pid == root else _kind_of(pid, stat.name)
        found[kind] += stat.own
        found["ended processes (reaped)"] += stat.reaped_children
    return {kind: round(seconds, 1) for kind, seconds in found.most_common()}


def _kind_of(pid: int, name: str) -> str:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        command = name
    if " worker " in command:
        return "worker pool process"
    return process_kind(command) if process_kind(command) != "other" else f"other ({name})"


def postings_by_use_case(log: Path) -> dict[str, int]:
    done: Counter = Counter()
    for use_case, count in FINISHED.findall(log.read_text(errors="replace")):
        done[use_case] += int(count)
    return dict(done)


@contextmanager
def started(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    with log.open("w") as output:
        process = subprocess.Popen(
            command, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
                process.wait(timeout=30)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


def wait_for_text(log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {text!r} in {log} within {timeout} s")
        time.sleep(0.5)


def measure(rows: list[dict[str, str]], workers: int, admin_url: str, work: Path) -> dict[str, Any]:
    """One configuration: `workers` 0 is the single-host path."""
    work.mkdir(parents=True)
    postings = work / "postings.jsonl"
    postings.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tag = uuid.uuid4().hex[:8]
    queues = (f"bench-cpu-{tag}", f"bench-model-{tag}")
    with postgres_databases(admin_url, 2) as (app_url, dagster_url), simulated_hosts(1, 50, 4) as (server,):
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PIPELINE_", "DAGSTER_", "OLLAMA_"))},
            **LIMITS,
            "PYTHONPATH": str(PROJECT_ROOT),
            "PIPELINE_DATA_DIR": str(work / "data"),
            "DAGSTER_HOME": str(work / "data" / "dagster_home"),
            "PIPELINE_DATABASE_URL": app_url,
            "PIPELINE_DAGSTER_POSTGRES_URL": dagster_url.replace("postgresql://", "postgresql+psycopg2://"),
            "OLLAMA_HOST": server.url,  # type: ignore[attr-defined]
        }
        if workers:
            env.update(
                PIPELINE_EXECUTOR="celery",
                PIPELINE_CELERY_BROKER_URL=BROKER_URL,
                PIPELINE_CELERY_CPU_QUEUE=queues[0],
                PIPELINE_CELERY_MODEL_QUEUE=queues[1],
            )
        for command in (["migrate"], ["ingest", str(postings)]):
            subprocess.run([PIPELINE, *command], env=env, check=True, capture_output=True)
        settings = Settings.from_env(env)
        with ExitStack() as stack:
            worker_processes = {}
            for index in range(1, workers + 1):
                log = work / f"worker{index}.log"
                command = [PIPELINE, "worker", "--queue", queues[0], "--queue", queues[1]]
                command += ["--concurrency", str(WORKER_SLOTS), "--name", f"worker{index}"]
                worker_processes[f"worker{index}"] = (stack.enter_context(started(command, env, log)), log)
            for _, log in worker_processes.values():
                wait_for_text(log, " ready.", 300)
            reap_orphans()
            reaped_before = _reaped_cpu()
            begin = time.monotonic()
            daemon = stack.enter_context(started([PIPELINE, "daemon"], env, work / "daemon.log"))
            while not all_current(settings):
                if time.monotonic() - begin > DONE_BOUND_SECONDS:
                    raise TimeoutError(f"not every posting current within {DONE_BOUND_SECONDS:.0f} s")
                reap_orphans()
                time.sleep(2)
            seconds = time.monotonic() - begin
            reap_orphans()
            cpu = {"daemon": tree_cpu_seconds(daemon.pid)}
            cpu |= {name: tree_cpu_seconds(process.pid) for name, (process, _) in worker_processes.items()}
            breakdown = {"daemon": tree_breakdown(daemon.pid)}
            breakdown |= {name: tree_breakdown(proc.pid) for name, (proc, _) in worker_processes.items()}
            # a process orphaned by its parent is reparented here (a subreaper): its CPU left the trees
            started_here = {daemon.pid, server.pid} | {proc.pid for proc, _ in worker_processes.values()}  # type: ignore[attr-defined]
            cpu["orphans"] = _reaped_cpu() - reaped_before + _live_orphans_cpu(started_here)
        if workers:
            _delete_queues(list(queues))
    total = sum(cpu.values())
    return {
        "workers": workers,
        "postings": len(rows),
        "seconds_until_all_current": round(seconds, 1),
        "cpu_seconds": {name: round(value, 1) for name, value in cpu.items()},
        "cpu_seconds_by_process": breakdown,
        "cpu_seconds_total": round(total, 1),
        "cpu_seconds_a_posting": round(total / len(rows), 3),
        "postings_by_worker": {
            name: postings_by_use_case(log) for name, (_, log) in worker_processes.items()
        },
    }


def _reaped_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _live_orphans_cpu(started_here: set[int]) -> float:
    """CPU of processes reparented to this one (orphans still running), and what lies below them."""
    stats = read_all_stats()
    orphans = [pid for pid, stat in stats.items() if stat.ppid == os.getpid() and pid not in started_here]
    return sum(tree_cpu_seconds(pid) for pid in orphans)


def _delete_queues(names: list[str]) -> None:
    from kombu import Connection

    with Connection(BROKER_URL, connect_timeout=3) as connection:
        for name in names:
            connection.default_channel.queue_delete(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "results" / "celery_hosts.json")
    args = parser.parse_args(argv)
    rows = real_postings(args.postings)
    become_subreaper()  # an orphaned process's CPU is counted here, not lost to init
    with TemporaryDirectory(prefix="celery-hosts-") as folder:
        single = measure(rows, 0, args.postgres, Path(folder) / "single")
        spread = measure(rows, args.workers, args.postgres, Path(folder) / "celery")
    result = {
        "single_host": single,
        "celery": spread,
        "cpu_ratio": round(spread["cpu_seconds_total"] / single["cpu_seconds_total"], 3),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
