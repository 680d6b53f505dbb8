"""The throughput benchmarks measure real postings: SkillSpan's rebuilt from the shared data (the
PIPELINE_SHARED_DATA setting), cycled and each made unique, or a user's own file; the 8-word postings
they measured before issue 61 only when asked for. And the simulated model server takes a GPU's time
for a prompt's and an answer's tokens, so a long posting costs the server what it would cost a model."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from benchmarks import daemon_throughput
from benchmarks.simulated_ollama import GPU_7B, NO_TOKENS, TokenRates, serve

WORDS = [
    "Design",
    "and",
    "maintain",
    "data",
    "pipelines",
    "in",
    "Python",
    "and",
    "SQL",
    "for",
    "the",
    "analytics",
    "team",
]


def _shared_data(root: Path, postings: int = 3, sentences: int = 40) -> Path:
    """A shared data folder with a SkillSpan train split of `postings` postings of `sentences` sentences."""
    folder = root / "skillspan"
    folder.mkdir(parents=True)
    lines = []
    for idx in range(postings):
        for number in range(sentences):
            tokens = [f"Posting{idx}", f"line{number}", *WORDS]
            lines.append(
                json.dumps(
                    {
                        "idx": idx,
                        "source": "tech" if idx % 2 else "house",
                        "tokens": tokens,
                        "tags_skill": ["O"] * len(tokens),
                        "tags_knowledge": ["O"] * len(tokens),
                    }
                )
            )
    (folder / "train.json").write_text("\n".join(lines) + "\n")
    return root


def test_the_daemon_benchmark_takes_real_postings_from_the_shared_data_setting_cycled_and_unique(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPELINE_SHARED_DATA", str(_shared_data(tmp_path / "shared")))
    args = daemon_throughput.options(["--postings", "7"])
    rows = args.rows
    assert len(rows) == 7
    assert len({row["key"] for row in rows}) == 7
    assert len({row["description"] for row in rows}) == 7  # copies of 3 postings, each its own text
    assert all(len(row["description"].split()) > 500 for row in rows)  # whole postings, not sentences
    assert rows[0]["description"].startswith("Posting0 line0")  # sentences grouped by (source, idx)
    assert "Posting1" not in rows[0]["description"]
    assert rows[3]["description"].startswith("Posting0 line0")  # cycled
    assert args.rates == GPU_7B  # a 7-8B model's time on a GPU, not a fixed latency
    assert args.latency_ms == 0


def test_tiny_postings_and_a_fixed_latency_only_when_asked_for(tmp_path: Path) -> None:
    args = daemon_throughput.options(["--postings", "3", "--posting-set", "tiny"])
    assert all(len(row["description"].split()) < 10 for row in args.rows)
    assert args.rates == NO_TOKENS
    assert args.latency_ms == 100


def test_a_users_postings_file_is_cycled_and_a_bad_line_is_named(tmp_path: Path) -> None:
    own = tmp_path / "own.jsonl"
    own.write_text(json.dumps({"key": "a", "title": "Nurse", "description": "Care for patients."}) + "\n")
    args = daemon_throughput.options(["--postings", "2", "--postings-file", str(own)])
    assert [row["title"] for row in args.rows] == ["Nurse", "Nurse"]
    assert args.rows[0]["description"] != args.rows[1]["description"]
    own.write_text('{"key": "a", "title": "Nurse"}\n')
    with pytest.raises(SystemExit):
        daemon_throughput.options(["--postings", "2", "--postings-file", str(own)])


def test_pipeline_throughput_times_the_runs_store_step_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make bench`'s first command failed at once: it wrapped a function the runs no longer have."""
    from dagster import DagsterInstance

    import assets.single_call as single_call
    from appdb import claims, discovery
    from benchmarks.throughput_harness import instrument
    from resources.llm import LLMResource

    for owner, name in [
        (DagsterInstance, "handle_new_event"),
        (DagsterInstance, "create_run"),
        (single_call, "_store_group"),
        (LLMResource, "generate"),
        (discovery, "find_pending_work"),
        (claims, "claim_items"),
    ]:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, getattr(owner, name))  # put back after the test
    timers = instrument()
    assert timers.figures == {}


def _generate(url: str, prompt: str) -> dict:
    body = json.dumps({"model": "gemma3:270m", "prompt": prompt, "stream": False}).encode()
    request = urllib.request.Request(
        f"{url}/api/generate", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_the_simulated_servers_time_grows_with_the_prompts_and_answers_tokens() -> None:
    rates = TokenRates(
        prefill_tokens_per_second=20_000, decode_tokens_per_second=2_000, min_output_tokens=100
    )
    server = serve("127.0.0.1", 0, latency_ms=0, parallel=2, rates=rates)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        short = _generate(url, "Posting: Nurse.")
        long = _generate(url, "Posting: " + "Care for patients on the ward. " * 400)  # ~3,000 tokens
        with urllib.request.urlopen(f"{url}/stats", timeout=10) as response:
            stats = json.loads(response.read())
    finally:
        server.shutdown()
        server.server_close()
    assert long["prompt_eval_count"] > 2_500 > short["prompt_eval_count"]
    # a sleep never ends early: each call took at least its tokens' time (answers decoded as >= 100)
    assert short["total_duration"] >= 100 / 2_000 * 1e9
    assert long["total_duration"] >= (long["prompt_eval_count"] / 20_000 + 100 / 2_000) * 1e9
    prefill = (short["prompt_eval_count"] + long["prompt_eval_count"]) / 20_000
    assert stats["model_seconds"] == pytest.approx(prefill + 2 * 100 / 2_000, abs=0.002)
    # one prompt at a time on the GPU, the answers decoded in both slots at once: the prompts set the pace
    assert stats["least_seconds"] == pytest.approx(max(prefill, (prefill + 0.1) / 2), abs=0.002)
