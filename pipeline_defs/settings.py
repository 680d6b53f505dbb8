"""The one owner of configuration: every environment variable and config-file key is read here, once, at
start, and validated with an error that names the variable.

Settings come, in this order, from the environment, then a config file (`PIPELINE_CONFIG`, else
`pipeline.toml` in the working directory when there is one), then their defaults; the defaults need no
server. `Settings` holds the core's; each plugin's section (`settings.postings`, ...) is declared beside
its plugin and read here too. Every value remembers where it came from (`settings.origin(name)`), which
`pipeline config` prints and the wiring uses to write a value read from a variable as that variable
(Dagster's `EnvVar`, so the UI never shows a password).

    python -m pipeline_defs.settings --markdown    # the tables of docs/configuration.md

No other module reads `os.environ`; the few that must set a variable for Dagster's own processes do
it through `export_for_dagster`.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from appdb.database import configure_sqlite
from appdb.redaction import redact, remember_environment
from domain.core.configuration import (
    Derived,
    Setting,
    SettingError,
    declared_settings,
    json_object,
    name_list,
    name_pairs,
    number_between,
    on_off,
    one_of,
    positive_int,
    setting,
    text,
    whole_number,
)
from domain.language.chat_prompts import PROMPT_STYLES
from pipeline_defs.registry import DEFAULT_DOMAINS, REGISTRY, registered_plugins
from resources.llm_hosts import LLMHost, parse_hosts
from resources.run_heartbeat import DEFAULT_HEARTBEAT_SECONDS

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFIG_FILE_VARIABLE = "PIPELINE_CONFIG"
CONFIG_FILE_NAME = "pipeline.toml"
DAGSTER_STORAGES = ("stock", "pooled")
LLM_BACKENDS = ("ollama", "openai", "embedded")
SERVER_BACKENDS = ("ollama", "openai")
OPENAI_APIS = ("completions", "chat")
DEFAULT_OPENAI_BASE_URL = "http://127.0.0.1:8080/v1"
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
EXECUTORS = ("in_process", "celery", "k8s")
EXECUTOR_PACKAGES = {"celery": ("dagster_celery", "celery"), "k8s": ("dagster_k8s", "deploy")}
DEFAULT_CELERY_BROKER_URL = "pyamqp://guest@127.0.0.1:5672//"
DEFAULT_RUNS_PER_HOST = 3
# The least time between two ticks of a discovery sensor. The daemon looks every 5 s, and at once when
# subjects arrive (pipeline_defs/runtime/daemon.py); an idle tick is one cheap query (docs/performance.md).
DEFAULT_SENSOR_INTERVAL_SECONDS = 1
# How long a sensor's run of a one-use-case work group keeps claiming more pending subjects after its
# own batch (assets/batch_run.py): each new run is a process loading the code location.
DEFAULT_RUN_CONTINUE_SECONDS = 600
# In a run of several use cases (one model's group: the summary and skills by the model) each step goes
# on this long at most, so the next use case's turn comes within it: one run per batch of 250 was 43
# run starts for 10,000 postings at 16 slots; 60 s made 9 but sent skills in bursts that resolution
# trailed by 30 s (median), 15 s made 15 with 6 s (docs/performance.md, 2026-12-03).
DEFAULT_RUN_STEP_CONTINUE_SECONDS = 15


def running_from_a_clone() -> bool:
    """Run from a checkout (`make`, the README) rather than from an installed package (`pip install`)."""
    return (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "workspace.yaml").is_file()


def _default_data_dir(values: Mapping[str, Any]) -> Path:
    if running_from_a_clone():
        return PROJECT_ROOT / "data"
    return values["data_home"] / "posting-enrichment"  # an installed package: not inside site-packages


def _hosts(value: str) -> tuple[str, ...]:
    specs = tuple(spec.strip() for spec in value.split(";") if spec.strip())
    try:
        parse_hosts(specs)  # a clear error now rather than in a run
    except ValueError as exc:
        raise SettingError(str(exc)) from None
    return specs


def _executor(value: str) -> str:
    """One of EXECUTORS, its optional package installed (a clear error now, not a code location that
    fails to load)."""
    name = one_of(*EXECUTORS)(value)
    package, extra = EXECUTOR_PACKAGES.get(name, (None, None))
    if package and importlib.util.find_spec(package) is None:
        raise SettingError(f"{name} needs {package}: pip install 'posting-enrichment[{extra}]'")
    return name


def queue_name(value: str) -> str:
    name = value.strip()
    if not name or not all(char.isalnum() or char in "-_." for char in name):
        raise SettingError("must be a queue name: letters, digits, `-`, `_` or `.`")
    return name


def _backend(values: Mapping[str, Any]) -> str:
    if values.get("ollama_host") or values.get("llm_hosts"):
        return "ollama"
    return "openai" if values.get("openai_base_url") else "embedded"


DATABASE_BACKENDS = ("sqlite", "postgresql")  # what the migrations and `appdb.dialects` are written for


def _database_url(value: str) -> str:
    """A SQLite or PostgreSQL URL; any other (`mysql://`, a typo) is refused here, in one line, rather
    than by a missing driver's traceback in the first command that opens it."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        backend = make_url(value).get_backend_name()
    except ArgumentError:
        backend = ""
    if backend not in DATABASE_BACKENDS:
        raise SettingError(
            f"{redact(value)!r} is not a SQLite or PostgreSQL URL (sqlite:///PATH, "
            "postgresql://USER@HOST:PORT/NAME): the application database runs on those two only"
        )
    return value


