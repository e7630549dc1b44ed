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


# The kinds the tests read, as `kubectl get` names them: (API prefix, plural, namespaced).
API_KINDS: dict[str, tuple[str, str, bool]] = {
    "pod": ("api/v1", "pods", True),
    "node": ("api/v1", "nodes", False),
    "configmap": ("api/v1", "configmaps", True),
    "secret": ("api/v1", "secrets", True),
    "service": ("api/v1", "services", True),
    "endpointslices": ("apis/discovery.k8s.io/v1", "endpointslices", True),
    "job": ("apis/batch/v1", "jobs", True),
    "deployment": ("apis/apps/v1", "deployments", True),
    "crd": ("apis/apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "lease": ("apis/coordination.k8s.io/v1", "leases", True),
    "spsprofile": ("apis/sps.dev/v1alpha1", "spsprofiles", True),
    "leaderworkerset": ("apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets", True),
    "workloads.kueue.x-k8s.io": ("apis/kueue.x-k8s.io/v1beta2", "workloads", True),
}


def api_read(args: tuple[str, ...]) -> tuple[str, list[tuple[str, str]]] | None:
    """`kubectl get KIND [NAME] [-n NS] [-l SELECTOR]` as an API path and query; None for
    what it does not know (kubectl reads that)."""
    kind, rest = args[0], list(args[1:])
    known = API_KINDS.get(kind) or API_KINDS.get(kind.removesuffix("s"))
    if known is None:
        return None
    prefix, plural, namespaced = known
    name, namespace, query = None, "default", []
    while rest:
        arg = rest.pop(0)
        if arg in ("-n", "-l") and rest:
            value = rest.pop(0)
            if arg == "-n":
                namespace = value
            else:
                query.append(("labelSelector", value))
        elif arg.startswith("-") or name is not None:
            return None
        else:
            name = arg
    if query and name is not None:
        return None
    path = f"/{prefix}/namespaces/{namespace}/{plural}" if namespaced else f"/{prefix}/{plural}"
    return (f"{path}/{name}" if name else path), query


def get_json(bed: RealNodeCluster, *args: str) -> dict[str, Any]:
    """What `kubectl get ARGS -o json` prints, read through the bed's kept admin client
    (these reads sit in polling loops: a kubectl process each cost CPU the bed needs)."""
    read = api_read(args)
    if read is None:
        return dict(json.loads(bed.kubectl("get", *args, "-o", "json")))
    path, query = read
    obj = bed.api("GET", path, query=query)
    assert obj is not None, f"not found: {' '.join(args)}"
    return obj


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
