"""Which model server each requested run goes to (several hosts: docs/operations.md).

The discovery sensor pins every LLM run to one host with the run tag `LLM_HOST_TAG`; the run queue lets
at most PIPELINE_RUNS_PER_HOST runs per host work at once (a tag limit per unique value in dagster.yaml),
and the run's LLM resource talks to that host only, with as many requests in flight as the host has
slots. A host is skipped while its circuit breaker holds it paused (`host:<url>` in `pipeline pauses`)
or when it does not serve the group's model; its postings then go to the others. Batches go to the
host with the fewest runs queued or running per slot, so a faster host gets more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence

from dagster import DagsterInstance, RunRequest, RunsFilter

from resources.llm_hosts import LLM_HOST_TAG, LLMHost


def usable_hosts(hosts: Sequence[LLMHost], model: str | None, paused: Collection[str]) -> list[LLMHost]:
    """The hosts that serve `model` and whose breaker is not open."""
    return [host for host in hosts if host.serves(model) and host.pause_key not in paused]


def pin_requests(
    requests: Sequence[RunRequest],
    hosts: Sequence[LLMHost],
    instance: DagsterInstance,
    active_statuses: Sequence,
) -> list[RunRequest]:
    """Each request tagged with the least loaded of `hosts` (runs in flight per slot, counting these)."""
    if not requests or not hosts:
        return list(requests)
    load: Counter[str] = Counter()
    for run in instance.get_runs(RunsFilter(statuses=list(active_statuses))):
        if run.tags.get(LLM_HOST_TAG):
            load[run.tags[LLM_HOST_TAG]] += 1
    pinned = []
    for request in requests:
        host = min(hosts, key=lambda h: ((load[h.label] + 1) / (h.parallel or 1), hosts.index(h)))
        load[host.label] += 1
        pinned.append(request.with_replaced_attrs(tags={**request.tags, LLM_HOST_TAG: host.label}))
    return pinned
