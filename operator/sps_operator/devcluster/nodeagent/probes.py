"""Probe scheduling and thresholds (pure): when a probe is due and what a result means.

Semantics follow kubelet: readiness starts as "not ready", startup and liveness as
"success"; readiness and liveness do not run until the startup probe has passed; a
probe flips only after successThreshold/failureThreshold consecutive results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ProbeKind = Literal["startup", "readiness", "liveness"]
PROBE_FIELDS: dict[ProbeKind, str] = {
    "startup": "startupProbe",
    "readiness": "readinessProbe",
    "liveness": "livenessProbe",
}


@dataclass(frozen=True)
class ProbeSpec:
    kind: ProbeKind
    action: Mapping[str, Any]  # {"httpGet": ...} | {"tcpSocket": ...} | {"exec": ...}
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def from_k8s(cls, kind: ProbeKind, probe: Mapping[str, Any]) -> ProbeSpec:
        action = {k: probe[k] for k in ("httpGet", "tcpSocket", "exec", "grpc") if k in probe}
        return cls(
            kind=kind,
            action=action,
            initial_delay=float(probe.get("initialDelaySeconds", 0)),
            period=float(probe.get("periodSeconds", 10)),
            timeout=float(probe.get("timeoutSeconds", 1)),
            success_threshold=int(probe.get("successThreshold", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
        )


def container_probes(container: Mapping[str, Any]) -> list[ProbeSpec]:
    return [
        ProbeSpec.from_k8s(kind, container[field])
        for kind, field in PROBE_FIELDS.items()
        if container.get(field)
    ]


@dataclass
class ProbeTracker:
    """State of one probe of one running container (reset when the container restarts)."""

    spec: ProbeSpec
    next_due: float
    successes: int = 0
    failures: int = 0
    result: bool = True
    in_flight: bool = False

    @classmethod
    def start(cls, spec: ProbeSpec, container_started_at: float) -> ProbeTracker:
        return cls(
            spec=spec,
            next_due=container_started_at + spec.initial_delay,
            result=spec.kind != "readiness",
        )

    def due(self, now: float, started: bool) -> bool:
        """Whether to run it now; readiness/liveness wait for the startup probe."""
        if self.in_flight or now < self.next_due:
            return False
        if self.spec.kind == "startup" and self.result and self.successes > 0:
            return False  # passed once: kubelet stops probing startup
        return started or self.spec.kind == "startup"

    def begin(self, now: float) -> None:
        self.in_flight = True
        self.next_due = now + self.spec.period

    def record(self, ok: bool) -> bool | None:
        """Count a result; returns the new result when the probe flips, else None."""
        self.in_flight = False
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            flip = not self.result and self.successes >= self.spec.success_threshold
        else:
            self.successes, self.failures = 0, self.failures + 1
            # A readiness probe that never succeeded is already "not ready".
            flip = self.result and self.failures >= self.spec.failure_threshold
        if flip:
            self.result = ok
            return ok
        return None


def startup_passed(trackers: Mapping[ProbeKind, ProbeTracker]) -> bool:
    """Started once the startup probe succeeded (or right away without one)."""
    startup = trackers.get("startup")
    return startup is None or (startup.result and startup.successes > 0)


def readiness_ok(trackers: Mapping[ProbeKind, ProbeTracker]) -> bool:
    readiness = trackers.get("readiness")
    return readiness is None or readiness.result


def wants_kill(kind: ProbeKind, flipped_to: bool | None) -> bool:
    """A startup or liveness probe that flipped to failure kills the container."""
    return flipped_to is False and kind in ("startup", "liveness")
