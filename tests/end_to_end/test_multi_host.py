"""Past one machine, on this machine: the daemon on one host, two Celery workers on two others, a
simulated model server on a fourth (network namespaces, tests/support/netns.py), PostgreSQL and RabbitMQ
as they run here (reached through a forwarder: they listen on loopback only). Real postings
(SkillSpan) go end to end with PIPELINE_EXECUTOR=celery; when a third of the tagging is done, one worker
host is cut off (its interface down, its processes left running) in the middle of a step.

What must hold: every posting current at the end, none lost, no model call answered twice (counted by
the model server itself), and the time from the loss until every posting is current (reported, with
each host's share of the steps and its CPU; `-s` shows the report).

Marked `multi_host`: needs root and `ip netns` (CI runs as root); elsewhere it skips saying why, unless
PIPELINE_REQUIRE_NETNS=1. PIPELINE_MULTI_HOST_POSTINGS sets the number of postings: 100 by default
(about 130-240 CPU s in all, 5-12 minutes on a loaded 2-core machine); 300 took 8 minutes and 322 CPU s
on 2026-12-08 and holds up to 86 PostgreSQL connections (docs/results-log.md)."""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url

from benchmarks.celery_hosts import real_postings
from benchmarks.process_tree_cpu import descendants, read_all_stats
from benchmarks.report import shared_data_dir
from pipeline_defs.settings import PROJECT_ROOT, Settings
from tests.support.celery_workers import (
    PIPELINE,
    delete_queues,
    queue_names,
    require_broker,
    wait_for_line,
)
from tests.support.netns import netns_unavailable_reason, network

pytestmark = [pytest.mark.multi_host, pytest.mark.postgres]

POSTINGS = int(os.environ.get("PIPELINE_MULTI_HOST_POSTINGS", "100"))
PYTHON = str(PROJECT_ROOT / ".venv" / "bin" / "python")
MODEL_PORT = 11434
CUT_AFTER_SHARE = 1 / 3  # of the postings tagged when the worker host is cut off
DONE_BOUND_SECONDS = 1800.0  # the whole run on 2 shared cores: a bound against a hang, not a target
RECOVERY_TARGET_SECONDS = 60.0  # the issue's: every posting current within this long after the loss
FINISHED = re.compile(r"(\w+): finished: (\d+) done")
BATCH_RUN = re.compile(r"(\w+)_batch_job - ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) - ")
SCRIPT_GROUPS = ("posting_skills", "skill_entities")
# steps at once on each worker host: the 3 runs at once (a summary's, a tagger's, a linker's) fit on one
# host after the loss too (a step waiting in the broker's queue is no harm: its run's own process beats,
# docs/liveness.md; the slots keep the lost step's redelivery from waiting for a free one)
WORKER_SLOTS = 3


def require_netns() -> None:
    reason = netns_unavailable_reason()
    if reason:
        if os.environ.get("PIPELINE_REQUIRE_NETNS") == "1":
            pytest.fail(f"{reason} (PIPELINE_REQUIRE_NETNS=1)")
        pytest.skip(f"multi-host test: {reason}")


@dataclass
class Progress:
    pending: dict[str, int]
    claimed: dict[str, int]
    failed: dict[str, int]

    @property
    def all_current(self) -> bool:
        return (
            not any(self.pending.values())
            and not any(self.claimed.values())
            and not any(self.failed.values())
        )


def progress(settings: Settings) -> Progress:
    """What `pipeline status` shows, read in this process."""
    from appdb import discovery, reports
    from appdb.database import session_scope
    from pipeline_defs.catalog import declared_work

    pending, claimed, failed = {}, {}, {}
    with session_scope(settings.database_url) as session:
        for item in declared_work(settings):
            name = item.use_case.name
            states = reports.work_state_counts(session, name)
            pending[name] = len(discovery.find_pending_work(session, item.spec))
            claimed[name], failed[name] = states.get("claimed", 0), states.get("failed", 0)
    return Progress(pending, claimed, failed)


def wait_for(done: Callable[[], bool], timeout: float, what: str, every: float = 1.0) -> float:
    start = time.monotonic()
    while not done():
        assert time.monotonic() - start < timeout, f"{what} not within {timeout:.0f} s"
        time.sleep(every)
    return time.monotonic() - start


def tree_cpu_seconds(root: int) -> float:
    """CPU (user + system) of a process and everything below it, reaped children included."""
    stats = read_all_stats()
    return sum(stats[pid].own + stats[pid].reaped_children for pid in descendants(root, stats))


