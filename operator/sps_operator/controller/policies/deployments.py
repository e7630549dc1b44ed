"""Facts about a target's rollout from its pods (pure), for every kind of workload
(`workloads.py` says where each kind keeps what; the names here are the Deployment's,
which came first)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.policies.selectors import matches_selector

# What a blocked rollout's message may hold (it goes into a condition and explain).
MAX_BLOCKERS = 3


def deployment_rolled_out(dep: Mapping[str, Any]) -> bool:
    """Like `kubectl rollout status`, for any kind (`workloads.rolled_out`)."""
    return workloads.rolled_out(dep)


def max_unavailable(dep: Mapping[str, Any], replicas: int) -> int | None:
    """Replicas a roll of `replicas` may take down at once (`workloads.max_unavailable`)."""
    return workloads.max_unavailable(dep, replicas)


def progress_deadline_seconds(dep: Mapping[str, Any], admin_seconds: float = 600.0) -> int:
    """How long a roll may take (`workloads.progress_deadline_seconds`)."""
    return int(workloads.progress_deadline_seconds(dep, admin_seconds))


def target_pods(dep: Mapping[str, Any], pods: Iterable[PodInfo]) -> list[PodInfo]:
    """The workload's pods (by its selector; a LeaderWorkerSet's by its name label, every
    pod of every group) that are not being deleted."""
    selector = workloads.pod_selector(dep)
    if not selector:
        return []
    return [p for p in pods if not p.deleting and matches_selector(selector, p.labels)]


def every_ready_pod_runs(dep: Mapping[str, Any], pods: Iterable[PodInfo], table_hash: str) -> bool:
    """Every ready pod of the workload carries the table's hash (its pod-template
    annotation): no pod serves without the table. For a LeaderWorkerSet, every ready pod
    of every group, leader and workers: every rank loads the table itself."""
    return all(p.table_hash == table_hash for p in target_pods(dep, pods) if p.ready)


def rollout_blockers(
    dep: Mapping[str, Any], pods: Iterable[PodInfo], table_hash: str
) -> str | None:
    """What keeps the rollout of `table_hash` from completing, in the scheduler's, the
    kubelet's and the workload controller's own words, and what in the workload's update
    strategy waits for a person (None: nothing seen)."""
    found: list[str] = []
    for pod in target_pods(dep, pods):
        if pod.table_hash != table_hash:
            continue
        if pod.unschedulable:
            found.append(f"pod {pod.name} cannot be scheduled: {pod.unschedulable}")
        elif pod.stuck:
            found.append(f"pod {pod.name}: {pod.stuck}")
    failure = workloads.controller_failure(dep)
    if failure:
        found.append(failure)
    waits = workloads.roll_waits(dep)
    if waits and not workloads.rolled_out(dep):
        found.insert(0, waits)
    if not found:
        return None
    more = len(found) - MAX_BLOCKERS
    return "; ".join(found[:MAX_BLOCKERS]) + (f" (and {more} more)" if more > 0 else "")
