"""The daemon benchmark's floor: the same work as the path (a summary from the server, the tagger's
skills, the resolver's concepts) done in one plain loop, so its CPU per posting is what the path's is
compared with. A floor that skipped a use case, or failed its postings, would flatter nothing and
mislead everyone: every posting must come out of every use case."""

from __future__ import annotations

from pathlib import Path

from appdb.database import dispose, migrate, session_scope
from benchmarks.daemon_throughput import USE_CASES, plain_loop_floor, simulated_hosts
from benchmarks.skillspan_postings import tiny_postings
from plugins.postings.store.taxonomy import DEMO_TAXONOMY_PATH, load_taxonomy


def test_the_floor_does_every_use_case_for_every_posting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate(url)
    with session_scope(url) as session:
        load_taxonomy(session, DEMO_TAXONOMY_PATH)
    rows = tiny_postings(4)
    try:
        with simulated_hosts(1, latency_ms=1, parallel=2) as hosts:
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(Path.home()),
                "PIPELINE_DATA_DIR": str(tmp_path / "data"),
                "PIPELINE_DATABASE_URL": url,
                "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                "PIPELINE_LLM_BACKEND": "ollama",
                "OLLAMA_HOST": hosts[0].url,
                "OLLAMA_NUM_PARALLEL": "2",
                "PIPELINE_JUDGE_SAMPLE": "0",
            }
            floor = plain_loop_floor(env, rows, url)
            served = hosts[0]
            assert served.poll() is None
    finally:
        dispose(url)
    assert set(floor["by_use_case"]) == set(USE_CASES)
    assert {name: entry["failed"] for name, entry in floor["by_use_case"].items()} == dict.fromkeys(
        USE_CASES, 0
    )
    assert floor["cpu_seconds_per_posting"] > 0
