"""Facts about a Deployment's rollout (pure)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.policies.selectors import matches_selector

# What a blocked rollout's message may hold (it goes into a condition and explain).
MAX_BLOCKERS = 3


def deployment_rolled_out(dep: Mapping[str, Any]) -> bool:
    """Like `kubectl rollout status`: the new template is observed and fully available."""
    meta, spec, status = dep.get("metadata", {}), dep.get("spec", {}), dep.get("status", {})
    if status.get("observedGeneration", 0) < meta.get("generation", 0):
        return False
    replicas = spec.get("replicas", 1)
    return (
        status.get("updatedReplicas", 0) >= replicas
        and status.get("availableReplicas", 0) >= replicas
        and status.get("replicas", 0) <= replicas
    )


def _resolve(value: Any, replicas: int, round_up: bool) -> int:
    """An intOrString of the rolling-update strategy, as the Deployment controller reads
    it (percentages round up for maxSurge, down for maxUnavailable)."""
    if isinstance(value, str) and value.endswith("%"):
        try:
            share = float(value[:-1]) / 100 * replicas
        except ValueError:
            return 0
        return math.ceil(share) if round_up else math.floor(share)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def max_unavailable(dep: Mapping[str, Any], replicas: int) -> int | None:
    """Pods a RollingUpdate of `replicas` may take down before their replacements are
    available (None: the strategy is Recreate, which takes all of them down)."""
    strategy = (dep.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return None
    rolling = strategy.get("rollingUpdate") or {}
    surge = _resolve(rolling.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = _resolve(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        return 1  # the Deployment controller's own rule: it must be able to progress
    return unavailable


def target_pods(dep: Mapping[str, Any], pods: Iterable[PodInfo]) -> list[PodInfo]:
    """The Deployment's pods (by its selector) that are not being deleted."""
    selector = (dep.get("spec") or {}).get("selector") or {}
    if not selector:
        return []
    return [p for p in pods if not p.deleting and matches_selector(selector, p.labels)]


def every_ready_pod_runs(dep: Mapping[str, Any], pods: Iterable[PodInfo], table_hash: str) -> bool:
    """Every ready pod of the Deployment carries the table's hash (its pod-template
    annotation): no pod serves without the table."""
    return all(p.table_hash == table_hash for p in target_pods(dep, pods) if p.ready)


def rollout_blockers(
    dep: Mapping[str, Any], pods: Iterable[PodInfo], table_hash: str
) -> str | None:
    """What keeps the rollout of `table_hash` from completing, in the scheduler's, the
    kubelet's and the Deployment controller's own words (None: nothing seen)."""
    found: list[str] = []
    for pod in target_pods(dep, pods):
        if pod.table_hash != table_hash:
            continue
        if pod.unschedulable:
            found.append(f"pod {pod.name} cannot be scheduled: {pod.unschedulable}")
        elif pod.stuck:
            found.append(f"pod {pod.name}: {pod.stuck}")
    for c in (dep.get("status") or {}).get("conditions") or []:
        if c.get("type") == "ReplicaFailure" and c.get("status") == "True":
            found.append(
                f"the ReplicaSet cannot create pods: {c.get('message') or c.get('reason')}"
            )
    if not found:
        return None
    more = len(found) - MAX_BLOCKERS
    return "; ".join(found[:MAX_BLOCKERS]) + (f" (and {more} more)" if more > 0 else "")


def progress_deadline_seconds(dep: Mapping[str, Any]) -> int:
    value = (dep.get("spec") or {}).get("progressDeadlineSeconds", 600)
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 600
