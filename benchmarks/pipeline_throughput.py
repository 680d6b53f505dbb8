"""Pipeline throughput against its physical limit, orchestration overhead, and discovery at scale.

    python -m benchmarks.pipeline_throughput [--postings 200] [--backend simulated-ollama,embedded]
        [--dagster-storage sqlite|postgres|both] [--in-flight 1,2,4] [--scale-postings 100000]
        [--posting-set skillspan|tiny] [--postings-file FILE] [--prefill-tokens-per-second N] ...

For each backend and Dagster storage it measures, in a fresh process, fresh application
database and fresh DAGSTER_HOME each time (see `benchmarks.throughput_harness`):

- the *raw* backend time: the pipeline's own prompts for the postings, straight to the
  backend in a plain loop (the physical limit);
- the *pipeline*: the work group's discovery sensor evaluated tick after tick, and the
  runs it requests executed, until no work remains;
- efficiency = raw time / pipeline time; orchestration overhead = (pipeline wall time -
  time inside LLM calls) / (postings x assets); runs; model loads per run; peak memory.

The postings (`benchmarks/skillspan_postings.py`): real ones by default, SkillSpan's train
postings from the shared data (`--shared`, else the PIPELINE_SHARED_DATA setting) cycled and
each made unique; `--postings-file` your own JSON lines; `--posting-set tiny` 8-word postings.
With `simulated-ollama` the backend is `benchmarks.simulated_ollama`: Ollama's API and
`--parallel` slots, each request's time a 7-8B model's on one GPU with real postings (prompt
and answer tokens at `--prefill-tokens-per-second` and `--decode-tokens-per-second`,
`simulated_ollama.GPU_7B`), a fixed `--latency-ms` (default 100) with tiny ones; its figures
are *simulated*: the model's time is a stand-in, the CPU around it is real. Each row gives the
CPU a posting of the measured group's use cases, the faithfulness check's share of it, the
model server's time a posting and the cores that keep its slots busy. With more than
one value in `--in-flight` it also shows how throughput changes with the requests kept
in flight. `embedded` is the real Gemma 3 270M on this CPU (seconds per posting, so it
runs on `--embedded-postings`, default 10, and a raw loop runs before and after each
pipeline, which is compared with their mean, because the model's speed follows the CPU
other processes leave).

Discovery at scale (`benchmarks.discovery_scale`): sensor tick time with
`--scale-postings` postings (about 10% pending) and the query plans of every statement
a tick sends. JSON and markdown go to results/pipeline_throughput.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks.report import SHARED_DATA_ENV, shared_data_dir, write_report
from benchmarks.simulated_ollama import GPU_7B, NO_TOKENS, TokenRates, server_arguments
from benchmarks.skillspan_postings import (
    TINY,
    add_posting_options,
    benchmark_postings,
    describe,
)
from benchmarks.stage_cpu import FAITHFULNESS, cores_to_keep_busy
from benchmarks.throughput_harness import DEFAULT_POSTGRES_ADMIN_URL, POSTGRES_ADMIN_ENV, RunConfig

NAME = "pipeline_throughput"
SIMULATED = "simulated-ollama"
EMBEDDED = "embedded"
TARGET_OVERHEAD_MS = {"postgres": 10.0, "sqlite": 20.0}
TARGET_EFFICIENCY_EMBEDDED = 0.95
TARGET_TICK_SECONDS = 1.0


def _worker(module: str, config: dict[str, Any], extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one measurement in a fresh Python process; its last stdout line is the result JSON."""
    env = {**os.environ, **(extra_env or {})}
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")])
    )
    completed = subprocess.run(
        [sys.executable, "-m", module, json.dumps(config)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        raise RuntimeError(f"{module} failed (exit {completed.returncode}):\n{completed.stderr[-4000:]}")
    return json.loads(lines[-1])


@contextmanager
def simulated_ollama(latency_ms: float, parallel: int, rates: TokenRates = NO_TOKENS) -> Iterator[str]:
    """Start the simulated Ollama server in its own process (so it takes no GIL from the pipeline)."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.simulated_ollama",
            "--port",
            "0",
            *server_arguments(latency_ms, rates),
            "--parallel",
            str(parallel),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError("the simulated Ollama server did not start")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _server(url: str, path: str, method: str = "GET") -> dict[str, Any]:
    request = urllib.request.Request(url + path, method=method, data=b"{}" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def measure_backend(
    args: argparse.Namespace, backend: str, shared: str | None, on_row: Any = None
) -> list[dict[str, Any]]:
    """Raw and pipeline measurements for one backend: every storage, every in-flight value, and
    (simulated backend) one more batch size with one request in flight."""
    postings = args.embedded_postings if backend == EMBEDDED else args.postings
    plan = [(in_flight, args.batch_size) for in_flight in ([1] if backend == EMBEDDED else args.in_flight)]
    if backend == SIMULATED and args.also_batch_size:
        plan.append((1, args.also_batch_size))
    rows = []
    raws: dict[int, dict[str, Any]] = {}
    with (
        simulated_ollama(args.latency_ms, args.parallel, args.rates) if backend == SIMULATED else _nothing()
    ) as url:
        for in_flight, batch_size in plan:
            base = {
                "backend": backend,
                "postings": postings,
                "in_flight": in_flight,
                "batch_size": batch_size,
                "ollama_host": url,
                "shared": shared,
                "posting_set": args.posting_set,
                "postings_file": str(args.postings_file) if args.postings_file else None,
                "postgres_admin_url": args.postgres_admin_url,
                "env": dict(args.env),
            }
            if in_flight not in raws:
                _progress(f"{backend}: raw backend loop, {postings} postings, {in_flight} in flight ...")
                raws[in_flight] = _measured(url, {**base, "mode": "raw"})
            for storage in args.storages:
                app_db = storage if args.app_db == "same" else args.app_db
                _progress(
                    f"{backend}: pipeline, Dagster storage {storage}, app db {app_db}, "
                    f"{in_flight} in flight, batch size {batch_size or 'declared'} ..."
                )
                profile = (
                    str(Path(args.out) / f"profile-{backend}-{storage}-{in_flight}-{batch_size}.prof")
                    if args.profile
                    else None
                )
                pipeline = _measured(
                    url,
                    {
                        **base,
                        "mode": "pipeline",
                        "storage": storage,
                        "app_db": app_db,
                        "profile_path": profile,
                    },
                )
                if backend == EMBEDDED:
                    # The embedded model gets the CPU other processes leave it, which drifts on a shared
                    # machine: each pipeline is compared with the mean of the raw loops just before and
                    # just after it (raw, pipeline, raw, pipeline, raw).
                    _progress(f"{backend}: raw backend loop again, {postings} postings ...")
                    after = _measured(url, {**base, "mode": "raw"})
                    rows.append(summarize(_mean_raw(raws[in_flight], after), pipeline))
                    raws[in_flight] = after
                else:
                    rows.append(summarize(raws[in_flight], pipeline))
                _progress("  " + _row_line(rows[-1]))
                if on_row:
                    on_row(rows[-1])
    return rows


def _mean_raw(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Two raw loops on the same prompts as one: their mean time, both times kept."""
    raw = {**before, "seconds": (before["seconds"] + after["seconds"]) / 2}
    raw["cpu_seconds"] = (before["cpu_seconds"] + after["cpu_seconds"]) / 2
    raw["llm_seconds"] = (before["llm_seconds"] + after["llm_seconds"]) / 2
    raw["runs_seconds"] = [before["seconds"], after["seconds"]]
    return raw


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def _measured(url: str | None, config: dict[str, Any]) -> dict[str, Any]:
    if url:
        _server(url, "/stats/reset", "POST")
    result = _worker("benchmarks.throughput_harness", asdict(RunConfig(**config)))
    if url:
        result["server"] = _server(url, "/stats")
    return result


def summarize(raw: dict[str, Any], pipeline: dict[str, Any]) -> dict[str, Any]:
    """One results row: the pipeline beside its physical limit."""
    config = pipeline["config"]
    items = pipeline["postings"] * pipeline["assets"]
    overhead_ms = (pipeline["seconds"] - pipeline["llm_seconds"]) * 1000 / items
    # The judge's calls are work the raw loop does not do: efficiency compares the same work, so
    # their time (they are made one at a time, whatever the in-flight setting) is taken out of the
    # pipeline's, and reported on its own.
    product_seconds = pipeline["seconds"] - pipeline.get("judge_llm_seconds", 0.0)
    allowed_runs = math.ceil(pipeline["postings"] / pipeline["batch_size"])
    return {
        "backend": config["backend"],
        "simulated": config["backend"] == SIMULATED,
        "dagster_storage": config["storage"],
        "app_db": config["app_db"],
        "postings": pipeline["postings"],
        "assets": pipeline["assets"],
        "in_flight": config["in_flight"],
        "batch_size": pipeline["batch_size"],
        "config_batch_size": config["batch_size"],
        "raw_seconds": raw["seconds"],
        "raw_llm_seconds": raw["llm_seconds"],
        "pipeline_seconds": pipeline["seconds"],
        "pipeline_llm_seconds": pipeline["llm_seconds"],
        "efficiency": raw["seconds"] / product_seconds,
        "efficiency_judge_counted": raw["seconds"] / pipeline["seconds"],
        "judge_seconds": pipeline.get("judge_llm_seconds", 0.0),
        "judge_calls": pipeline.get("judge_calls", 0),
        # The share of the pipeline's wall time spent inside LLM calls: the efficiency measured within
        # one run, so immune to the backend's speed drifting between the raw loop and the pipeline.
        "busy_share": pipeline["llm_seconds"] / pipeline["seconds"] if config["in_flight"] == 1 else None,
        "item_errors": pipeline["item_errors"],
        # With several requests in flight LLM time overlaps, so wall minus LLM time means nothing:
        # the overhead is then measured against the raw loop with the same requests in flight.
        "overhead_ms_per_posting_asset": overhead_ms if config["in_flight"] == 1 else None,
        "overhead_vs_raw_ms_per_posting_asset": (product_seconds - raw["seconds"]) * 1000 / items,
        # CPU time of the pipeline process beyond the raw loop's (the same client calls): what the
        # orchestration costs on a quiet machine, whatever the contention during the run.
        "overhead_cpu_ms_per_posting_asset": (pipeline["cpu_seconds"] - raw["cpu_seconds"]) * 1000 / items,
        "postings_per_second": pipeline["postings"] / pipeline["seconds"],
        "raw_postings_per_second": raw["postings"] / raw["seconds"] if "postings" in raw else None,
        "runs": pipeline["runs"],
        "runs_allowed": allowed_runs,
        "failed_runs": pipeline["failed_runs"],
        "model_loads": pipeline["model_loads"],
        "max_loads_of_one_model_in_a_run": pipeline["max_loads_of_one_model_in_a_run"],
        "server_loads": pipeline.get("server", {}).get("loads"),
        "server_peak_concurrency": pipeline.get("server", {}).get("peak_concurrent_generations"),
        "work_items": pipeline["work_items"],
        "cpu": cpu_by_stage(raw, pipeline),
        "sensor_ticks": pipeline["sensor_ticks"],
        "peak_rss_mb": pipeline["peak_rss_mb"],
        "loadavg": [raw["loadavg_before"], pipeline["loadavg_before"], pipeline["loadavg_after"]],
        "raw": raw,
        "pipeline": pipeline,
    }


def cpu_by_stage(raw: dict[str, Any], pipeline: dict[str, Any]) -> dict[str, Any]:
    """The group's CPU a posting (the runs' process), the faithfulness check's and the scripts' shares,
    the orchestration beyond the raw loop's client calls, the model server's time a posting and the
    cores that keep it busy (its least wall time a posting at all its slots)."""
    postings = max(pipeline["postings"], 1)
    per_posting = pipeline["cpu_seconds"] / postings
    stages = {
        name: round(value / postings, 4) for name, value in pipeline.get("stage_cpu_seconds", {}).items()
    }
    server = pipeline.get("server") or {}
    figures: dict[str, Any] = {
        "use_cases": pipeline.get("use_cases"),
        "cpu_seconds_per_posting": round(per_posting, 4),
        "raw_loop_cpu_seconds_per_posting": round(
            raw["cpu_seconds"] / max(raw.get("postings", postings), 1), 4
        ),
        **{f"{name} cpu_seconds_per_posting": value for name, value in stages.items() if value},
        "orchestration_cpu_seconds_per_posting": round(
            per_posting - sum(stages.values()) - raw["cpu_seconds"] / max(raw.get("postings", postings), 1), 4
        ),
    }
    if server.get("least_seconds"):
        least = server["least_seconds"] / postings
        figures.update(
            model_server_seconds_per_posting=round(server["model_seconds"] / postings, 4),
            model_server_least_seconds_per_posting=round(least, 4),
            slots=server.get("parallel"),
            cores_to_keep_the_slots_busy=cores_to_keep_busy(per_posting, least),
        )
    return figures


def _busy(row: dict[str, Any]) -> str:
    return "" if row["busy_share"] is None else f" ({row['busy_share']:.3f})"


def _row_line(row: dict[str, Any]) -> str:
    overhead = row["overhead_ms_per_posting_asset"]
    return (
        f"raw {row['raw_seconds']:.1f}s, pipeline {row['pipeline_seconds']:.1f}s, "
        f"efficiency {row['efficiency']:.3f} (busy {row['busy_share'] or 0:.3f}), "
        f"overhead {'-' if overhead is None else f'{overhead:.1f}'} ms/posting/asset "
        f"(CPU {row['overhead_cpu_ms_per_posting_asset']:.1f}), "
        f"{row['runs']} runs, {row['model_loads']} loads, peak {row['peak_rss_mb']:.0f} MB"
    )


def measure_scale(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for engine in args.storages:
        _progress(f"discovery at scale: {args.scale_postings} postings on {engine} ...")
        config = {
            "engine": engine,
            "postings": args.scale_postings,
            "postgres_admin_url": args.postgres_admin_url,
            # SkillSpan's posting texts, cycled (or short lines with --demo-postings)
            "text_data_dir": None if args.demo_postings else str(shared_data_dir(args.shared)),
        }
        result = _worker("benchmarks.discovery_scale", config, dict(args.env))
        for name, figures in result["sensors"].items():
            _progress(
                f"  {name}: first {figures['first']['median_seconds']:.3f}s, steady "
                f"{figures['steady']['median_seconds']:.3f}s, idle {figures['idle']['median_seconds']:.3f}s"
            )
        results.append(result)
    return results


# --- report ------------------------------------------------------------------------------------


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Pipeline throughput and orchestration overhead",
        "",
        "Rows marked *simulated* ran against `benchmarks.simulated_ollama` (Ollama's API, "
        f"{_server_time(results['settings'])} a request, "
        f"{results['settings']['parallel']} parallel slots): "
        "the model's time is a stand-in, the CPU around it is real. `embedded` is Gemma 3 270M on this CPU. "
        f"Postings: {_postings_line(results['settings']['postings_source'])}.",
        "",
        "| backend | Dagster storage | app DB | postings | batch | in flight | raw s | pipeline s | "
        "efficiency (busy) | LLM s | judge s (calls) | overhead ms/posting/asset (CPU) | runs (max) | "
        "model loads (max per run) | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["pipeline"]:
        overhead = row["overhead_ms_per_posting_asset"]
        lines.append(
            f"| {row['backend']}{' (simulated)' if row['simulated'] else ''} | {row['dagster_storage']} | "
            f"{row['app_db']} | {row['postings']} | {row['batch_size']} | {row['in_flight']} | "
            f"{_raw_seconds(row)} | {row['pipeline_seconds']:.1f} | "
            f"{row['efficiency']:.3f}{_busy(row)} | "
            f"{row['pipeline_llm_seconds']:.1f} | {row['judge_seconds']:.1f} ({row['judge_calls']}) | "
            f"{'-' if overhead is None else f'{overhead:.1f}'} "
            f"({row['overhead_cpu_ms_per_posting_asset']:.1f}) | "
            f"{row['runs']} ({row['runs_allowed']}) | "
            f"{row['model_loads']} ({row['max_loads_of_one_model_in_a_run']}) | {row['peak_rss_mb']:.0f} |"
        )
    declared = results["settings"]["batch_size"]
    lines += [
        "",
        "Overhead = (pipeline wall time - time inside LLM calls) / (postings x assets). In brackets the "
        "pipeline process's CPU time beyond the raw loop's, per posting per asset: most of it runs while "
        "the next LLM request is in flight, so the wall-time overhead can be the smaller figure. "
        "Batch = postings per run: the use cases declare 25 (sized for the embedded model on a CPU); on "
        "Ollama runs hold at least 100 unless PIPELINE_BATCH_SIZE says otherwise. Efficiency = raw time / "
        "pipeline time without the gym judge's calls (LLM work the raw loop does not do); the judge column "
        "gives their time and count, and the JSON `efficiency_judge_counted` the ratio with them.",
    ]
    lines += _stage_lines(results["pipeline"])
    in_flight = [
        row
        for row in results["pipeline"]
        if row["backend"] == SIMULATED and row["config_batch_size"] == declared
    ]
    if len({row["in_flight"] for row in in_flight}) > 1:
        lines += [
            "",
            "## Requests in flight (simulated backend)",
            "",
            "| Dagster storage | in flight | raw postings/s | pipeline postings/s | efficiency | "
            "overhead vs raw ms/posting/asset | peak concurrent requests at the server |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in in_flight:
            raw_rate = row["postings"] / row["raw_seconds"]
            lines.append(
                f"| {row['dagster_storage']} | {row['in_flight']} | {raw_rate:.2f} | "
                f"{row['postings_per_second']:.2f} | "
                f"{row['efficiency']:.3f} | {row['overhead_vs_raw_ms_per_posting_asset']:.1f} | "
                f"{row['server_peak_concurrency']} |"
            )
    if results.get("scale"):
        lines += [
            "",
            "## Discovery at scale",
            "",
            "| engine | postings | pending | sensor | first tick s | steady tick s | idle tick s | "
            "statements per first tick | SQL s per first tick |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for scale in results["scale"]:
            for name, figures in scale["sensors"].items():
                lines.append(
                    f"| {scale['config']['engine']} | {scale['config']['postings']:,} | "
                    f"{scale['pending']:,} | {name} | "
                    f"{figures['first']['median_seconds']:.3f} | {figures['steady']['median_seconds']:.3f} | "
                    f"{figures['idle']['median_seconds']:.3f} | {figures['first']['statements']} | "
                    f"{figures['first']['sql_seconds']:.3f} |"
                )
        lines += ["", "### Query plans of a first tick (every query runs)", ""]
        for scale in results["scale"]:
            for name, figures in scale["sensors"].items():
                lines.append(f"#### {scale['config']['engine']}: {name}")
                lines.append("")
                for plan in figures["first"]["plans"]:
                    sql = " ".join(plan["sql"].split())
                    lines += [
                        f"`{sql[:160]}{'...' if len(sql) > 160 else ''}` ({plan['seconds'] * 1000:.1f} ms)",
                        "",
                        *(["```", *plan["plan"], "```", ""] if plan["plan"] else []),  # none for a SET
                    ]
    lines += ["", "## Targets", "", *targets_lines(results)]
    load = results["loadavg"]
    lines += [
        "",
        f"Load average (1, 5, 15 min) at start {load['start']}, at end {load['end']} on "
        f"{os.cpu_count()} CPUs: the machine is shared, so contention inflates wall times.",
    ]
    return "\n".join(lines)


def _postings_line(texts: dict[str, Any]) -> str:
    distinct, words = texts["distinct_descriptions"], texts["mean_words"]
    return f"{texts['source']}, {distinct} distinct texts of {words} words on average"


def _server_time(settings: dict[str, Any]) -> str:
    """A simulated request's time as the settings give it: fixed, and per token when rates are set."""
    rates = settings.get("token_rates") or {}
    fixed = f"{settings['latency_ms']:g} ms"
    if not rates.get("prefill_tokens_per_second") and not rates.get("decode_tokens_per_second"):
        return fixed
    return (
        f"{fixed} + prompt tokens at {rates['prefill_tokens_per_second']:g}/s (one prompt at a time) + "
        f"answer tokens (at least {rates['min_output_tokens']}) at {rates['decode_tokens_per_second']:g}/s"
    )


def _stage_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A posting's CPU by stage for each row, the model server's time and the cores that keep it busy."""
    lines = [
        "",
        "## CPU seconds a posting by stage",
        "",
        "Of the measured group's use cases, in the runs' process: the whole, the faithfulness check, the "
        "raw loop's client calls (the same prompts sent straight to the server), the orchestration (the "
        "rest); the model server's generation time and least wall time a posting with all its slots busy, "
        "and the cores that keep them busy (CPU a posting x postings a second).",
        "",
        "| backend | Dagster storage | in flight | batch | use cases | CPU s/posting | faithfulness check | "
        "raw loop (client) | orchestration | server s/posting | least wall s/posting "
        "| cores to keep it busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cpu = row.get("cpu") or {}
        lines.append(
            f"| {row['backend']} | {row['dagster_storage']} | {row['in_flight']} | {row['batch_size']} | "
            f"{', '.join(cpu.get('use_cases') or [])} | {cpu.get('cpu_seconds_per_posting')} | "
            f"{cpu.get(f'{FAITHFULNESS} cpu_seconds_per_posting', 0.0)} | "
            f"{cpu.get('raw_loop_cpu_seconds_per_posting')} | "
            f"{cpu.get('orchestration_cpu_seconds_per_posting')} | "
            f"{cpu.get('model_server_seconds_per_posting', '-')} | "
            f"{cpu.get('model_server_least_seconds_per_posting', '-')} | "
            f"{cpu.get('cores_to_keep_the_slots_busy', '-')} |"
        )
    return lines


def _raw_seconds(row: dict[str, Any]) -> str:
    """The raw loop's time; for the embedded model the mean of the loops before and after, and both."""
    both = row["raw"].get("runs_seconds")
    return f"{row['raw_seconds']:.1f}" + (f" ({both[0]:.1f} / {both[1]:.1f})" if both else "")


def targets_lines(results: dict[str, Any]) -> list[str]:
    lines = []
    for row in results["pipeline"]:
        label = (
            f"{row['backend']}{' (simulated)' if row['simulated'] else ''}, "
            f"{row['dagster_storage']} storage, batch {row['batch_size']}"
        )
        if row["in_flight"] == 1 and row["simulated"]:
            target = TARGET_OVERHEAD_MS[row["dagster_storage"]]
            value = row["overhead_ms_per_posting_asset"]
            lines.append(
                f"- overhead {label}: {value:.1f} ms/posting/asset, target <= {target:g}: "
                f"{'met' if value <= target else 'missed'}"
            )
        if row["backend"] == EMBEDDED:
            met = row["efficiency"] >= TARGET_EFFICIENCY_EMBEDDED
            busy_met = row["busy_share"] >= TARGET_EFFICIENCY_EMBEDDED
            lines.append(
                f"- efficiency {label}: {row['efficiency']:.3f} against the raw loop "
                f"({'met' if met else 'missed'}), {row['busy_share']:.3f} as the share of wall time "
                f"inside LLM calls ({'met' if busy_met else 'missed'}); "
                f"target >= {TARGET_EFFICIENCY_EMBEDDED}"
            )
        if row["in_flight"] == 1:
            lines.append(
                f"- runs {label}: {row['runs']} for {row['postings']} postings, "
                f"at most {row['runs_allowed']}: "
                f"{'met' if row['runs'] <= row['runs_allowed'] else 'missed'}; "
                "largest number of loads of one "
                f"model in a run: {row['max_loads_of_one_model_in_a_run']} "
                f"({'met' if row['max_loads_of_one_model_in_a_run'] == 1 else 'missed'})"
            )
    for scale in results.get("scale", []):
        worst = max(
            max(figures["first"]["median_seconds"], figures["steady"]["median_seconds"])
            for figures in scale["sensors"].values()
        )
        lines.append(
            f"- sensor tick, {scale['config']['postings']:,} postings on {scale['config']['engine']}: "
            f"slowest {worst:.3f}s, target <= {TARGET_TICK_SECONDS:g}s: "
            f"{'met' if worst <= TARGET_TICK_SECONDS else 'missed'}"
        )
    return lines


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _csv_ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _env_pair(text: str) -> tuple[str, str]:
    name, _, value = text.partition("=")
    return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postings", type=int, default=200, help="postings for the simulated backend")
    parser.add_argument("--embedded-postings", type=int, default=10, help="postings for the embedded backend")
    parser.add_argument(
        "--backend", default=SIMULATED, help=f"comma list of {SIMULATED}, {EMBEDDED}; none: discovery only"
    )
    parser.add_argument("--dagster-storage", default="both", choices=["sqlite", "postgres", "both"])
    parser.add_argument(
        "--app-db",
        default="same",
        choices=["same", "sqlite", "postgres"],
        help="same: the Dagster storage's engine",
    )
    parser.add_argument("--in-flight", type=_csv_ints, default=[1, 2, 4], help="simulated backend only")
    add_posting_options(parser)
    parser.add_argument(
        "--latency-ms",
        type=float,
        help="simulated fixed time per request (default 100 with tiny postings, else 0, beside the tokens')",
    )
    parser.add_argument(
        "--prefill-tokens-per-second",
        type=float,
        help=f"simulated prompt tokens a second (default {GPU_7B.prefill_tokens_per_second:g} with real "
        "postings)",
    )
    parser.add_argument(
        "--decode-tokens-per-second",
        type=float,
        help=f"simulated answer tokens a second a slot (default {GPU_7B.decode_tokens_per_second:g} with "
        "real postings)",
    )
    parser.add_argument(
        "--min-output-tokens",
        type=int,
        help=f"an answer decoded as at least this long ({GPU_7B.min_output_tokens})",
    )
    parser.add_argument("--parallel", type=int, default=4, help="simulated server's parallel slots")
    parser.add_argument("--batch-size", type=int, help="postings per run (default: the use cases' own)")
    parser.add_argument(
        "--also-batch-size",
        type=int,
        default=25,
        help="simulated backend: also measure this batch size, one request in flight (0: no)",
    )
    parser.add_argument("--scale-postings", type=int, default=100_000, help="0 skips discovery at scale")
    parser.add_argument(
        "--shared", help=f"the shared data folder (else ${SHARED_DATA_ENV} or ../shared/data)"
    )
    parser.add_argument(
        "--demo-postings", action="store_true", help="discovery at scale: the demo postings' texts, repeated"
    )
    parser.add_argument(
        "--postgres-admin-url",
        default=os.environ.get(POSTGRES_ADMIN_ENV, DEFAULT_POSTGRES_ADMIN_URL),
        help="where fresh databases are created (and dropped)",
    )
    parser.add_argument(
        "--env", type=_env_pair, action="append", default=[], help="NAME=VALUE for the workers"
    )
    parser.add_argument("--profile", action="store_true", help="write cProfile stats of each pipeline run")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "results"))
    parser.add_argument("--name", default=NAME, help="report file name (without extension)")
    args = parser.parse_args(argv)
    args.storages = ["sqlite", "postgres"] if args.dagster_storage == "both" else [args.dagster_storage]
    backends = [name.strip() for name in args.backend.split(",") if name.strip() not in ("", "none")]
    unknown = [name for name in backends if name not in (SIMULATED, EMBEDDED)]
    if unknown:
        parser.error(f"unknown backend {unknown[0]!r}")
    tiny = args.fixed_latency or (args.posting_set == TINY and args.postings_file is None)
    if args.latency_ms is None:
        args.latency_ms = 100.0 if tiny else 0.0
    base_rates = NO_TOKENS if tiny else GPU_7B
    given = {
        "prefill_tokens_per_second": args.prefill_tokens_per_second,
        "decode_tokens_per_second": args.decode_tokens_per_second,
        "min_output_tokens": args.min_output_tokens,
    }
    args.rates = replace(base_rates, **{name: value for name, value in given.items() if value is not None})
    try:
        real = args.posting_set != TINY and not args.postings_file
        shared = str(shared_data_dir(args.shared)) if real else None
        sample = benchmark_postings(args.postings, args.posting_set, args.postings_file, shared)
    except (FileNotFoundError, ValueError) as error:
        parser.error(str(error))
    Path(args.out).mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    load_start = os.getloadavg()
    results: dict[str, Any] = {
        "settings": {
            "postings": args.postings,
            "embedded_postings": args.embedded_postings,
            "backends": backends,
            "dagster_storage": args.storages,
            "app_db": args.app_db,
            "in_flight": args.in_flight,
            "batch_size": args.batch_size,
            "also_batch_size": args.also_batch_size,
            "latency_ms": args.latency_ms,
            "token_rates": asdict(args.rates),
            "parallel": args.parallel,
            "postings_source": describe(sample, args.posting_set, args.postings_file),
            "retries": "deferred past the end of the run (backoff 24 h): both sides make the same calls",
            "env": dict(args.env),
        },
        "pipeline": [],
        "scale": [],
        "loadavg": {"start": [round(x, 2) for x in load_start]},
    }

    def save(_row: Any = None) -> tuple[Path, Path]:
        """Write what is measured so far (a long run stopped midway keeps its rows)."""
        results["loadavg"]["end"] = [round(x, 2) for x in os.getloadavg()]
        results["seconds"] = time.perf_counter() - started
        return write_report(args.name, results, markdown(results), Path(args.out))

    for backend in backends:
        measure_backend(args, backend, shared, on_row=lambda row: (results["pipeline"].append(row), save()))
    if args.scale_postings:
        results["scale"] = measure_scale(args)
    json_path, md_path = save()
    print(md_path.read_text())
    print(f"written: {json_path}, {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
