"""The daemon benchmark's accounting: the LLM calls the work needed, and what counts as a duplicate.

Since the default skills come from the CPU tagger (a chain of two script steps per posting) the
benchmark had counted two LLM calls per posting that no server ever saw, and every posting's two
chain steps as a duplicate answer (its efficiency printed 0.73 where 0.37 was true).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from appdb.database import dispose, migrate, session_scope
from appdb.interactions import record_interaction
from appdb.models import UseCaseOutput
from benchmarks.daemon_throughput import (
    _idle_table,
    _integrity,
    _output_latencies,
    _partial_ratio,
    llm_call_timeline,
    llm_run_ids,
    peak_overlap,
    run_worker_cpu_by_job,
    ui_env,
)


def _call(
    session,  # noqa: ANN001
    use_case: str,
    key: str,
    backend: str,
    step: str | None = None,
    visit: int = 1,
    **fields: object,
) -> None:
    record_interaction(
        session,
        **{
            "use_case": use_case,
            "use_case_version": "v1",
            "subject_key": key,
            "backend": backend,
            "model": "gemma3:270m" if backend != "script" else "tagger",
            "prompt": "p",
            "system_prompt": "",
            "options": {"chain": {"step": step, "visit": visit}} if step else {},
            "raw_response": "{}",
            "status": "ok",
            "source": "test",
            **fields,
        },
    )


def test_llm_calls_count_only_model_answers_and_chain_steps_are_not_duplicates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate(url)
    with session_scope(url) as session:
        for key in ("a", "b"):
            _call(session, "posting_summary", key, "ollama")
            _call(session, "posting_skills", key, "script", step="candidates")
            _call(session, "posting_skills", key, "script", step="final")
            _call(session, "skill_entities", key, "script")
        _call(session, "posting_summary", "a", "ollama")  # a second stored answer: a real duplicate
    try:
        figures = _integrity(url, postings=2)
    finally:
        dispose(url)
    assert figures["llm_use_cases"] == ["posting_summary"]
    assert figures["llm_calls_needed"] == 2  # the summaries; the tagger's and resolver's steps call no model
    assert figures["duplicate_outputs"] == 1


def test_entities_are_timed_against_their_own_postings_skills(tmp_path: Path) -> None:
    """How far skill entities trail skills: the first and last of each, and per posting (a posting's
    concepts against its own skills, not against the first skills of all)."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate(url)
    ingested = datetime(2026, 11, 27, 12, 0, 0)
    stored = {
        ("posting_skills", "a"): 2.0,
        ("posting_skills", "b"): 3.0,
        ("skill_entities", "a"): 10.0,
        ("skill_entities", "b"): 4.0,
        ("posting_summary", "a"): 1.0,
    }
    with session_scope(url) as session:
        for (use_case, key), seconds in stored.items():
            at = ingested + timedelta(seconds=seconds)
            session.add(
                UseCaseOutput(
                    use_case=use_case,
                    subject_key=key,
                    value={},
                    model="m",
                    backend="script",
                    use_case_version="v1",
                    input_hash="h",
                    subject_hash="s",
                    created_at=at,
                    updated_at=at,
                )
            )
    try:
        figures = _output_latencies(url, ingested.replace(tzinfo=UTC).timestamp())
    finally:
        dispose(url)
    assert figures["output_span_by_use_case"]["skill_entities"] == {"first_s": 4.0, "last_s": 10.0}
    assert figures["trailing_upstream"]["skill_entities"] == {
        "upstream": "posting_skills",
        "first_behind_first_s": 2.0,
        "last_behind_last_s": 7.0,
        "per_posting_median_s": 8.0,
        "per_posting_max_s": 8.0,
        # where in the run the lag built up: both skills were stored in the first 10 s
        "per_posting_by_upstream_time": [
            {"upstream_from_s": 0.0, "postings": 2, "median_s": 8.0, "max_s": 8.0}
        ],
    }


