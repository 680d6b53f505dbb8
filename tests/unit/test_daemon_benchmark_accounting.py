"""The daemon benchmark's accounting: the LLM calls the work needed, and what counts as a duplicate.

Since the default skills come from the CPU tagger (a chain of two script steps per posting) the
benchmark had counted two LLM calls per posting that no server ever saw, and every posting's two
chain steps as a duplicate answer (its efficiency printed 0.73 where 0.37 was true).
"""

from __future__ import annotations

from pathlib import Path

from appdb.database import dispose, migrate, session_scope
from appdb.interactions import record_interaction
from benchmarks.daemon_throughput import _integrity


def _call(session, use_case: str, key: str, backend: str, step: str | None = None, visit: int = 1) -> None:  # noqa: ANN001
    record_interaction(
        session,
        use_case=use_case,
        use_case_version="v1",
        subject_key=key,
        backend=backend,
        model="gemma3:270m" if backend != "script" else "tagger",
        prompt="p",
        system_prompt="",
        options={"chain": {"step": step, "visit": visit}} if step else {},
        raw_response="{}",
        status="ok",
        source="test",
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
