"""A code server's sensor ticks share one Dagster instance, not one opened and closed per tick.

Dagster's code server evaluates each sensor tick in a `SensorEvaluationContext` made from the
daemon's instance ref (`dagster/_grpc/impl.py: get_external_sensor_execution`), and the context
opens a `DagsterInstance` from it as soon as a resource or the sensor asks, then disposes it when
the tick ends: storages, engines and a first database connection every tick of every sensor that
takes a resource (all of ours take the application database). On PostgreSQL that was ~13 CPU ms a
tick, with the discovery sensors ticking every second. Here the contexts the code server makes take
one instance per ref, opened at the first tick and kept while the process lives, as the daemon and
the webserver keep theirs for all their threads; a reload of the code location is a new code server.

The swap replaces the context class `dagster._grpc.impl` names, in the code server's process only
(installed by `pipeline_defs/runtime/run_processes.py`, the code server's entry); pinned by
`tests/unit/test_dagster_runtime_swaps.py`. Where this Dagster lacks that name, ticks open their
own instance, Dagster's way.
"""

from __future__ import annotations

import threading
from typing import Any

from dagster import DagsterInstance, SensorEvaluationContext, serialize_value

_KEPT: dict[str, DagsterInstance] = {}
_OPENING = threading.Lock()


def kept_instance(ref: Any) -> DagsterInstance:
    """The one instance of this process for `ref` (an `InstanceRef`), opened on first use."""
    key = serialize_value(ref)
    kept = _KEPT.get(key)
    if kept is None:
        with _OPENING:  # the code server evaluates sensors on several threads at once
            kept = _KEPT.get(key)
            if kept is None:
                kept = _KEPT[key] = DagsterInstance.from_ref(ref)
    return kept


class KeptInstanceSensorContext(SensorEvaluationContext):
    """A sensor tick's context whose instance is the process's kept one: it is not the context's to
    dispose when the tick ends."""

    @property
    def instance(self) -> DagsterInstance:
        if self._instance is None and self._instance_ref is not None:
            self._instance = kept_instance(self._instance_ref)
        return super().instance


def install_kept_sensor_instance() -> bool:
    """From now on, sensor ticks evaluated by a code server in this process share one instance; False
    where Dagster's code server makes its contexts otherwise than its pinned way."""
    from dagster._grpc import impl

    current = getattr(impl, "SensorEvaluationContext", None)
    if current is KeptInstanceSensorContext:
        return True
    if current is not SensorEvaluationContext:
        return False
    impl.SensorEvaluationContext = KeptInstanceSensorContext  # ty: ignore[invalid-assignment]
    return True


__all__ = ["KeptInstanceSensorContext", "install_kept_sensor_instance", "kept_instance"]
