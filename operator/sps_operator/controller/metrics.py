"""Prometheus metrics (prometheus_client): runs by outcome, profiling duration, table age,
rollouts."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class _Ref(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
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
        self.rollouts = Counter(
            "sps_rollouts_total",
            "Deployment rollouts applied by mode.",
            [*labels, "mode"],
            registry=self.registry,
        )

    def run_started(self, ref: _Ref) -> None:
        self.runs.labels(ref.namespace, ref.name, "started").inc()

    def run_finished(self, ref: _Ref, outcome: str, seconds: float) -> None:
        self.runs.labels(ref.namespace, ref.name, outcome).inc()
        self.duration.labels(ref.namespace, ref.name).observe(max(seconds, 0.0))

    def rollout(self, ref: _Ref, mode: str) -> None:
        self.rollouts.labels(ref.namespace, ref.name, mode).inc()

    def table_age(self, ref: _Ref, gpu: str, profiled_at: str | None, now: datetime) -> None:
        if not profiled_at:
            return
        then = datetime.fromisoformat(profiled_at.replace("Z", "+00:00"))
        self.age.labels(ref.namespace, ref.name, gpu).set((now - then).total_seconds())

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)