def test_each_run_takes_the_run_worker_process_started_just_before_it() -> None:
    """A run worker's CPU goes to its run's job: a process's command line names no run, and Dagster
    stamps a run's start only after its process has loaded the code location."""
    workers = [[100.0, 3.0], [101.0, 4.0], [150.0, 5.0], [300.0, 1.0]]
    runs = [
        {"jobName": "summary", "startTime": 102.5},
        {"jobName": "skills", "startTime": 103.0},
        {"jobName": "summary", "startTime": 152.0},
        {"jobName": "startup", "startTime": 50.0},  # before any worker of the window: none of them
        {"jobName": "queued", "startTime": None},
    ]
    assert run_worker_cpu_by_job(workers, runs) == {
        "summary": {"runs": 2, "cpu_seconds": 9.0},
        "skills": {"runs": 1, "cpu_seconds": 3.0},
        "(no run matched)": {"runs": 1, "cpu_seconds": 1.0},
    }


def test_a_run_that_recorded_its_process_takes_that_process_whatever_the_start_times_say() -> None:
    """Runs started seconds apart load the code at different speeds: matched by start alone, the
    tagger's run worker went to a summary run. A heartbeat's pid settles it; others still go by time."""
    workers = [[100.0, 3.0, 11], [101.0, 40.0, 12], [150.0, 5.0, 13]]
    runs = [
        {"runId": "a", "jobName": "summary", "startTime": 102.5},
        {"runId": "b", "jobName": "skills", "startTime": 103.0},
        {"runId": "c", "jobName": "summary", "startTime": 152.0},  # no heartbeat: by its start
    ]
    assert run_worker_cpu_by_job(workers, runs, {"a": 11, "b": 12}) == {
        "summary": {"runs": 2, "cpu_seconds": 8.0},
        "skills": {"runs": 1, "cpu_seconds": 40.0},
    }
    assert run_worker_cpu_by_job(workers, runs)["skills"] == {"runs": 1, "cpu_seconds": 3.0}  # by time


def test_a_run_cut_short_is_compared_with_the_floor_of_the_outputs_it_made() -> None:
    """Summaries ran far ahead of the skills in the cut-short 100,000-posting run: dividing by
    outputs / 3 postings charged the slow skills' floor for work never done, and printed 2.37 where
    the path had cost 5.2 times the floor of what it made."""
    result = {
        "cpu": {"total_cpu_seconds": 300.0},
        "outputs_by_use_case": {"posting_summary": 8_000, "posting_skills": 1_000, "skill_entities": 1_000},
        "floor": {
            "postings": 100,
            "by_use_case": {
                "posting_summary": {"cpu_seconds": 0.3},  # 3 ms a posting
                "posting_skills": {"cpu_seconds": 3.0},  # 30 ms a posting
                "skill_entities": {"cpu_seconds": 0.2},
            },
        },
    }
    figures = _partial_ratio(result)
    assert figures["floor_cpu_seconds_for_outputs_made"] == 8_000 * 0.003 + 1_000 * 0.03 + 1_000 * 0.002
    assert figures["ratio_to_floor"] == round(300.0 / 56.0, 2)


def test_the_cpu_window_waits_for_a_tables_run_that_read_every_output(monkeypatch) -> None:  # noqa: ANN001
    """The enriched postings tables are remade after the last output: that run is part of the path's
    cost. A tables run that started before every output was current does not count, nor one still
    going, nor the moment another run still goes."""
    from benchmarks.daemon_throughput import TABLES_JOB, Ui

    def run(job: str, start: float, end: float | None) -> dict:
        return {"jobName": job, "startTime": start, "endTime": end, "status": "SUCCESS" if end else "STARTED"}

    looks = iter(
        [
            [run(TABLES_JOB, 90, 95)],  # started before the last output (100): read only some
            [run(TABLES_JOB, 90, 95), run(TABLES_JOB, 110, None)],  # the one that counts, going
            [run(TABLES_JOB, 110, 118), run("gym_evaluation_job", 112, None)],  # another run going
            [run(TABLES_JOB, 110, 118), run("gym_evaluation_job", 112, 120)],
        ]
    )
    ui = Ui.__new__(Ui)  # no `pipeline ui`: only its runs, look by look
    ui.runs = lambda: next(looks)
    monkeypatch.setattr("benchmarks.daemon_throughput.time.sleep", lambda seconds: None)
    assert ui.wait_tables_made(since=100, timeout=60) == 118