def steps_by_use_case(log: Path) -> Counter:
    """Postings each use case's steps finished on a worker, from its log."""
    done: Counter = Counter()
    for use_case, count in FINISHED.findall(log.read_text(errors="replace")):
        done[use_case] += int(count)
    return done


def host_url(url: str, gateway: str) -> str:
    """A database URL of this machine as another host reaches it: through the forwarder."""
    return make_url(url).set(host=gateway).render_as_string(hide_password=False)


def test_a_worker_host_lost_mid_run_loses_nothing_and_answers_nothing_twice(
    postgres_database: Callable[[], str], tmp_path: Path
) -> None:
    require_netns()
    require_broker()
    skillspan = shared_data_dir() / "skillspan" / "train.json"
    if not skillspan.is_file():  # CI lays shared/ beside the clone; a clone elsewhere may have none
        pytest.skip(f"multi-host test: its real postings come from {skillspan} (PIPELINE_SHARED_DATA)")
    app_url, dagster_url = postgres_database(), postgres_database()
    queues = queue_names("multihost")
    rows = real_postings(POSTINGS)
    postings_file = tmp_path / "postings.jsonl"
    postings_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    calls = tmp_path / "model-calls.jsonl"
    report: dict[str, Any] = {"postings": len(rows)}

    with network(["daemon", "worker1", "worker2", "model"]) as net:
        gateway, model = net.gateway, net.hosts["model"].address
        net.forward(5432, "127.0.0.1:5432", tmp_path / "forward-postgres.log")
        net.forward(5672, "127.0.0.1:5672", tmp_path / "forward-rabbitmq.log")
        base = {
            **{name: os.environ[name] for name in ("PATH", "LANG", "LC_ALL") if name in os.environ},
            "PYTHONPATH": str(PROJECT_ROOT),
            "PIPELINE_EXECUTOR": "celery",
            "PIPELINE_CELERY_BROKER_URL": f"pyamqp://guest:guest@{gateway}:5672//",
            "PIPELINE_CELERY_CPU_QUEUE": queues[0],
            "PIPELINE_CELERY_MODEL_QUEUE": queues[1],
            "PIPELINE_DATABASE_URL": host_url(app_url, gateway),
            "PIPELINE_DAGSTER_POSTGRES_URL": host_url(dagster_url, gateway),
            "OLLAMA_HOST": f"http://{model}:{MODEL_PORT}",
            "PIPELINE_JUDGE_SAMPLE": "0",
            "PIPELINE_BATCH_SIZE": "25",  # a run per 25 postings, so the steps spread over both workers
            "PIPELINE_RUN_CONTINUE_SECONDS": "0",
            # runs at once (a tagger's, a linker's, a summary's) within the workers' slots
            "PIPELINE_SCRIPT_RUNS": "1",
            "PIPELINE_RUNS_PER_HOST": "1",
            "PIPELINE_HEARTBEAT_SECONDS": "4",  # a lost host's step is declared dead within 5 beats
        }

        def env_on(host: str) -> dict[str, str]:
            return {**base, "HOME": str(tmp_path / host), "PIPELINE_DATA_DIR": str(tmp_path / host / "data")}

        # the machine itself (the operator): the schema and the postings, through loopback
        here = {
            **env_on("operator"),
            "PIPELINE_DATABASE_URL": app_url,
            "PIPELINE_DAGSTER_POSTGRES_URL": dagster_url,
        }
        settings = Settings.from_env(here)
        for command in (["migrate"], ["ingest", str(postings_file)]):
            done = net.start(None, [str(PIPELINE), *command], here, tmp_path / f"{command[0]}.log").wait(300)
            assert done == 0, (tmp_path / f"{command[0]}.log").read_text()[-3000:]

        server = [PYTHON, "-m", "tests.support.counting_ollama", "--host", model, "--port", str(MODEL_PORT)]
        server += ["--latency-ms", "50", "--parallel", "4", "--calls", str(calls)]
        model_log = tmp_path / "model.log"
        wait_for_line(net.start("model", server, env_on("model"), model_log), model_log, "http://", 60)
        workers = {}
        for name in ("worker1", "worker2"):
            log = tmp_path / f"{name}.log"
            queue_options = ["--queue", queues[0], "--queue", queues[1]]
            command = [str(PIPELINE), "worker", *queue_options, "--concurrency", str(WORKER_SLOTS)]
            workers[name] = (net.start(name, command, env_on(name), log), log)
        for process, log in workers.values():
            wait_for_line(process, log, " ready.", 180)
        daemon = net.start("daemon", [str(PIPELINE), "daemon"], env_on("daemon"), tmp_path / "daemon.log")

        try:
            tagged = lambda: done_count(app_url, "posting_skills")  # noqa: E731
            started = time.monotonic()
            wait_for(lambda: tagged() >= len(rows) * CUT_AFTER_SHARE, DONE_BOUND_SECONDS, "a third tagged", 2)
            _, lost_log = workers["worker1"]
            # in a script step alone and holding its claims (a step that only began has none yet: cut
            # then, nothing of the host is lost and the recovery measured would be nothing)
            wait_for(
                lambda: _mid_cpu_step_only(lost_log) and bool(lost_claims(app_url, lost_log)),
                600,
                "worker1 in a script step alone, holding claims",
                0.5,
            )
            net.hosts["worker1"].cut_off()
            cut = time.monotonic()
            lost = lost_claims(app_url, lost_log)
            report["cut_after_seconds"] = round(cut - started, 1)
            report["at_the_cut"] = progress(settings).__dict__
            report["claims_on_the_lost_host"] = len(lost)
            wait_for(lambda: not not_done(app_url, lost), DONE_BOUND_SECONDS, "the lost host's postings", 1)
            report["lost_hosts_postings_current_after_seconds"] = round(time.monotonic() - cut, 1)
            wait_for(lambda: progress(settings).all_current, DONE_BOUND_SECONDS, "every posting current", 2)
            report["every_posting_current_after_seconds"] = round(time.monotonic() - cut, 1)
            report["cpu_seconds"] = {
                "daemon": round(tree_cpu_seconds(daemon.pid), 1),
                **{name: round(tree_cpu_seconds(process.pid), 1) for name, (process, _) in workers.items()},
            }
        finally:
            delete_queues(list(queues))
        report["postings_done_by_host"] = {
            name: dict(steps_by_use_case(log)) for name, (_, log) in workers.items()
        }

    final = progress(settings)
    answered = Counter(json.loads(line)["prompt"] for line in calls.read_text().splitlines())
    report["model_calls"] = sum(answered.values())
    report["duplicate_model_calls"] = sum(count - 1 for count in answered.values() if count > 1)
    print("\nmulti-host report: " + json.dumps(report, indent=2))
    assert final.all_current, f"not every posting current: {final}"
    assert report["claims_on_the_lost_host"], f"the cut came when the lost host held nothing: {report}"
    assert report["duplicate_model_calls"] == 0, report
    assert all(report["postings_done_by_host"][name] for name in workers), f"a worker host idle: {report}"


