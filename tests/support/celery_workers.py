"""Celery workers (`pipeline worker`) and a broker for the tests of PIPELINE_EXECUTOR=celery: RabbitMQ as
the machine runs it (127.0.0.1:5672, guest/guest), queues named per test so that tests (and engineers)
sharing the broker never take each other's steps."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline_defs.settings import PROJECT_ROOT

BROKER_URL = os.environ.get("PIPELINE_TEST_BROKER_URL", "pyamqp://guest:guest@127.0.0.1:5672//")
REQUIRE_BROKER = os.environ.get("PIPELINE_REQUIRE_RABBITMQ") == "1"
WORKER_READY_SECONDS = (
    120.0  # the code location loads before the worker connects (~4 s idle, more on a busy machine)
)
PIPELINE = PROJECT_ROOT / ".venv" / "bin" / "pipeline"


def broker_unavailable_reason(url: str = BROKER_URL) -> str | None:
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as exc:  # the transport's own error
        return f"RabbitMQ not reachable at {url}: {exc}"
    return None


def require_broker() -> str:
    reason = broker_unavailable_reason()
    if reason:
        if REQUIRE_BROKER:
            pytest.fail(f"{reason} (PIPELINE_REQUIRE_RABBITMQ=1, so the Celery tests must run)")
        pytest.skip(reason)
    return BROKER_URL


def queue_names(prefix: str) -> tuple[str, str]:
    """A CPU and a model queue of this test's own."""
    tag = f"{os.environ.get('PIPELINE_TEST_DATABASE_PREFIX', 'pipeline_test')}-{uuid.uuid4().hex[:8]}"
    return f"{prefix}-cpu-{tag}", f"{prefix}-model-{tag}"


def delete_queues(names: list[str], url: str = BROKER_URL) -> None:
    """Leave nothing behind in the shared broker."""
    from kombu import Connection

    with Connection(url, connect_timeout=3) as connection:
        channel = connection.default_channel
        for name in names:
            channel.queue_delete(name)


@contextmanager
def worker(
    env: Mapping[str, str], queue: str, name: str, log: Path, *, prefix: list[str] | None = None
) -> Iterator[subprocess.Popen]:
    """`pipeline worker --queue QUEUE --name NAME --concurrency 1`, ready (connected) when entered; stopped
    with its process group when left. `prefix`: a command to start it under (`ip netns exec ...`)."""
    command = [
        *(prefix or []),
        str(PIPELINE),
        "worker",
        "--queue",
        queue,
        "--name",
        name,
        "--concurrency",
        "1",
    ]
    with log.open("w") as output:
        process = subprocess.Popen(
            command, env=dict(env), stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for_line(process, log, " ready.", WORKER_READY_SECONDS)
        yield process
    finally:
        stop_group(process)


def wait_for_line(process: subprocess.Popen, log: Path, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"exited {process.returncode}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def stop_group(process: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM (Celery's warm shutdown), then SIGKILL whatever of the group is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.poll()
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
