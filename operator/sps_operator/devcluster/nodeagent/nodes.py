"""Node and Lease objects for simulated GPU nodes (pure builders, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sps_operator.constants import GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, GPU_RESOURCE

from .config import NodeSpec

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
AGENT_VERSION = "sps-node-agent/0.1"

# Generous CPU/memory so the scheduler only ever rejects a pod for the GPU dimension.
NODE_CPU = "64"
NODE_MEMORY = "512Gi"
NODE_PODS = "110"


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_labels(spec: NodeSpec) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "sps-simulated",
        GPU_PRODUCT_LABEL: spec.gpu_product,
        GPU_COUNT_LABEL: str(spec.gpus),
        "nvidia.com/gpu.present": "true",
        "sps.dev/simulated-node": "true",
    }


def node_object(spec: NodeSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": node_labels(spec),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
    }


def node_resources(spec: NodeSpec) -> dict[str, str]:
    return {
        "cpu": NODE_CPU,
        "memory": NODE_MEMORY,
        "pods": NODE_PODS,
        "ephemeral-storage": "1Ti",
        GPU_RESOURCE: str(spec.gpus),
    }


def node_status(
    spec: NodeSpec, host_ip: str, now: datetime, ready_since: datetime, kubelet_port: int = 0
) -> dict[str, Any]:
    """The node's status: capacity, the usual conditions (Ready=True), address and info."""
    beat, since = rfc3339(now), rfc3339(ready_since)

    def condition(type_: str, status: str, reason: str, message: str) -> dict[str, str]:
        return {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": beat,
            "lastTransitionTime": since,
        }

    resources = node_resources(spec)
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
            condition("Ready", "True", "KubeletReady", f"{AGENT_VERSION} is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": host_ip},
            {"type": "Hostname", "address": spec.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": spec.name,
            "systemUUID": spec.name,
            "bootID": spec.name,
            "kernelVersion": "simulated",
            "osImage": "sps-operator simulated GPU node",
            "containerRuntimeVersion": "sps-node-agent://0.1",
            "kubeletVersion": "v1.36.0-sps",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def lease_object(node_name: str, node_uid: str | None, now: datetime) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": node_name, "namespace": LEASE_NAMESPACE}
    if node_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": micro_time(now),
        },
    }


def pod_event(
    pod: dict[str, Any],
    node: str,
    type_: str,
    reason: str,
    message: str,
    container: str | None,
    now: datetime,
) -> dict[str, Any]:
    """A core/v1 Event about a pod, as kubelet reports them."""
    meta = pod["metadata"]
    involved: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
    }
    if container:
        field = (
            "initContainers"
            if any(c["name"] == container for c in pod["spec"].get("initContainers") or [])
            else "containers"
        )
        involved["fieldPath"] = f"spec.{field}{{{container}}}"
    stamp = rfc3339(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta['name']}.",
            "namespace": meta["namespace"],
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "source": {"component": "kubelet", "host": node},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "reportingComponent": "kubelet",
        "reportingInstance": node,
    }
