"""Several model servers behind one backend: the host list, and which host a run is pinned to.

A host is written as one string, so the list fits one environment variable (PIPELINE_LLM_HOSTS, hosts
separated by `;`):

    http://gpu-a:11434 parallel=4 models=gemma3:270m,qwen3:8b; http://gpu-b:11434 parallel=2

`parallel` is how many requests the server works on at once (Ollama's OLLAMA_NUM_PARALLEL, llama-server's
`--parallel`, unset: the backend's default); a run pinned to the host keeps that many in flight. `models`
limits which models the host serves (unset: all). The discovery sensor pins each run to one host (the run
tag `LLM_HOST_TAG`) and the run queue limits the runs per host; a run without the tag (a UI backfill, a
manual run) is spread over the hosts by its run id.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from appdb.redaction import MASK, redact

LLM_HOST_TAG = "pipeline/llm_host"
"""The host (its URL) a run is pinned to; the run queue's per-host limit counts runs by this tag."""
HOST_PAUSE_PREFIX = "host:"
"""Circuit-breaker pauses of a host are stored beside the use cases' pauses under `host:<url>`."""


def is_loopback_host(host: str) -> bool:
    """Whether a server URL (or bare host) points at this machine: its calls are local (not paced,
    not priced)."""
    import httpx  # only here: `pipeline status` reads the settings without an HTTP client

    name = (httpx.URL(host if "://" in host else f"http://{host}").host or "").lower()
    return name in ("localhost", "::1", "") or name.startswith("127.")


@dataclass(frozen=True)
class LLMHost:
    url: str
    parallel: int | None = None
    models: tuple[str, ...] = ()

    def serves(self, model: str | None) -> bool:
        return not self.models or model is None or model in self.models

    @property
    def label(self) -> str:
        """The URL as shown and stored (run tags, pool names, pause keys): credentials redacted."""
        return redact(self.url)

    @property
    def pause_key(self) -> str:
        return f"{HOST_PAUSE_PREFIX}{self.label}"


def parse_host(spec: str) -> LLMHost:
    """`URL [parallel=N] [models=a,b]` -> LLMHost; a clear error for anything else."""
    url, *fields = spec.split()
    if "://" not in url:
        raise ValueError(f"an LLM host must start with its URL (http://host:port), not {spec!r}")
    parallel: int | None = None
    models: tuple[str, ...] = ()
    for item in fields:
        name, _, value = item.partition("=")
        if name == "parallel" and value.isdigit() and int(value) >= 1:
            parallel = int(value)
        elif name == "models" and value:
            models = tuple(model for model in value.split(",") if model)
        else:
            raise ValueError(
                f"in the LLM host {spec!r}: {item!r} is not `parallel=N` (N >= 1) or `models=a,b`"
            )
    return LLMHost(url.rstrip("/"), parallel, models)


def parse_hosts(specs: str | Sequence[str]) -> list[LLMHost]:
    """A `;`-separated list (or a sequence) of host specs; duplicates are an error."""
    items = specs.split(";") if isinstance(specs, str) else list(specs)
    hosts = [parse_host(item) for item in items if item.strip()]
    urls = [host.url for host in hosts]
    if len(set(urls)) != len(urls):
        raise ValueError(f"an LLM host is listed twice: {urls}")
    return hosts


def host_for_run(hosts: Sequence[LLMHost], run: Any) -> LLMHost | None:
    """The host a run is pinned to (its tag), else one picked by its run id; None without hosts."""
    if not hosts:
        return None
    tags: Mapping[str, str] = getattr(run, "tags", None) or {}
    pinned = tags.get(LLM_HOST_TAG)
    for host in hosts:
        if pinned in (host.label, host.url):
            return host
    run_id = getattr(run, "run_id", "") or ""
    return hosts[zlib.crc32(run_id.encode()) % len(hosts)]


def with_credentials(host: LLMHost | None, configured: str = "") -> LLMHost | None:
    """The host with its real URL when the code location holds it redacted (its `label`, so the UI
    never shows a password): the URL in `configured` (the resource's `host_credentials`: the setting
    the hosts came from, which Dagster reads from its environment variable in the run) that redacts
    to the host's."""
    if host is None or MASK not in host.url:
        return host
    for token in re.split(r"[;\s]+", configured or ""):
        if "://" in token and redact(token.rstrip("/")) == host.url:
            return replace(host, url=token.rstrip("/"))
    return host
