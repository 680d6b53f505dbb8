"""`pipeline run` on real postings, its CPU a posting by stage: one command, as a user runs the pipeline.

    python -m benchmarks.pipeline_run_cpu [--split dev] [--postings-file FILE] [--limit N] [--data-dir D]
        [--taxonomy CSV] [--parallel 4] [--prefill-tokens-per-second N] [--decode-tokens-per-second N]
        [--min-output-tokens N] [--latency-ms MS] [--own-server] [--encoder-precision fp32|int8]
        [--label NAME]

SkillSpan's dev postings (58, rebuilt from the shared data as `benchmarks.skillspan_postings` writes them
for the gym; `--postings-file` your own JSON lines) are ingested into a fresh database with ESCO as the
taxonomy (`--taxonomy`, default `esco/skills_en_v1.1.1.csv` of the shared data) and `pipeline run` does
every use case (summary by the model server; skills and skill entities by the CPU tagger and linker)
against a simulated Ollama (`benchmarks.simulated_ollama` with a 7-8B model's token rates on one GPU,
`--parallel` slots), judge off; `--own-server` against the model server this shell configures
(OLLAMA_HOST / PIPELINE_LLM_HOSTS / PIPELINE_OPENAI_BASE_URL and the models: docs/configuration.md).

Before the measured run, an unmeasured one on one short posting loads the taxonomy into the database and
builds its label vectors, kept between invocations in `--vector-cache` (keyed by the taxonomy and the
encoder's version, as the pipeline keys them), so the figure is a user's second run: label vectors
cached. Measured: the CPU (user + system) of the `pipeline run` process and its children, from its start
to its exit, a posting; by stage (`benchmarks/stage_cpu.py`): the tagger, the linker, the faithfulness
check, the orchestration (the rest: start-up, Dagster, the database, prompts, the LLM client); the model
server's generation time a posting and its least wall time a posting at its slots; and the cores that keep
those slots busy (CPU a posting x the server's postings a second). JSON and markdown go to
results/pipeline_run_cpu.{json,md}; each invocation adds a row (before and after in one table).

Comparing two trees: empty the sentence-vector store (`$XDG_CACHE_HOME/posting-enrichment/
sentence-vectors.sqlite`) before each invocation. It keeps the vectors of the postings' sentences and
mentions for the machine's processes, keyed by the encoder's version, so a run after another on the same
postings reads them instead of encoding (seen 2026-12-07: 86b717f's tagger stage 0.68 CPU s a posting on
an empty store, 0.48 after other runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

RESULTS_NAME = "pipeline_run_cpu"
WARM_UP_POSTING = {
    "key": "warm-up-00000",
    "title": "Data Analyst",
    "description": "Analyse turbine data with Python and SQL; report weekly to the operations team.",
}


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _pipeline(env: dict[str, str], *command: str) -> str:
    """One `pipeline` command in the benchmark's environment: its output, or an error with it."""
    done = subprocess.run(
        [sys.executable, "-m", "pipeline_defs.cli.main", *command], env=env, capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(
            f"`pipeline {' '.join(command)}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def _server(url: str, path: str, method: str = "GET") -> dict[str, Any]:
    request = urllib.request.Request(url + path, method=method, data=b"{}" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _vector_cache(arg: Path | None) -> Path:
    """Where label vectors are kept between invocations: `--vector-cache`, else under the cache setting."""
    if arg is not None:
        return arg
    from pipeline_defs.settings import Settings

    return Settings.from_env().cache_dir / "posting-enrichment" / "benchmark-embedding-cache"


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, then time `pipeline run` over the postings; the row of the report."""
    from benchmarks.daemon_throughput import simulated_hosts, ui_env
    from benchmarks.stage_cpu import FAITHFULNESS, LINKER, ORCHESTRATION, TAGGER, cores_to_keep_busy
    from pipeline_defs.settings import PROJECT_ROOT

    with (
        tempfile.TemporaryDirectory(prefix="pipeline-run-bench-") as tmp,
        simulated_hosts(
            0 if args.own_server else 1, args.latency_ms, args.parallel, rates=args.rates
        ) as hosts,
    ):
        work = Path(tmp)
        host = hosts[0].url if hosts else None
        env = ui_env(PROJECT_ROOT, work, f"sqlite:///{work / 'app.db'}", None, host, args.parallel)
        env["PIPELINE_TAXONOMY_PATH"] = str(args.taxonomy)
        if args.encoder_precision:
            env["PIPELINE_ENCODER_PRECISION"] = args.encoder_precision
        (work / "data").mkdir()
        args.vector_cache.mkdir(parents=True, exist_ok=True)
        (work / "data" / "embedding_cache").symlink_to(args.vector_cache, target_is_directory=True)
        _pipeline(env, "migrate")
        print("warm-up: the taxonomy loaded, its label vectors built or read from the cache ...", flush=True)
        warm_cpu = _children_cpu_seconds()
        _pipeline(env, "ingest", str(_write_jsonl(work / "warm-up.jsonl", [WARM_UP_POSTING])))
        _pipeline(env, "run")
        warm_cpu = _children_cpu_seconds() - warm_cpu
        _pipeline(env, "ingest", str(_write_jsonl(work / "postings.jsonl", args.rows)))
        if host:
            _server(host, "/stats/reset", "POST")
        print(f"pipeline run: {len(args.rows)} postings ...", flush=True)
        stages_file = work / "stages.json"
        cpu_before, started = _children_cpu_seconds(), time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.pipeline_run_cpu", "--worker", str(stages_file)],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        )
        seconds, cpu = time.perf_counter() - started, _children_cpu_seconds() - cpu_before
        if done.returncode:
            raise RuntimeError(f"`pipeline run` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        server = _server(host, "/stats") if host else {}
        stage_seconds = json.loads(stages_file.read_text())
        outputs = _outputs(f"sqlite:///{work / 'app.db'}")
    postings = len(args.rows)
    per_posting = cpu / postings
    stages = {
        name: round(stage_seconds.get(name, 0.0) / postings, 4) for name in (TAGGER, LINKER, FAITHFULNESS)
    }
    stages[ORCHESTRATION] = round(per_posting - sum(stages.values()), 4)
    row: dict[str, Any] = {
        "label": args.label,
        "postings": postings,
        "posting_texts": args.posting_texts,
        "taxonomy": str(args.taxonomy),
        "encoder_precision": args.encoder_precision or "default",
        "server": "own"
        if args.own_server
        else {"slots": args.parallel, "latency_ms": args.latency_ms, **dataclasses.asdict(args.rates)},
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "cpu_seconds_per_posting": round(per_posting, 4),
        "cpu_seconds_per_posting_by_stage": stages,
        "warm_up_cpu_seconds": round(warm_cpu, 1),
        "outputs": outputs,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "printed": done.stdout.strip().splitlines()[-6:],
    }
    if server.get("least_seconds"):
        least = server["least_seconds"] / postings
        row.update(
            model_server_seconds_per_posting=round(server["model_seconds"] / postings, 4),
            model_server_least_seconds_per_posting=round(least, 4),
            cores_to_keep_the_slots_busy=cores_to_keep_busy(per_posting, least),
            server_tokens={"prompt": server["prompt_tokens"], "output": server["output_tokens"]},
        )
    return row


def _outputs(app_url: str) -> dict[str, int]:
    """Current outputs of the measured postings by use case (every posting should have one of each)."""
    from sqlalchemy import create_engine, func, select

    from appdb.models import UseCaseOutput

    engine = create_engine(app_url)
    try:
        with engine.connect() as conn:
            return dict(
                conn.execute(
                    select(UseCaseOutput.use_case, func.count())
                    .where(UseCaseOutput.subject_key != WARM_UP_POSTING["key"])
                    .group_by(UseCaseOutput.use_case)
                ).all()
            )
    finally:
        engine.dispose()


def worker(stages_file: Path) -> int:
    """`pipeline run` in this process with its stages timed; their CPU seconds written to `stages_file`."""
    from benchmarks.stage_cpu import StageCpu, stages_timed
    from pipeline_defs.cli.main import main as pipeline

    cpu = StageCpu()
    with stages_timed(cpu):
        code = pipeline(["run", "--progress", "never"])
    stages_file.write_text(json.dumps(cpu.seconds))
    return code


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# `pipeline run` on real postings: CPU seconds a posting, by stage",
        "",
        "Each row one invocation of `python -m benchmarks.pipeline_run_cpu`: a fresh database, the "
        "taxonomy's label vectors cached, every use case; the CPU of the whole `pipeline run` process.",
        "",
        "| label | postings (texts) | server | run s | CPU s | **CPU s/posting** | tagger | linker "
        "| faithfulness check | orchestration | server s/posting | least wall s/posting "
        "| cores to keep it busy | outputs | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        stages, texts, server = row["cpu_seconds_per_posting_by_stage"], row["posting_texts"], row["server"]
        served = (
            "own"
            if server == "own"
            else f"{server['slots']} slots, {server['prefill_tokens_per_second']:g} / "
            f"{server['decode_tokens_per_second']:g} tokens/s"
        )
        lines.append(
            f"| {row['label']} | {row['postings']} ({texts['source']}, {texts['mean_words']} words) "
            f"| {served} "
            f"| {row['seconds']} | {row['cpu_seconds']} | **{row['cpu_seconds_per_posting']}** | "
            + " | ".join(str(value) for value in stages.values())
            + f" | {row.get('model_server_seconds_per_posting', '-')} | "
            f"{row.get('model_server_least_seconds_per_posting', '-')} | "
            f"{row.get('cores_to_keep_the_slots_busy', '-')} | "
            f"{', '.join(f'{name} {count}' for name, count in sorted(row['outputs'].items()))} | "
            f"{' '.join(str(x) for x in row['load_average'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker(Path(argv[1]))
    from benchmarks.report import shared_data_dir, write_report
    from benchmarks.simulated_ollama import GPU_7B
    from benchmarks.skillspan_postings import (
        describe,
        read_postings_file,
        skillspan_pipeline_postings,
        skillspan_source,
    )

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", default="dev", choices=["dev", "train"], help="SkillSpan's split")
    parser.add_argument(
        "--postings-file", type=Path, help="your own postings (JSON lines: key, title, description)"
    )
    parser.add_argument("--limit", type=int, help="only the first N postings")
    parser.add_argument("--data-dir", help="the shared data folder (else the PIPELINE_SHARED_DATA setting)")
    parser.add_argument("--taxonomy", type=Path, help="the taxonomy CSV (default: ESCO in the shared data)")
    parser.add_argument("--parallel", type=int, default=4, help="the simulated server's slots")
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="a request's fixed time, beside its tokens'"
    )
    parser.add_argument("--prefill-tokens-per-second", type=float, default=GPU_7B.prefill_tokens_per_second)
    parser.add_argument("--decode-tokens-per-second", type=float, default=GPU_7B.decode_tokens_per_second)
    parser.add_argument("--min-output-tokens", type=int, default=GPU_7B.min_output_tokens)
    parser.add_argument(
        "--own-server",
        action="store_true",
        help="the model server this shell configures, not a simulated one",
    )
    parser.add_argument("--vector-cache", type=Path, help="label vectors kept between invocations")
    parser.add_argument(
        "--encoder-precision",
        choices=["fp32", "int8"],
        help="PIPELINE_ENCODER_PRECISION for the run (default: the setting's default)",
    )
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--name", default=RESULTS_NAME, help="report name in results/")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        if args.postings_file:
            args.rows = read_postings_file(args.postings_file)[: args.limit]
        else:
            args.rows = skillspan_pipeline_postings(skillspan_source(args.split, args.data_dir), args.limit)
        if args.taxonomy is None:
            args.taxonomy = shared_data_dir(args.data_dir) / "esco" / "skills_en_v1.1.1.csv"
        if not args.taxonomy.is_file():
            raise FileNotFoundError(f"no taxonomy at {args.taxonomy}")
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    from benchmarks.simulated_ollama import TokenRates

    args.rates = TokenRates(
        args.prefill_tokens_per_second, args.decode_tokens_per_second, args.min_output_tokens
    )
    args.vector_cache = _vector_cache(args.vector_cache)
    args.posting_texts = describe(args.rows, f"SkillSpan {args.split}", args.postings_file)
    row = measure(args)
    print(json.dumps(row, indent=1), flush=True)
    from pipeline_defs.settings import PROJECT_ROOT

    out = args.out or PROJECT_ROOT / "results"
    existing = out / f"{args.name}.json"
    rows = json.loads(existing.read_text())["results"]["rows"] if existing.exists() else []
    rows.append(row)
    _, markdown_path = write_report(args.name, {"rows": rows}, markdown(rows), out)
    print(markdown_path.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
