"""One look of the liveness reaper from a separate process, as a second host or container would take it.

    python tests/support/reap_once.py URL [--clock-ahead SECONDS]

`--clock-ahead` injects a host clock that runs that many seconds ahead: Python's `time.time` and
`datetime.now`/`utcnow` are moved before any project module is imported (the database's own clock, a
PostgreSQL server's or SQLite's C library's, is not). The reaper runs with an ephemeral Dagster
instance; the last line printed is the JSON list of the run ids it reaped.
"""

from __future__ import annotations

import argparse
import datetime as _datetime
import json
import sys
import time
from pathlib import Path


def _clock_ahead(seconds: float) -> None:
    """Every Python-level wall clock `seconds` ahead: `time.time` and `datetime.datetime.now/utcnow`."""
    real_time, real_datetime = time.time, _datetime.datetime

    class AheadDatetime(real_datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: ANN001, ANN206
            return real_datetime.now(tz) + _datetime.timedelta(seconds=seconds)

        @classmethod
        def utcnow(cls):  # noqa: ANN206
            return real_datetime.now(_datetime.UTC).replace(tzinfo=None) + _datetime.timedelta(
                seconds=seconds
            )

    time.time = lambda: real_time() + seconds
    _datetime.datetime = AheadDatetime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--clock-ahead", type=float, default=0.0)
    parser.add_argument("--dead-after", type=float, default=60.0)
    args = parser.parse_args()
    if args.clock_ahead:
        _clock_ahead(args.clock_ahead)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from dagster import DagsterInstance

    from resources.app_database import AppDatabase
    from sensors.run_liveness import reap_dead_runs

    with DagsterInstance.ephemeral() as instance:
        reaped = reap_dead_runs(instance, AppDatabase(url=args.url), args.dead_after)
    print(json.dumps([run.run_id for run in reaped]))


if __name__ == "__main__":
    main()
