"""A stand-in for one pipeline run, as a separate process: find, claim, "generate", record, complete.

The concurrency and crash-recovery tests start several of these at once (or kill one)
to show that the real claim protocol in `appdb/claims.py` holds across processes: it
goes through the same calls, with one transaction per step, as `assets/batch_run.py` and `appdb/claims.py`.
The generation is fake (optionally slow), so the test measures the work state, not a model.
Claims pass the use case's WorkSpec, so discovery is asked again as each claim is taken.

    python tests/support/claim_worker.py --url URL --use-case posting_summary --worker-id w1 --chunk 20 \\
        [--sleep-per-item 0.1] [--lease-seconds 3] [--start-file PATH]

The last line printed is a JSON summary: worker, claimed, completed, lost_claims,
contended_claims (claims that found their items already taken by another worker).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import select

from appdb import claims, discovery, interactions, retry_policy
from appdb.database import migrate, session_scope
from appdb.models import utcnow
from plugins.postings.store.postings_kind import POSTINGS_TABLE
from plugins.postings.store.tables import Posting

USE_CASE_VERSION = "2026-11-22.1"
BACKEND = "fake"
MODEL = "fake-model"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="application database URL")
    parser.add_argument("--use-case", required=True)
    parser.add_argument("--worker-id", required=True, help="used as the run id of claims and interactions")
    parser.add_argument("--chunk", type=int, default=20, help="postings claimed at a time")
    parser.add_argument("--sleep-per-item", type=float, default=0.0, help="seconds of fake generation")
    parser.add_argument("--lease-seconds", type=int, default=retry_policy.DEFAULT_RETRY_POLICY.lease_seconds)
    parser.add_argument(
        "--start-file",
        type=Path,
        help="announce readiness next to this file, then wait until it exists (a start line for races)",
    )
    return parser.parse_args(argv)


def ready_file(start_file: Path, worker_id: str) -> Path:
    return start_file.with_name(f"{start_file.name}.{worker_id}.ready")


def wait_at_start_line(start_file: Path, worker_id: str, limit_seconds: float = 120.0) -> None:
    """Say this worker is ready, then block until the start file exists, so all workers race together."""
    ready_file(start_file, worker_id).touch()
    deadline = time.monotonic() + limit_seconds
    while not start_file.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"start file {start_file} never appeared")
        time.sleep(0.005)


def run(args: argparse.Namespace) -> dict[str, object]:
    """Process pending work until none is left that this worker can claim."""
    spec = discovery.WorkSpec(
        use_case=args.use_case, version=USE_CASE_VERSION, upstream_versions={}, subjects=POSTINGS_TABLE
    )
    claimed = completed = lost = contended = 0
    migrate(args.url)  # before the start line, so the race is about claims, not schema checks
    if args.start_file is not None:
        wait_at_start_line(args.start_file, args.worker_id)
    while True:
        with session_scope(args.url) as session:
            pending = discovery.find_pending_work(session, spec)
        if not pending:
            break
        wanted = pending[: args.chunk]
        with session_scope(args.url) as session:  # committed on leaving the block: others see the claim
            held = claims.claim_items(
                session,
                args.use_case,
                wanted,
                args.worker_id,
                policy=retry_policy.RetryPolicy(lease_seconds=args.lease_seconds),
                spec=spec,
            )
        claimed += len(held)
        if len(held) < len(wanted):
            contended += 1
        if not held:
            continue  # another worker got there first; look again
        with session_scope(args.url) as session:
            hashes = dict(
                session.execute(select(Posting.key, Posting.content_hash).where(Posting.key.in_(held))).all()
            )
        remaining = list(held)
        last_renewal = time.monotonic()
        for key in held:
            if time.monotonic() - last_renewal > args.lease_seconds / 3:
                with session_scope(args.url) as session:
                    claims.renew_claims(
                        session,
                        args.use_case,
                        remaining,
                        args.worker_id,
                        retry_policy.RetryPolicy(lease_seconds=args.lease_seconds),
                    )
                last_renewal = time.monotonic()
            if args.sleep_per_item:
                time.sleep(args.sleep_per_item)
            if store(args, key, hashes[key]):
                completed += 1
            else:
                lost += 1
            remaining.remove(key)
    return {
        "worker": args.worker_id,
        "claimed": claimed,
        "completed": completed,
        "lost_claims": lost,
        "contended_claims": contended,
    }


def store(args: argparse.Namespace, key: str, subject_hash: str) -> bool:
    """Record the interaction and the output in one transaction, as the asset does; False if claim lost."""
    summary = {"summary": f"Summary of {key} by {args.worker_id}."}
    with session_scope(args.url) as session:
        interaction_id = interactions.record_interaction(
            session,
            use_case=args.use_case,
            use_case_version=USE_CASE_VERSION,
            subject_key=key,
            backend=BACKEND,
            model=MODEL,
            prompt=f"Summarize {key}",
            system_prompt="",
            options={},
            raw_response=json.dumps(summary),
            parsed_output=summary,
            prompt_tokens=3,
            completion_tokens=8,
            latency_ms=args.sleep_per_item * 1000,
            status="ok",
            error=None,
            source="test",
            run_id=args.worker_id,
            finished_at=utcnow(),
        )
        return claims.complete_item(
            session,
            args.use_case,
            key,
            args.worker_id,
            {
                "value": summary,
                "model": MODEL,
                "backend": BACKEND,
                "use_case_version": USE_CASE_VERSION,
                "input_hash": key,
                "subject_hash": subject_hash,
                "interaction_id": interaction_id,
            },
        )


# --- for the tests that start workers ---------------------------------------------------------


def start_worker(url: str, use_case: str, worker_id: str, *options: str) -> subprocess.Popen[str]:
    """Start one worker process; `options` are extra command-line flags."""
    command = [sys.executable, str(Path(__file__).resolve()), "--url", url, "--use-case", use_case]
    command += ["--worker-id", worker_id, *options]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_together(
    url: str,
    use_case: str,
    worker_ids: list[str],
    start_file: Path,
    *options: str,
    limit_seconds: float = 120.0,
) -> list[subprocess.Popen[str]]:
    """Start workers and release them at once, after every one has imported and checked the schema."""
    workers = [
        start_worker(url, use_case, worker_id, "--start-file", str(start_file), *options)
        for worker_id in worker_ids
    ]
    deadline = time.monotonic() + limit_seconds
    while not all(ready_file(start_file, worker_id).exists() for worker_id in worker_ids):
        if any(worker.poll() is not None for worker in workers) or time.monotonic() > deadline:
            for worker in workers:
                worker.kill()
            outputs = [worker.communicate() for worker in workers]
            raise RuntimeError(f"a worker did not get ready: {outputs}")
        time.sleep(0.01)
    start_file.touch()
    return workers


def finish(worker: subprocess.Popen[str], limit_seconds: float = 300.0) -> dict[str, Any]:
    """Wait for a worker; returns its JSON summary (raises with its stderr if it failed)."""
    out, err = worker.communicate(timeout=limit_seconds)
    if worker.returncode != 0:
        raise RuntimeError(f"worker exited with {worker.returncode}:\n{err}")
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    summary = run(parse_args(argv))
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
