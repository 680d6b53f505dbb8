"""Dagster's runtime, reshaped: its storages and home, the daemon that wakes when work arrives, the webserver
behind the request guard, the code server's forked runs and kept sensor instance, the executors and the
Celery worker. Each module reaches into Dagster somewhere and names the canary test that pins that place
(`tests/unit/test_dagster_runtime_swaps.py`, `test_dagster_private_api.py`, ...), so an upgrade that moves
it fails there. The location (`definitions`, `catalog`, `wiring`, `model_choice`, `settings`) sits above."""
