"""Facts about a Deployment's rollout (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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
