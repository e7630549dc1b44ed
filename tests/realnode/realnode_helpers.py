"""Helpers for the real-node tests: pod manifests from the bed's images, waiting."""

from __future__ import annotations

import json
from typing import Any

from sps_testbed import RealNodeCluster
from waiting import wait_for

RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def get_json(bed: RealNodeCluster, *args: str) -> dict[str, Any]:
    return dict(json.loads(bed.kubectl("get", *args, "-o", "json")))


def apply(bed: RealNodeCluster, namespace: str, *objects: dict[str, Any]) -> None:
    bed.kubectl(
        "apply", "-n", namespace, "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects)
    )


def pod(
    name: str,
    image: str,
    command: list[str],
    *,
    security: dict[str, Any] | None = None,
    pod_security: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    gpus: int = 0,
    restart: str = "Never",
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "securityContext": {**RESTRICTED_CONTAINER, **(security or {})},
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 1,
        "containers": [container],
    }
    if pod_security:
        spec["securityContext"] = pod_security
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def pod_phase(bed: RealNodeCluster, namespace: str, name: str) -> str:
    return str(get_json(bed, "pod", name, "-n", namespace).get("status", {}).get("phase", ""))


def finished(bed: RealNodeCluster, namespace: str, name: str, timeout: float = 90.0) -> str:
    """Wait until the pod Succeeded or Failed; return the phase."""
    return str(
        wait_for(
            f"pod {namespace}/{name} finished",
            lambda: (p := pod_phase(bed, namespace, name)) in ("Succeeded", "Failed") and p,
            timeout,
        )
    )


def logs(bed: RealNodeCluster, namespace: str, name: str) -> str:
    return bed.kubectl("logs", "-n", namespace, name, check=False)
