"""Settings read from the environment, with defaults that need no server.

Everything a user may want to point elsewhere is one environment variable:

| variable                     | default                                  |
|------------------------------|------------------------------------------|
| PIPELINE_DATA_DIR            | ``<project>/data``                       |
| PIPELINE_DATABASE_URL        | ``sqlite:///<data dir>/app.db``          |
| PIPELINE_LLM_BACKEND         | ``ollama`` if OLLAMA_HOST is set, else ``embedded`` |
| OLLAMA_HOST                  | unset (use the embedded model)           |
| PIPELINE_BATCH_SIZE          | unset: each use case's declared batch size; at least 100 on Ollama |
| PIPELINE_DAGSTER_POSTGRES_URL| unset (Dagster's own storage is SQLite in DAGSTER_HOME) |
| PIPELINE_DAGSTER_STORAGE     | ``stock`` (embedded model) or ``pooled`` (Ollama): docs/dagster-storage.md |
| DAGSTER_HOME                 | ``<data dir>/dagster_home``              |
| PIPELINE_TAXONOMY_PATH       | unset (the built-in demo taxonomy); e.g. ESCO's ``skills_en.csv`` |
| PIPELINE_EMBEDDING_BACKEND   | ``none``; ``minilm`` (in process) or ``ollama``: semantic resolution |
| PIPELINE_EMBEDDING_MODEL     | ``nomic-embed-text``                     |
| PIPELINE_SENSOR_INTERVAL_SECONDS | ``30``: how often each discovery sensor looks for work |
| PIPELINE_JUDGE_MODEL         | ``gemma3:270m`` (the embedded model): the gym's judge |
| PIPELINE_JUDGE_SAMPLE        | ``2`` outputs graded per use case and run; ``0`` turns the judge off |
| PIPELINE_JUDGE_RUBRIC        | unset (the built-in rubric); a JSON file with criteria and examples |
| PIPELINE_REVIEW_BELOW        | ``3.0``: outputs the judge grades lower (mean of criteria) go to review |
| PIPELINE_GOLD_SKILLSPAN      | unset; SkillSpan ``dev.json``: gold for postings keyed ``skillspan-...`` |
| PIPELINE_SUMMARY_STYLE       | ``plain`` (one call); ``refined``: extract, grade, improve, final |
| PIPELINE_EXTRA_USE_CASES     | unset; ``posting_assessment``: three experts and a synthesizer |
| PIPELINE_LLM_RATE_PER_SECOND | unset (no pacing); requests a second to a remote or paid backend |
| PIPELINE_LLM_BURST           | ``1``: requests sent at once after a quiet spell (with the rate above) |
| PIPELINE_DOMAINS             | ``postings``; ``postings,autodo`` adds autodo's assets and sensors |
| PIPELINE_MODEL_PRICES        | unset; JSON ``{"model": [per 1k prompt tokens, per 1k completion tokens]}`` |
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SENSOR_INTERVAL_SECONDS = 30
DAGSTER_STORAGES = ("stock", "pooled")


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
    judge_model: str = "gemma3:270m"
    judge_sample: int = 2
    judge_rubric_path: str = ""
    review_below: float = 3.0
    gold_skillspan_path: str = ""
    summary_style: str = "plain"  # see pipeline_defs/catalog.py
    dagster_storage: str = "stock"  # "stock" or "pooled": see pipeline_defs/dagster_storage.py
    extra_use_cases: tuple[str, ...] = ()
    llm_rate_per_second: float = 0.0  # the pacer (appdb/pacer.py); 0: not paced
    llm_burst: int = 1
    model_prices: tuple[tuple[str, float, float], ...] = ()  # (model, per 1k prompt, per 1k completion)
    domains: tuple[str, ...] = ("postings",)  # the domain plugins in the code location (catalog.py)

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        data_dir = Path(env.get("PIPELINE_DATA_DIR") or PROJECT_ROOT / "data").resolve()
        ollama_host = env.get("OLLAMA_HOST") or None
        backend = env.get("PIPELINE_LLM_BACKEND") or ("ollama" if ollama_host else "embedded")
        if backend not in ("ollama", "embedded"):
            raise ValueError(f"PIPELINE_LLM_BACKEND must be 'ollama' or 'embedded', not {backend!r}")
        batch = env.get("PIPELINE_BATCH_SIZE")
        if batch is not None and (not batch.isdigit() or int(batch) < 1):
            raise ValueError(f"PIPELINE_BATCH_SIZE must be a positive integer, not {batch!r}")
        interval = env.get("PIPELINE_SENSOR_INTERVAL_SECONDS")
        if interval is not None and (not interval.isdigit() or int(interval) < 1):
            raise ValueError(f"PIPELINE_SENSOR_INTERVAL_SECONDS must be a positive integer, not {interval!r}")
        embedding_backend = env.get("PIPELINE_EMBEDDING_BACKEND") or "none"
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
            "pooled" if backend == "ollama" else "stock"
        )
        if dagster_storage not in DAGSTER_STORAGES:
            raise ValueError(
                f"PIPELINE_DAGSTER_STORAGE must be {' or '.join(DAGSTER_STORAGES)}, not {dagster_storage!r}"
            )
        review_below = env.get("PIPELINE_REVIEW_BELOW") or "3.0"
        try:
            threshold = float(review_below)
        except ValueError:
            threshold = -1.0
        if not 1.0 <= threshold <= 5.0:
            raise ValueError(f"PIPELINE_REVIEW_BELOW must be a grade between 1 and 5, not {review_below!r}")
        rate, burst = _pacing(env)
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
            judge_model=env.get("PIPELINE_JUDGE_MODEL") or "gemma3:270m",
            judge_sample=int(judge_sample),
            judge_rubric_path=env.get("PIPELINE_JUDGE_RUBRIC") or "",
            review_below=threshold,
            gold_skillspan_path=env.get("PIPELINE_GOLD_SKILLSPAN") or "",
            summary_style=env.get("PIPELINE_SUMMARY_STYLE") or "plain",
            dagster_storage=dagster_storage,
            extra_use_cases=tuple(
                name.strip()
                for name in (env.get("PIPELINE_EXTRA_USE_CASES") or "").split(",")
                if name.strip()
            ),
            llm_rate_per_second=rate,
            llm_burst=burst,
            model_prices=_model_prices(env.get("PIPELINE_MODEL_PRICES") or ""),
            domains=tuple(
                name.strip()
                for name in (env.get("PIPELINE_DOMAINS") or "postings").split(",")
                if name.strip()
            ),
        )


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
