"""Prometheus metrics (prometheus_client): runs by outcome, profiling duration, table age,
rollouts, passes."""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class _Ref(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # Every label set used, per profile: a deleted profile's series are removed, not left
        # frozen at their last value.
        self._series: dict[tuple[str, str], set[tuple[Any, tuple[str, ...]]]] = {}
        self._lock = threading.Lock()
        labels = ["namespace", "profile"]
        self.runs = Counter(
            "sps_profiling_runs_total",
            "Profiling runs by outcome (started, succeeded, failed, rejected).",
            [*labels, "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "sps_profiling_duration_seconds",
            "Wall time of a profiling run, start to published (or failed).",
            labels,
            buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200),
            registry=self.registry,
        )
        self.age = Gauge(
            "sps_table_age_seconds",
            "Age of the live table per GPU product.",
            [*labels, "gpu_product"],
            registry=self.registry,
        )
        self.waits = Histogram(
            "sps_gpu_wait_seconds",
            "Time a profiling Job waited for GPUs (or for Kueue) before it ran or gave up.",
            labels,
            buckets=(1, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600),
            registry=self.registry,
        )
        self.rollouts = Counter(
            "sps_rollouts_total",
            "Deployment rollouts applied by mode.",
            [*labels, "mode"],
            registry=self.registry,
        )

        self.passes = Counter(
            "sps_reconcile_passes_total",
            "Reconcile passes per profile. Events and wake-ups cause them: a rate that stays "
            "high while nothing changes means a profile is passed back to back.",
            labels,
            registry=self.registry,
        )

    def _child(self, metric: Any, ref: _Ref, *extra: str) -> Any:
        labels = (ref.namespace, ref.name, *extra)
        with self._lock:
            self._series.setdefault((ref.namespace, ref.name), set()).add((metric, labels))
        return metric.labels(*labels)

    def gpu_wait(self, ref: _Ref, seconds: float) -> None:
        self._child(self.waits, ref).observe(max(seconds, 0.0))

    def run_started(self, ref: _Ref) -> None:
        self._child(self.runs, ref, "started").inc()

    def run_finished(self, ref: _Ref, outcome: str, seconds: float) -> None:
        self._child(self.runs, ref, outcome).inc()
        self._child(self.duration, ref).observe(max(seconds, 0.0))

    def passed(self, ref: _Ref) -> None:
        self._child(self.passes, ref).inc()

    def rollout(self, ref: _Ref, mode: str) -> None:
        self._child(self.rollouts, ref, mode).inc()

    def table_age(self, ref: _Ref, gpu: str, profiled_at: str | None, now: datetime) -> None:
        if not profiled_at:
            return
        then = datetime.fromisoformat(profiled_at.replace("Z", "+00:00"))
        self._child(self.age, ref, gpu).set((now - then).total_seconds())

    def forget(self, namespace: str, name: str) -> None:
        """Remove every series of a deleted profile."""
        with self._lock:
            series = self._series.pop((namespace, name), set())
        for metric, labels in series:
            with contextlib.suppress(KeyError):
                metric.remove(*labels)

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)
