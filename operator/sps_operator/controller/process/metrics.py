"""Prometheus metrics (prometheus_client), named and typed per Prometheus conventions.

Counters count events (`_total`); a state is a gauge set from the status a pass wrote
(conditions, waits, borrows); a time is a timestamp gauge (`_timestamp_seconds`), so an
age is `time() - metric` in the query and no gauge ticks. Every series of a profile is
removed when the profile is deleted, and a state's series when the state ends.
docs/operator.md lists them; the chart's alerts and dashboard use only these
(tests/ship/test_ship_monitoring.py).
"""

from __future__ import annotations

import contextlib
import platform
import threading
from collections.abc import Iterable
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)

from sps_operator import __version__
from sps_operator.api.status import SpsProfileStatus
from sps_operator.api.times import parse_rfc3339
from sps_operator.controller.policies.cost import cost_added

# Steps of a pass (state.Pass.step) and "status" (the status write): the label of
# sps_reconcile_errors_total.
PASS_STEPS = (
    "read", "trigger", "observe", "run", "start", "capacity", "rollout", "history", "report",
    "status",
)  # fmt: skip


class _Ref(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def namespace(self) -> str: ...


def _timestamp(value: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time from status; None when absent or not one."""
    when = parse_rfc3339(value)
    return when.timestamp() if when is not None else None


# No `_created` series beside every counter and histogram (prometheus_client's default,
# process-wide): they double the series and nothing here reads them.
disable_created_metrics()


# The labels of every per-profile series.
_LABELS = ["namespace", "profile"]
# The histograms are per namespace, not per profile: a histogram is 13-14 series, and what
# reads them (the dashboard's quantiles) aggregates over profiles; one profile's run times
# are in its status (`kubectl sps explain`).
_NAMESPACE = ["namespace"]


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # The process's own: CPU, memory, file descriptors, start time; Python's GC; the
        # Python version (prometheus_client's standard collectors, as the default registry has).
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        # Every label set used, per profile: a deleted profile's series are removed, not left
        # frozen at their last value.
        self._series: dict[tuple[str, str], set[tuple[Any, tuple[str, ...]]]] = {}
        # What was last counted per profile and kind ("started", "finished", "wait"): see
        # _first_time.
        self._last_counted: dict[tuple[str, str, str], str] = {}
        # The namespaces whose per-namespace series exist: removed with their last profile.
        self._namespace_series: dict[str, set[Any]] = {}
        self._lock = threading.Lock()
        # In the order /metrics shows them.
        self._add_operator_metrics()
        self._add_run_metrics()
        self._add_state_metrics()
        self._add_count_metrics()

    def _add_operator_metrics(self) -> None:
        """The operator as a whole: which version, whether it leads, its passes."""
        self.build_info = Gauge(
            "sps_build_info",
            "Always 1; the labels say which sps-operator runs.",
            ["version", "python_version"],
            registry=self.registry,
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)
        self.leader = Gauge(
            "sps_leader",
            "1 while this replica acts (holds the Lease, or runs without leader election); "
            "0 while it stands by.",
            registry=self.registry,
        )
        self.pass_duration = Histogram(
            "sps_reconcile_duration_seconds",
            "Wall time of one pass over one SpsProfile.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.pass_errors = Counter(
            "sps_reconcile_errors_total",
            "Passes in which a step raised (the status says why: reason ReconcileError or "
            "StatusWriteFailed), by step.",
            ["step"],
            registry=self.registry,
        )

    def _add_run_metrics(self) -> None:
        """Profiling runs and rollouts, per profile."""
        self.runs_started = Counter(
            "sps_profiling_runs_started_total",
            "Profiling runs started.",
            _LABELS,
            registry=self.registry,
        )
        self.runs_finished = Counter(
            "sps_profiling_runs_finished_total",
            "Profiling runs ended, by outcome: succeeded (a table published), failed "
            "(retried), rejected (not retried: a gate, a sweep mismatch, a policy).",
            [*_LABELS, "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "sps_profiling_duration_seconds",
            "Wall time of a profiling run, start to published (or failed), per namespace.",
            _NAMESPACE,
            buckets=(10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200),
            registry=self.registry,
        )
        self.waits = Histogram(
            "sps_gpu_wait_seconds",
            "Time a profiling Job waited for GPUs (or for Kueue) before it ran or gave up, "
            "per namespace.",
            _NAMESPACE,
            buckets=(1, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600),
            registry=self.registry,
        )
        self.rollouts = Counter(
            "sps_rollouts_total",
            "Deployment rollouts applied by mode.",
            [*_LABELS, "mode"],
            registry=self.registry,
        )

    def _add_state_metrics(self) -> None:
        """What each profile's status says now: its tables' age, conditions, waits, borrows."""
        self.profiled = Gauge(
            "sps_table_profiled_timestamp_seconds",
            "When each table in status was measured, per GPU product (age: time() - this).",
            [*_LABELS, "gpu_product"],
            registry=self.registry,
        )
        self.condition = Gauge(
            "sps_profile_condition",
            "1, labelled with the status each condition of an SpsProfile has now (true, "
            "false, unknown): one series per condition type.",
            [*_LABELS, "type", "status"],
            registry=self.registry,
        )
        self.waiting = Gauge(
            "sps_run_waiting_since_timestamp_seconds",
            "While a run's Job cannot run yet: since when, and why (WaitingForGPUs, "
            "QueuedInKueue, LocalQueueMissing, BorrowBlocked, KueueManagedTarget).",
            [*_LABELS, "reason"],
            registry=self.registry,
        )
        self.borrowed = Gauge(
            "sps_replica_borrowed_timestamp_seconds",
            "While a run holds a replica borrowed from a Deployment (capacity.mode "
            "BorrowReplica): since when.",
            [*_LABELS, "deployment"],
            registry=self.registry,
        )

    def _add_count_metrics(self) -> None:
        """What each profile costs: GPU seconds, lent replica seconds, passes."""
        self.gpu_seconds = Counter(
            "sps_gpu_seconds_total",
            "GPU seconds of profiling Jobs (GPUs x seconds running, not waiting), per GPU "
            "product, as this replica's status writes recorded them (status.cost): sum over "
            "the operator's replicas for the total.",
            [*_LABELS, "gpu_product"],
            registry=self.registry,
        )
        self.lent_seconds = Counter(
            "sps_replica_lent_seconds_total",
            "Seconds replicas were lent to profiling runs (capacity.mode BorrowReplica), per "
            "GPU product, counted when each is given back, as this replica's status writes "
            "recorded them (status.cost): sum over the operator's replicas for the total.",
            [*_LABELS, "gpu_product"],
            registry=self.registry,
        )
        self.passes = Counter(
            "sps_reconcile_passes_total",
            "Reconcile passes per profile. Events and wake-ups cause them: a rate that stays "
            "high while nothing changes means a profile is passed back to back.",
            _LABELS,
            registry=self.registry,
        )

    def _child(self, metric: Any, ref: _Ref, *extra: str) -> Any:
        labels = (ref.namespace, ref.name, *extra)
        with self._lock:
            self._series.setdefault((ref.namespace, ref.name), set()).add((metric, labels))
        return metric.labels(*labels)

    def _namespace_child(self, metric: Any, ref: _Ref) -> Any:
        with self._lock:
            self._series.setdefault((ref.namespace, ref.name), set())
            self._namespace_series.setdefault(ref.namespace, set()).add(metric)
        return metric.labels(ref.namespace)

    def _set_only(
        self, metric: Any, ref: _Ref, values: Iterable[tuple[tuple[str, ...], float]]
    ) -> None:
        """Set these label sets of a gauge for the profile and remove its others."""
        wanted = {(ref.namespace, ref.name, *extra): value for extra, value in values}
        with self._lock:
            series = self._series.setdefault((ref.namespace, ref.name), set())
            stale = {(m, labels) for m, labels in series if m is metric and labels not in wanted}
            series -= stale
        for _, labels in stale:
            with contextlib.suppress(KeyError):
                metric.remove(*labels)
        for labels, value in wanted.items():
            self._child(metric, ref, *labels[2:]).set(value)

    def leading(self, leading: bool) -> None:
        self.leader.set(1 if leading else 0)

    def pass_done(self, seconds: float, failed_step: str | None) -> None:
        self.pass_duration.observe(max(seconds, 0.0))
        if failed_step is not None:
            step = failed_step if failed_step in PASS_STEPS else "other"
            self.pass_errors.labels(step).inc()

    def _first_time(self, kind: str, ref: _Ref, key: str | None) -> bool:
        """Whether `key` (a run's name, a wait's run and start) is new for this profile and
        `kind`; None counts always. A pass computes from the status it reads, and one that
        reads a status without the previous pass's write yet (another writer's change came
        between) starts, ends or stops waiting for the same run a second time: counted once
        (the e2e capacity test saw a wait counted twice)."""
        if key is None:
            return True
        with self._lock:
            slot = (ref.namespace, ref.name, kind)
            if self._last_counted.get(slot) == key:
                return False
            self._last_counted[slot] = key
            return True

    def gpu_wait(self, ref: _Ref, seconds: float, wait: str | None = None) -> None:
        """One run's wait for GPUs, ended; `wait` names it (the run, when it began)."""
        if self._first_time("wait", ref, wait):
            self._namespace_child(self.waits, ref).observe(max(seconds, 0.0))

    def run_started(self, ref: _Ref, run: str | None = None) -> None:
        if self._first_time("started", ref, run):
            self._child(self.runs_started, ref).inc()

    def run_finished(self, ref: _Ref, outcome: str, seconds: float, run: str | None = None) -> None:
        if self._first_time("finished", ref, run):
            self._child(self.runs_finished, ref, outcome).inc()
            self._namespace_child(self.duration, ref).observe(max(seconds, 0.0))

    def passed(self, ref: _Ref) -> None:
        self._child(self.passes, ref).inc()

    def rollout(self, ref: _Ref, mode: str) -> None:
        self._child(self.rollouts, ref, mode).inc()

    def status(self, ref: _Ref, status: SpsProfileStatus) -> None:
        """The gauges that mirror what a pass wrote in a profile's status."""
        self._set_only(
            self.profiled,
            ref,
            (((t.gpu_product,), ts) for t in status.tables if (ts := _timestamp(t.profiled_at))),
        )
        self._set_only(
            self.condition,
            ref,
            (
                ((c.type, str(c.status).lower()), 1.0)
                for c in status.conditions
                if str(c.status).lower() in ("true", "false", "unknown")
            ),
        )
        run = status.current_run
        waiting = run.waiting if run is not None else None
        since = _timestamp(waiting.since) if waiting is not None else None
        self._set_only(
            self.waiting,
            ref,
            [((waiting.reason,), since)] if waiting is not None and since is not None else [],
        )
        borrow = run.borrow if run is not None else None
        at = _timestamp(borrow.at) if borrow is not None else None
        self._set_only(
            self.borrowed,
            ref,
            [((borrow.deployment,), at)] if borrow is not None and at is not None else [],
        )

    def cost_written(self, ref: _Ref, before: Any, after: Any) -> None:
        """Count what a successful status write added to status.cost (`cost_added`): once,
        by the replica that wrote it, whichever replica leads next."""
        for product, gpu, lent in cost_added(before, after):
            if gpu > 0:
                self._child(self.gpu_seconds, ref, product).inc(gpu)
            if lent > 0:
                self._child(self.lent_seconds, ref, product).inc(lent)

    def forget(self, namespace: str, name: str) -> None:
        """Remove every series of a deleted profile, and its namespace's with its last one."""
        with self._lock:
            series = self._series.pop((namespace, name), set())
            for kind in ("started", "finished", "wait"):
                self._last_counted.pop((namespace, name, kind), None)
            if not any(ns == namespace for ns, _ in self._series):
                series |= {(m, (namespace,)) for m in self._namespace_series.pop(namespace, ())}
        for metric, labels in series:
            with contextlib.suppress(KeyError):
                metric.remove(*labels)

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)
