"""The pacer across processes: four worker processes share one bucket in the database and, together,
never get more than `burst + rate * T` grants in any window (plus the scheduler's wake-up jitter)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.pacer_rate import measure, run_workers

RATE, BURST, WORKERS, PER_WORKER = 20.0, 5.0, 4, 10


@pytest.mark.parametrize("engine", [pytest.param("postgresql", marks=pytest.mark.postgres), "sqlite"])
def test_processes_sharing_a_bucket_stay_under_its_rate(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = request.getfixturevalue("postgres_url" if engine == "postgresql" else "sqlite_url")
    scheduled, woke = run_workers(
        url, rate=RATE, burst=BURST, workers=WORKERS, per_worker=PER_WORKER, work_dir=tmp_path, bucket="test"
    )
    figures = measure(scheduled, rate=RATE, burst=BURST)
    assert figures["grants"] == WORKERS * PER_WORKER
    # The shared bucket's schedule holds exactly; the measured rate is never above the setting (and, with four
    # workers keeping the bucket busy, not far below it even on a loaded machine).
    assert figures["worst_window_excess"] <= 1e-6, figures
    assert figures["measured_rate_after_burst"] <= RATE * (1 + 1e-6), figures
    assert figures["measured_rate_after_burst"] >= RATE * 0.5, figures
    # Nobody went before its turn: each worker woke at or after its scheduled time.
    assert all(w >= s - 1e-3 for s, w in zip(scheduled, woke, strict=True))