def test_the_idle_cost_is_reported_per_minute_for_each_kind_of_process() -> None:
    idle = {
        "seconds": 120.0,
        "cpu_seconds": 9.0,
        "cpu_seconds_by_kind": {"code server": 6.0, "daemon": 3.0},
        "share_of_a_core": 0.075,
    }
    rows = [{"label": "head", "storage": "postgres", "idle": idle}, {"label": "no idle", "storage": "sqlite"}]
    table = _idle_table(rows).splitlines()
    assert "| code server | daemon | whole tree |" in table[3]
    assert table[5:] == ["| head | postgres | 120.0 | 3.0 | 1.5 | 4.5 | 0.075 |"]


def test_a_users_own_server_is_timed_from_the_calls_the_pipeline_recorded(tmp_path: Path) -> None:
    """`--own-server`: no simulated server to ask, so the calls' timeline, the runs that called the
    model (whatever the model's job is named) and the most calls in flight come from the interactions."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    migrate(url)
    start = datetime(2026, 12, 6, 3, 0, 0)  # stored naive, in UTC
    calls = [
        ("a", 0.0, 2.0, "run-1", "ok"),
        ("b", 1.0, 3.0, "run-1", "ok"),
        ("c", 2.5, 4.0, "run-2", "item_error"),  # answered, then blocked by a check: the server's work
        ("d", 4.0, 5.0, "run-2", "ok"),
    ]
    with session_scope(url) as session:
        for key, begin, end, run_id, status in calls:
            _call(
                session,
                "posting_summary",
                key,
                "openai",
                status=status,
                run_id=run_id,
                latency_ms=(end - begin) * 1000,
                finished_at=start + timedelta(seconds=end),  # as the answer came; the row is stored later
            )
        # the tagger's answer: no model call, not on the server's timeline
        _call(session, "posting_skills", "a", "script", run_id="run-3", latency_ms=9000.0, finished_at=start)
    try:
        timeline = llm_call_timeline(url)
        runs = llm_run_ids(url)
    finally:
        dispose(url)
    epoch = start.replace(tzinfo=UTC).timestamp()
    assert [(round(b - epoch, 3), round(e - epoch, 3)) for b, e in timeline] == [
        (0.0, 2.0),
        (1.0, 3.0),
        (2.5, 4.0),
        (4.0, 5.0),
    ]
    assert runs == {"run-1", "run-2"}
    assert peak_overlap(timeline) == 2  # a and b, then b and c, in flight together; d starts as c ends


def test_own_server_mode_passes_the_shells_server_settings_but_keeps_the_benchmarks_databases(
    tmp_path: Path, monkeypatch
) -> None:  # noqa: ANN001
    monkeypatch.setenv("OLLAMA_HOST", "http://gpu-box:11434")
    monkeypatch.setenv("PIPELINE_MODEL", "llama3.1:8b")
    monkeypatch.setenv("PIPELINE_DATABASE_URL", "postgresql://prod/app")
    monkeypatch.setenv("PIPELINE_DAGSTER_POSTGRES_URL", "postgresql://prod/dagster")
    monkeypatch.setenv("DAGSTER_HOME", "/srv/dagster")
    own = ui_env(tmp_path, tmp_path, "sqlite:///bench.db", None, None, 16)
    simulated = ui_env(tmp_path, tmp_path, "sqlite:///bench.db", None, "http://127.0.0.1:9", 16)
    assert own["OLLAMA_HOST"] == "http://gpu-box:11434" and own["PIPELINE_MODEL"] == "llama3.1:8b"
    assert "PIPELINE_LLM_BACKEND" not in own  # the shell's server decides its backend
    assert simulated["OLLAMA_HOST"] == "http://127.0.0.1:9" and "PIPELINE_MODEL" not in simulated
    for env in (own, simulated):
        assert env["PIPELINE_DATABASE_URL"] == "sqlite:///bench.db"
        assert "PIPELINE_DAGSTER_POSTGRES_URL" not in env
        assert env["DAGSTER_HOME"] == str(tmp_path / "dagster_home")
        assert Path(env["PIPELINE_CONFIG"]).read_text() == ""  # no user config file's databases