def _mid_cpu_step_only(log: Path) -> bool:
    """The worker is in the middle of a script step (the tagger, the linker) and of no other: no model
    call of its is in flight. A step is under way from its run's first line until its `finished` line."""
    lines = log.read_text(errors="replace").splitlines()
    jobs = {run: job for line in lines for job, run in BATCH_RUN.findall(line)}
    finished = {run for line in lines if FINISHED.search(line) for _, run in BATCH_RUN.findall(line)}
    under_way = {run: job for run, job in jobs.items() if run not in finished}
    return bool(under_way) and all(job in SCRIPT_GROUPS for job in under_way.values())


def lost_claims(app_url: str, worker_log: Path) -> list[tuple[str, str]]:
    """(use case, posting) claimed by the runs whose steps the worker took."""
    runs = {run for _, run in BATCH_RUN.findall(worker_log.read_text(errors="replace"))}
    with connect(app_url) as connection:
        claimed = connection.execute(
            text("SELECT use_case, subject_key, claimed_by FROM work_items WHERE status = 'claimed'")
        ).all()
    return [(use_case, key) for use_case, key, run in claimed if run in runs]


def done_count(app_url: str, use_case: str) -> int:
    with connect(app_url) as connection:
        query = "SELECT count(*) FROM work_items WHERE use_case = :use_case AND status = 'done'"
        return connection.execute(text(query), {"use_case": use_case}).scalar_one()


def not_done(app_url: str, items: list[tuple[str, str]]) -> int:
    """How many of the items have no current output yet."""
    if not items:
        return 0
    with connect(app_url) as connection:
        done = connection.execute(
            text("SELECT use_case, subject_key FROM work_items WHERE status = 'done'")
        ).all()
    return len(set(items) - {tuple(row) for row in done})


@contextmanager
def connect(url: str) -> Iterator[Connection]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()
