"""Facts about a profiling run's Job (pure): which pods are its own, and how many pods it
runs at once. Shared by the profiling reconciler and capacity, which import neither each
other nor each other's policies."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # placement imports job_policy, which imports this module
    from sps_operator.controller.policies.placement import PodInfo


def job_pods(pods: Iterable[PodInfo], job: Mapping[str, Any] | None) -> list[PodInfo]:
    """The pods of `job` (the run's Job, found by the UID its status records): those whose
    controller ownerReference is that UID. A pod anyone may create with the run's labels or
    an ownerReference of kind "Job" is not one of them."""
    uid = ((job or {}).get("metadata") or {}).get("uid")
    if not uid:
        return []
    return [pod for pod in pods if pod.controller_uid == uid]


def group_pods(job: Mapping[str, Any]) -> int:
    """Pods the Job runs at once: N for the Indexed Job of a multi-node clone, else 1."""
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    if spec.get("completionMode") == "Indexed" and isinstance(parallelism, int):
        return min(max(parallelism, 1), 1024)
    return 1