def _path(value: str) -> Path:
    return Path(value).expanduser().resolve()


def _prices(value: str) -> tuple[tuple[str, float, float], ...]:
    problem = (
        'must be JSON like {"gpt-4o-mini": [0.00015, 0.0006]} (price per 1,000 prompt and completion tokens)'
    )
    try:
        parsed = json_object(value)
    except SettingError as exc:
        raise SettingError(f"{problem}: {exc}") from None
    prices = []
    for model, price in parsed.items():
        if (
            not isinstance(price, list)
            or len(price) != 2
            or not all(isinstance(p, int | float) and p >= 0 for p in price)
        ):
            raise SettingError(f"{problem}: {model!r} has {price!r}")
        prices.append((str(model), float(price[0]), float(price[1])))
    return tuple(prices)


@dataclass(frozen=True)
class Settings:
    """The core settings, and each registered plugin's section (`settings.section(name)`, or
    `settings.<name>`), declared by the plugin (`DomainPlugin.settings`)."""

    data_home: Path = setting(
        "XDG_DATA_HOME",
        "where an installed package (not a clone) keeps its data directory, under `posting-enrichment/`",
        Derived(lambda v: Path.home() / ".local" / "share", "`~/.local/share`"),
        parse=_path,
    )
    data_dir: Path = setting(
        "PIPELINE_DATA_DIR",
        "where the SQLite files, the Dagster home and the caches live",
        Derived(_default_data_dir, "`data/` in a clone; `<XDG_DATA_HOME>/posting-enrichment` when installed"),
        parse=_path,
    )
    database_url: str = setting(
        "PIPELINE_DATABASE_URL",
        "the application database, e.g. `postgresql://user@host:5432/pipeline`",
        Derived(lambda v: f"sqlite:///{v['data_dir'] / 'app.db'}", "`sqlite:///<data dir>/app.db`"),
        parse=_database_url,
        secret=True,
    )
    ollama_host: str | None = setting(
        "OLLAMA_HOST",
        "e.g. `http://gpu-box:11434`: serve the models from Ollama instead of the embedded backend",
        None,
        secret=True,
    )
    llm_hosts: tuple[str, ...] = setting(
        "PIPELINE_LLM_HOSTS",
        "several model servers, `;`-separated, each `URL [parallel=N] [models=a,b]`: each run is pinned to "
        "one host ([operations](operations.md#several-gpu-hosts))",
        (),
        parse=_hosts,
        secret=True,
    )
    openai_base_url: str = setting(
        "PIPELINE_OPENAI_BASE_URL",
        "an OpenAI-compatible API root: vLLM (`:8000/v1`), llama.cpp's `llama-server` (`:8080/v1`), a "
        f"LiteLLM proxy (`:4000/v1`), a hosted API; unset: {DEFAULT_OPENAI_BASE_URL} when that backend "
        "is chosen",
        "",
        parse=text,
        secret=True,
    )
    llm_backend: str = setting(
        "PIPELINE_LLM_BACKEND",
        "force a backend: `ollama`, `openai` (any OpenAI-compatible server) or `embedded`",
        Derived(
            _backend,
            "`ollama` if OLLAMA_HOST or PIPELINE_LLM_HOSTS is set, `openai` if "
            "PIPELINE_OPENAI_BASE_URL is, else `embedded`",
        ),
        parse=one_of(*LLM_BACKENDS),
    )
    model: str = setting(
        "PIPELINE_MODEL",
        "the model every LLM use case runs on, as the backend names it (e.g. `qwen2.5:7b-instruct` on "
        "Ollama); unset: each use case's own (Gemma 3 270M); with a model server it also turns on the "
        "skills verifier and the linking referee",
        "",
        parse=text,
    )
    prompt_style: str = setting(
        "PIPELINE_PROMPT_STYLE",
        "how prompts are sent: `chat` (a system message, the subject in a message of its own: for "
        "instruction-tuned models), `completion` (few-shot, for base models) or `auto` (chat on a model "
        "server, as Ollama's template says; completion on the embedded base model)",
        "auto",
        parse=one_of(*PROMPT_STYLES),
    )
    use_case_models: tuple[tuple[str, str], ...] = setting(
        "PIPELINE_MODELS",
        "per use case, `name=model,...` (e.g. `<use case>=llama3.1:8b`; `pipeline config` lists them); "
        "wins over PIPELINE_MODEL; "
        "`judge=...` for the judge. In the config file: `[use_cases.<name>] model = ...`",
        (),
        parse=name_pairs,
    )
    use_case_prompt_styles: tuple[tuple[str, str], ...] = setting(
        "PIPELINE_PROMPT_STYLES",
        "per use case, `name=style,...`; wins over PIPELINE_PROMPT_STYLE",
        (),
        parse=name_pairs,
    )
    use_case_backends: tuple[tuple[str, str], ...] = setting(
        "PIPELINE_BACKENDS",
        "per use case, `name=backend,...` (`ollama`, `openai`, `embedded`): a use case served by another "
        "backend than the deployment's",
        (),
        parse=name_pairs,
    )
    embedded_models: tuple[tuple[str, str], ...] = setting(
        "PIPELINE_EMBEDDED_MODELS",
        "GGUF files the embedded backend serves beside Gemma 3 270M: `name=/path/model.gguf,...`",
        (),
        parse=name_pairs,
    )
    ollama_num_parallel: int | None = setting(
        "OLLAMA_NUM_PARALLEL",
        "Ollama's parallel slots (the same variable the server reads): requests a run keeps in flight on "
        "Ollama when PIPELINE_LLM_PARALLEL is unset",
        None,
        parse=positive_int,
    )
    llm_parallel: int | None = setting(
        "PIPELINE_LLM_PARALLEL",
        "requests a run keeps in flight at its server, for hosts without `parallel=`",
        Derived(
            lambda v: v["ollama_num_parallel"] if v["llm_backend"] == "ollama" else None,
            "Ollama: OLLAMA_NUM_PARALLEL, else 4; OpenAI-compatible: the slots llama-server reports, else 8",
        ),
        parse=positive_int,
    )
    runs_per_host: int = setting(
        "PIPELINE_RUNS_PER_HOST",
        "runs working on one host at once (the run queue's limit per host, written into `dagster.yaml`)",
        DEFAULT_RUNS_PER_HOST,
        parse=positive_int,
    )
    script_runs: int = setting(
        "PIPELINE_SCRIPT_RUNS",
        "runs of one script use case (the CPU skill tagger, skill resolution) working at once: each takes "
        "a core, so a machine with more cores keeps pace with a faster model server",
        Derived(lambda v: max(1, (os.cpu_count() or 1) // 2), "half the machine's cores, at least 1"),
        parse=positive_int,
    )
    run_start: str = setting(
        "PIPELINE_RUN_START",
        "how the code server starts a run's process: `forkserver` forks it from a process that loaded the "
        "code location once (~2.5 CPU s less a run), `spawn` is Dagster's own (a new interpreter that "
        "loads it again)",
        Derived(
            lambda v: "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn",
            "`forkserver` where the platform has it (Linux, macOS), else `spawn`",
        ),
        parse=one_of("forkserver", "spawn"),
    )
    ollama_num_ctx: int | None = setting(
        "PIPELINE_OLLAMA_NUM_CTX",
        "Ollama's context window, sent with the warm-up and every call (unset: the model's default)",
        None,
        parse=positive_int,
    )
    ollama_keep_alive: str = setting(
        "PIPELINE_OLLAMA_KEEP_ALIVE", "how long Ollama keeps the model loaded after each call", "30m"
    )
    openai_api_key: str = setting(
        "PIPELINE_OPENAI_API_KEY",
        "sent as a bearer token to the OpenAI-compatible server",
        "",
        also=("OPENAI_API_KEY",),
        secret=True,
    )
    openai_api: str = setting(
        "PIPELINE_OPENAI_API",
        "`completions` sends the prompts as they are; `chat` sends system and user messages",
        "completions",
        parse=one_of(*OPENAI_APIS),
    )
    openai_models: tuple[tuple[str, str], ...] = setting(
        "PIPELINE_OPENAI_MODELS",
        "`ours=theirs,...`: the server's name for a use case's model, e.g. `gemma3:270m=google/gemma-3-270m`",
        (),
        parse=name_pairs,
    )
    openai_schema_format: str = setting(
        "PIPELINE_OPENAI_SCHEMA_FORMAT",
        "how the output's JSON schema is sent: `json_schema` (OpenAI structured outputs: vLLM, llama-server, "
        "LiteLLM) or `json_object` (llama-cpp-python's `llama_cpp.server`, which refuses `json_schema`)",
        "json_schema",
        parse=one_of("json_schema", "json_object"),
    )
    batch_size_override: int | None = setting(
        "PIPELINE_BATCH_SIZE",
        "subjects per run (sensor runs and UI backfills); unset: each use case's own, at least 250 on a "
        "model server (docs/performance.md)",
        None,
        parse=positive_int,
    )
    dagster_home: Path = setting(
        "DAGSTER_HOME",
        "Dagster's instance directory",
        Derived(lambda v: v["data_dir"] / "dagster_home", "`<data dir>/dagster_home`"),
        parse=_path,
    )
    dagster_postgres_url: str | None = setting(
        "PIPELINE_DAGSTER_POSTGRES_URL",
        "Dagster's own storage on PostgreSQL (dagster-postgres) instead of SQLite; `dagster.yaml` names "
        "this variable, so every Dagster process needs it set ([security](security.md))",
        None,
        secret=True,
    )
    dagster_storage: str = setting(
        "PIPELINE_DAGSTER_STORAGE",
        "which classes store Dagster's runs and event logs ([the Dagster storage](dagster-storage.md))",
        Derived(
            lambda v: "pooled" if v["llm_backend"] in SERVER_BACKENDS else "stock",
            "`stock` on the embedded model, `pooled` on a model server",
        ),
        parse=one_of(*DAGSTER_STORAGES),
    )
    executor: str = setting(
        "PIPELINE_EXECUTOR",
        "where the batch runs' steps execute: `in_process` (in the run's process), `celery` (on Celery "
        "workers, `pipeline worker`, over the broker below) or `k8s` (a pod each, Dagster's "
        "`k8s_job_executor`) ([past one machine](operations.md#past-one-machine))",
        "in_process",
        parse=_executor,
    )
    celery_broker_url: str = setting(
        "PIPELINE_CELERY_BROKER_URL",
        "with `PIPELINE_EXECUTOR=celery`: the broker every run and worker uses (RabbitMQ `pyamqp://` or "
        "Redis `redis://`)",
        DEFAULT_CELERY_BROKER_URL,
        parse=text,
        secret=True,
    )
    celery_backend_url: str = setting(
        "PIPELINE_CELERY_BACKEND_URL",
        "with `PIPELINE_EXECUTOR=celery`: where workers send a step's result back (`rpc://`: over the "
        "broker)",
        "rpc://",
        parse=text,
        secret=True,
    )
    celery_cpu_queue: str = setting(
        "PIPELINE_CELERY_CPU_QUEUE",
        "the Celery queue of the script steps (the skill tagger, the linker): workers on machines with "
        "cores to spare listen on it",
        "cpu",
        parse=queue_name,
    )
    celery_model_queue: str = setting(
        "PIPELINE_CELERY_MODEL_QUEUE",
        "the Celery queue of the steps that call a model: workers beside the model hosts listen on it",
        "model",
        parse=queue_name,
    )
    ui_allowed_hosts: tuple[str, ...] = setting(
        "PIPELINE_UI_ALLOWED_HOSTS",
        "more `Host` names the webserver answers, comma-separated (`name` or `name:port`): a reverse "
        "proxy's ([security](security.md))",
        (),
        parse=name_list,
    )
    sensor_interval_seconds: int = setting(
        "PIPELINE_SENSOR_INTERVAL_SECONDS",
        "the least time between two looks of a discovery sensor (the daemon also looks at once when "
        "subjects arrive, a run starts, an LLM step ends or a run ends)",
        DEFAULT_SENSOR_INTERVAL_SECONDS,
        parse=positive_int,
    )
    run_continue_seconds: int = setting(
        "PIPELINE_RUN_CONTINUE_SECONDS",
        "how long a run the sensors start keeps claiming more pending subjects after its own batch (fewer "
        "run starts; its sensor starts no more runs than can work at once meanwhile); 0: one batch a run",
        DEFAULT_RUN_CONTINUE_SECONDS,
        parse=whole_number,
    )
    run_step_continue_seconds: int = setting(
        "PIPELINE_RUN_STEP_CONTINUE_SECONDS",
        "in a run of several use cases (one model's group), how long each goes on claiming after its own "
        "batch before the next one's turn (at most PIPELINE_RUN_CONTINUE_SECONDS); 0: one batch a run",
        DEFAULT_RUN_STEP_CONTINUE_SECONDS,
        parse=whole_number,
    )
    heartbeat_seconds: float = setting(
        "PIPELINE_HEARTBEAT_SECONDS",
        "how often a run shows it is alive; a run silent for 5 beats is failed and its work freed "
        "([liveness](liveness.md))",
        DEFAULT_HEARTBEAT_SECONDS,
        parse=number_between(0.2, 300, "a number of seconds"),
    )
    lease_seconds: int | None = setting(
        "PIPELINE_LEASE_SECONDS",
        "the claim lease of every use case (unset: each use case's, 600), and how long pending work may "
        "stand still before it is called stuck",
        None,
        parse=positive_int,
    )
    database_retry_seconds: int = setting(
        "PIPELINE_DATABASE_RETRY_SECONDS",
        "how long `pipeline run` waits for an unreachable application database to come back (retrying "
        "with backoff, one line while it waits) before it stops with a one-line error "
        "([liveness](liveness.md)); 0: stop at once",
        120,
        parse=whole_number,
    )
    retire_after_days: int = setting(
        "PIPELINE_RETIRE_AFTER_DAYS",
        "the `retire_finished_<kind>` schedules (stopped until you switch them on) retire subjects finished "
        "that many days ago",
        30,
        parse=whole_number,
    )
    judge_model: str = setting(
        "PIPELINE_JUDGE_MODEL",
        "`deterministic` (quality signals, every new output) or an LLM the backend serves, used once it "
        "passed its calibration set ([the gym](gym.md))",
        "deterministic",
    )
    judge_calibration: bool = setting(
        "PIPELINE_JUDGE_CALIBRATION",
        "`off` uses an LLM judge without its calibration set",
        True,
        parse=on_off,
    )
    judge_sample: int = setting(
        "PIPELINE_JUDGE_SAMPLE",
        "outputs an LLM judge grades per use case and run; `0` turns the judge off",
        2,
        parse=whole_number,
    )
    judge_rubric_path: str = setting(
        "PIPELINE_JUDGE_RUBRIC", "a JSON rubric that replaces the use cases' own (criteria, examples)", ""
    )
    review_below: float = setting(
        "PIPELINE_REVIEW_BELOW",
        "outputs the judge grades lower (any criterion) go to review",
        3.0,
        parse=number_between(1, 5, "a grade"),
    )
    llm_rate_per_second: float = setting(
        "PIPELINE_LLM_RATE_PER_SECOND",
        "the pacer: requests a second to a remote or paid backend, shared by every process; with several "
        "hosts, each host gets this rate (unset or 0: not paced)",
        0.0,
        parse=number_between(0, float("inf"), "a number of requests a second"),
    )
    llm_burst: int = setting(
        "PIPELINE_LLM_BURST",
        "with the rate above: how many requests may go at once after a quiet spell",
        1,
        parse=positive_int,
    )
    model_prices: tuple[tuple[str, float, float], ...] = setting(
        "PIPELINE_MODEL_PRICES",
        'JSON `{"model": [per 1,000 prompt tokens, per 1,000 completion tokens]}`; a local backend costs 0',
        (),
        parse=_prices,
    )
    domains: tuple[str, ...] = setting(
        "PIPELINE_DOMAINS",
        f"the plugins in the code location, a list of the registered ({', '.join(REGISTRY)}): each adds "
        "its assets, use cases, jobs, sensors and commands "
        "([writing a domain plugin](writing-a-domain-plugin.md))",
        DEFAULT_DOMAINS,
        parse=name_list,
    )
    sqlite_busy_timeout: float = setting(
        "PIPELINE_SQLITE_BUSY_TIMEOUT",
        "seconds a statement waits inside SQLite for the write lock",
        30.0,
        parse=number_between(0, 3600, "a number of seconds"),
    )
    sqlite_lock_wait: float = setting(
        "PIPELINE_SQLITE_LOCK_WAIT",
        "seconds a statement keeps retrying a locked SQLite database, then fails naming the lock "
        "([SQLite locks](sqlite-locks.md))",
        600.0,
        parse=number_between(0, 86400, "a number of seconds"),
    )
    shared_data: Path = setting(
        "PIPELINE_SHARED_DATA",
        "the public data sets the benchmarks and the trainers read",
        Derived(lambda v: PROJECT_ROOT.parent / "shared" / "data", "`../shared/data` beside the project"),
        parse=_path,
    )
    cache_dir: Path = setting(
        "XDG_CACHE_HOME",
        "where unpacked model files are kept (under `posting-enrichment/`)",
        Derived(lambda v: Path.home() / ".cache", "`~/.cache`"),
        parse=_path,
    )
    sections: Mapping[str, Any] = field(default_factory=lambda: _default_sections(), hash=False)
    origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def section(self, name: str) -> Any:
        """A plugin's section of the settings (None for a plugin without one)."""
        return self.sections.get(name)

    def __getattr__(self, name: str) -> Any:
        """`settings.postings`: a registered plugin's section by its name."""
        if name.startswith("_") or name == "sections":
            raise AttributeError(name)
        sections = self.__dict__.get("sections", {})
        if name in sections:
            return sections[name]
        raise AttributeError(f"{type(self).__name__!r} has no setting or plugin section {name!r}")

    @property
    def server_backend(self) -> bool:
        """A model server (Ollama, OpenAI-compatible) rather than the model in each run's process."""
        return self.llm_backend in SERVER_BACKENDS

    @property
    def openai_url(self) -> str:
        return self.openai_base_url or DEFAULT_OPENAI_BASE_URL

    @property
    def ollama_url(self) -> str:
        return (self.ollama_host or DEFAULT_OLLAMA_HOST).rstrip("/")

    def changed(self, **changes: Any) -> Settings:
        """These settings with some values changed, the core's or a plugin section's, by name."""
        core = {name for name, _ in declared_settings(Settings)} | {"origins"}
        sections = dict(self.sections)
        touched: set[str] = set()
        for section_name, section in plugin_sections().items():
            own = {name: changes[name] for name, _ in declared_settings(section) if name in changes}
            if own:
                sections[section_name] = replace(self.sections[section_name], **own)
                touched |= set(own)
        unknown = set(changes) - core - touched
        if unknown:
            raise TypeError(f"no setting {sorted(unknown)[0]!r}")
        return replace(
            self, **{name: value for name, value in changes.items() if name in core}, sections=sections
        )

    def origin(self, name: str) -> str:
        """Where a setting's value came from: `environment PIPELINE_X`, `pipeline.toml`, or `default`."""
        return self.origins.get(name, "default")

    def from_variable(self, name: str) -> str | None:
        """The environment variable a setting was read from, None when it came from elsewhere."""
        origin = self.origin(name)
        return origin.split(" ", 1)[1] if origin.startswith("environment ") else None

    def resolved_hosts(self) -> list[LLMHost]:
        """The servers runs are pinned to: PIPELINE_LLM_HOSTS, else the one server configured; none
        on the embedded backend. A host without `parallel=` gets PIPELINE_LLM_PARALLEL/OLLAMA_NUM_PARALLEL."""
        if not self.server_backend:
            return []
        if self.llm_hosts:
            hosts = parse_hosts(self.llm_hosts)
        elif self.llm_backend == "ollama":
            hosts = [LLMHost((self.ollama_host or DEFAULT_OLLAMA_HOST).rstrip("/"))]
        else:
            hosts = [LLMHost(self.openai_url.rstrip("/"))]
        return [host if host.parallel else replace(host, parallel=self.llm_parallel) for host in hosts]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read and validate every setting; `ValueError` names the variable (or key) and the value."""
        return read_settings(os.environ if environ is None else environ)


def plugin_sections() -> dict[str, type]:
    """Each registered plugin's section, as it declares it (`DomainPlugin.settings`): its name is the
    plugin's, `settings.<name>` and the config file's table."""
    return {name: plugin.settings for name, plugin in registered_plugins().items() if plugin.settings}


def _default_sections() -> dict[str, Any]:
    return {name: section() for name, section in plugin_sections().items()}


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable or key."""


def config_file(environ: Mapping[str, str]) -> Path | None:
    """The config file: PIPELINE_CONFIG (which must exist), else `pipeline.toml` here, else none."""
    named = environ.get(CONFIG_FILE_VARIABLE)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise SettingsError(f"{CONFIG_FILE_VARIABLE}: no config file at {path}")
        return path
    here = Path.cwd() / CONFIG_FILE_NAME
    return here if here.is_file() else None


def read_settings(environ: Mapping[str, str]) -> Settings:
    path = config_file(environ)
    table: dict[str, Any] = {}
    if path is not None:
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"{path}: cannot read the config file: {exc}") from None
    table = _use_case_table(table, path)
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    core = _read_section(Settings, environ, table, path, "", values, origins)
    sections = {}
    for name, section in plugin_sections().items():
        own = table.get(name, {})
        if not isinstance(own, dict):
            raise SettingsError(f"{path}: [{name}] must be a table of settings")
        sections[name] = section(**_read_section(section, environ, own, path, f"{name}.", values, origins))
    _refuse_unknown_keys(table, path)
    settings = Settings(**core, sections=sections, origins=origins)
    remember_environment(environ)
    configure_sqlite(settings.sqlite_busy_timeout, settings.sqlite_lock_wait)
    return settings


USE_CASE_KEYS = {
    "model": "use_case_models",
    "prompt_style": "use_case_prompt_styles",
    "backend": "use_case_backends",
}


def _use_case_table(table: Mapping[str, Any], path: Path | None) -> dict[str, Any]:
    """The config file's `[use_cases.<name>]` tables (model, prompt_style, backend) as the per-use-case
    settings they are (`use_case_models` and its siblings, `name=value` pairs)."""
    given = dict(table)
    per_use_case = given.pop("use_cases", {})
    if not isinstance(per_use_case, dict):
        raise SettingsError(f"{path}: [use_cases] must hold a table per use case")
    pairs: dict[str, list[str]] = {}
    for name, choices in per_use_case.items():
        if not isinstance(choices, dict):
            raise SettingsError(f"{path}: [use_cases.{name}] must be a table (model, prompt_style, backend)")
        for key, value in choices.items():
            if key not in USE_CASE_KEYS:
                raise SettingsError(
                    f"{path}: [use_cases.{name}] has no setting {key!r} (known: {', '.join(USE_CASE_KEYS)})"
                )
            pairs.setdefault(USE_CASE_KEYS[key], []).append(f"{name}={value}")
    for setting_name, items in pairs.items():
        if setting_name in given:
            raise SettingsError(f"{path}: {setting_name} is given twice: as a key and in [use_cases]")
        given[setting_name] = ",".join(items)
    return given


def _read_section(
    section: type,
    environ: Mapping[str, str],
    table: Mapping[str, Any],
    path: Path | None,
    prefix: str,
    values: dict[str, Any],
    origins: dict[str, str],
) -> dict[str, Any]:
    """One section's values, in declaration order (a default may depend on the values read before it)."""
    read: dict[str, Any] = {}
    for name, declared in declared_settings(section):
        raw, where = _raw(declared, environ, table, name, path)
        if raw is None:
            value = declared.default_for(values)
        else:
            try:
                value = declared.parse(raw)
            except SettingError as exc:
                raise SettingsError(f"{where} {exc}") from None
            origins[f"{prefix}{name}"] = where
        read[name] = values[name] = value
    return read


def _raw(
    declared: Setting, environ: Mapping[str, str], table: Mapping[str, Any], name: str, path: Path | None
) -> tuple[str | None, str]:
    """The text a setting was given, and where ("environment NAME", "pipeline.toml: name"): the
    environment first (its variable, then the others it also reads), then the config file."""
    for variable in (declared.variable, *declared.also):
        value = environ.get(variable)
        if value not in (None, ""):
            return value, f"environment {variable}"
    if name in table:
        value = table[name]
        if isinstance(value, list):
            value = ",".join(str(item) for item in value)
        elif isinstance(value, bool):
            value = "on" if value else "off"
        elif isinstance(value, dict):
            value = json_text(value)
        return str(value), f"{path}: {name}"
    return None, "default"


def json_text(value: Mapping[str, Any]) -> str:
    import json

    return json.dumps(value)


def _refuse_unknown_keys(table: Mapping[str, Any], path: Path | None) -> None:
    sections = plugin_sections()
    known = {name for name, _ in declared_settings(Settings)} | set(sections)
    for key, value in table.items():
        if key not in known:
            raise SettingsError(f"{path}: unknown setting {key!r} (known: {', '.join(sorted(known))})")
        if key in sections:
            own = {name for name, _ in declared_settings(sections[key])}
            unknown = sorted(set(value) - own)
            if unknown:
                raise SettingsError(
                    f"{path}: [{key}] has no setting {unknown[0]!r} (known: {', '.join(sorted(own))})"
                )


def export_for_dagster(name: str, value: str, *, unless_set: bool = False) -> None:
    """Set a variable Dagster's own code reads in this process and the processes it starts
    (DAGSTER_HOME, the PostgreSQL URL `dagster.yaml` names, its event batch size); `unless_set`: keep a
    value the user gave."""
    if unless_set:
        os.environ.setdefault(name, value)
    else:
        os.environ[name] = value


def environment() -> dict[str, str]:
    """This process's environment (to look for secrets in what Dagster's files hold)."""
    return dict(os.environ)


# --- the configuration doc -------------------------------------------------------------------------


def settings_markdown() -> str:
    """The tables of docs/configuration.md: one per section, every setting with its variable, config-file
    key, default and meaning."""
    lines = []
    for title, section, prefix in (
        ("Core", Settings, ""),
        *(
            (f"Plugin `{name}` (`[{name}]` in the config file)", cls, f"{name}.")
            for name, cls in plugin_sections().items()
        ),
    ):
        lines += [f"### {title}", "", "| variable | config key | default | meaning |", "|---|---|---|---|"]
        for name, declared in declared_settings(section):
            variables = " or ".join(f"`{v}`" for v in (declared.variable, *declared.also))
            lines.append(
                f"| {variables} | `{prefix}{name}` | {declared.describe_default()} | {declared.doc} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    if "--markdown" in sys.argv:
        print(settings_markdown(), end="")


if __name__ == "__main__":
    main()
