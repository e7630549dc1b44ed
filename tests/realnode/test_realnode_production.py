"""A server pod as production clusters write it, profiled end to end on the real bed: one
Deployment with every feature the clone must carry over (issue 19 §4), one profile, each
asserted on the profiling Job's pod and its statuses as the kubelet reports them.

* model weights on a ReadWriteOnce claim bound to a PersistentVolume with node affinity
  to one H100 node: the Job is pinned to that node (controller/policies/claims.py) and runs there;
* imagePullSecrets (a dockerconfigjson Secret): the Job's pod carries the reference;
* an HF token from a Secret (env secretKeyRef): copied by reference, resolved by the
  kubelet (a missing key would stop the container), never read by the operator;
* a GPU taint on every H100 node and the Deployment's toleration (tainted here, untainted
  in teardown: this test does not share the bed);
* `runtimeClassName: nvidia`: a RuntimeClass of that name whose handler is the bed's runc;
* an init container, a native sidecar, and a plain sidecar in `containers`, which the clone
  runs as a native sidecar (docs/operator.md, What the clone copies).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from realnode_helpers import RESTRICTED_CONTAINER, apply, get_json
from realnode_profiles import (
    SIM_TIME_SCALE,
    chart_installed,
    diagnostics,
    load,
    quick,
    serves,
    wait_ready,
    with_env,
)

from sps_operator.api import labels as L
from sps_sim.costmodel import GPU_H100
from sps_testbed import RealNodeCluster

GPU_LABEL = "nvidia.com/gpu.product"
TAINT = "nvidia.com/gpu=present:NoSchedule"
RUNTIME_CLASS = "nvidia"
SLEEP = "exec sleep 100000"


@pytest.fixture(scope="module")
def release(realnode_cluster: RealNodeCluster) -> Iterator[str]:
    with chart_installed(realnode_cluster, f"sps-system-{uuid.uuid4().hex[:5]}") as release_ns:
        yield release_ns


@pytest.fixture()
def tainted_gpu_nodes(realnode_cluster: RealNodeCluster) -> Iterator[list[str]]:
    """Every H100 node tainted as GPU nodes often are; untainted afterwards."""
    bed = realnode_cluster
    nodes = sorted(
        n["metadata"]["name"]
        for n in get_json(bed, "nodes", "-l", f"{GPU_LABEL}={GPU_H100}")["items"]
    )
    assert nodes, "the bed has no H100 node"
    try:
        for node in nodes:
            bed.kubectl("taint", "nodes", node, TAINT, "--overwrite")
        yield nodes
    finally:
        for node in nodes:
            bed.kubectl("taint", "nodes", node, f"{TAINT}-", check=False)


@pytest.fixture()
def runtime_class(realnode_cluster: RealNodeCluster) -> Iterator[str]:
    """The name users write (`nvidia`), handled by the bed's runtime (runc)."""
    bed = realnode_cluster
    created = not bed.kubectl("get", "runtimeclass", RUNTIME_CLASS, "--ignore-not-found")
    if created:
        body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": RUNTIME_CLASS}, "handler": "runc"}  # fmt: skip
        bed.kubectl("apply", "-f", "-", input=json.dumps(body))
    try:
        yield RUNTIME_CLASS
    finally:
        if created:
            bed.kubectl("delete", "runtimeclass", RUNTIME_CLASS, "--wait=false", check=False)


@pytest.fixture()
def weights_volume(realnode_cluster: RealNodeCluster, tainted_gpu_nodes: list[str]) -> Iterator[
    tuple[str, str]
]:  # fmt: skip
    """A PersistentVolume on one H100 node (hostPath, node affinity): (its name, the node)."""
    bed, node = realnode_cluster, tainted_gpu_nodes[0]
    name = f"sps-weights-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": name,
            "hostPath": {"path": f"/tmp/{name}", "type": "DirectoryOrCreate"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
            ]}]}},
        },
    }  # fmt: skip
    bed.kubectl("apply", "-f", "-", input=json.dumps(body))
    try:
        yield name, node
    finally:
        bed.kubectl("delete", "pv", name, "--wait=false", check=False)


def production_objects(bed: RealNodeCluster, storage_class: str) -> list[dict[str, Any]]:
    """The Secrets, the claim and the Deployment (examples/sglang-deployment.yaml with
    every production feature)."""
    auth = base64.b64encode(b"u:p").decode()
    docker_config = json.dumps({"auths": {"registry.example.com": {"auth": auth}}})
    pull_secret = {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(docker_config.encode()).decode()},
    }  # fmt: skip
    token = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf"},
             "stringData": {"token": "hf_not_a_real_token"}}  # fmt: skip
    claim = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "weights"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip
    server = with_env(load("sglang-deployment.yaml"), {"SPS_SIM_TIME_SCALE": SIM_TIME_SCALE})
    pod = server["spec"]["template"]["spec"]
    (sglang,) = pod["containers"]
    hf_token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    sglang["env"].append(hf_token)
    sglang["volumeMounts"] = [{"name": "weights", "mountPath": "/models", "readOnly": True}]
    image = bed.image("sglang")

    def helper(name: str, script: str, **extra: Any) -> dict[str, Any]:
        mounts = [{"name": "scratch", "mountPath": "/scratch"}]
        return {"name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script], "securityContext": dict(RESTRICTED_CONTAINER),
                "volumeMounts": mounts, **extra}  # fmt: skip

    pod.update(
        {
            "imagePullSecrets": [{"name": "registry"}],
            "runtimeClassName": RUNTIME_CLASS,
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "initContainers": [
                helper("fetch-config", "echo ready > /scratch/init-done"),
                helper("mesh-proxy", SLEEP, restartPolicy="Always"),
            ],
            "volumes": [
                {"name": "weights", "persistentVolumeClaim": {"claimName": "weights"}},
                {"name": "scratch", "emptyDir": {}},
            ],
        }
    )
    # A plain sidecar that needs the token and the init container's file: it exits (and
    # the kubelet restarts it) without them.
    pod["containers"].append(
        helper(
            "log-shipper",
            f'[ -n "$HF_TOKEN" ] && [ -f /scratch/init-done ] || exit 3; {SLEEP}',
            env=[hf_token],
        )
    )
    return [pull_secret, token, claim, server]


def statuses(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    status = pod.get("status") or {}
    every = status.get("initContainerStatuses", []) + status.get("containerStatuses", [])
    return {s["name"]: s for s in every}


def started(status: dict[str, Any]) -> bool:
    state = status.get("state") or {}
    return bool((state.get("running") or state.get("terminated") or {}).get("startedAt"))


def test_a_production_server_pod_is_cloned_with_every_feature_and_goes_live(
    realnode_cluster: RealNodeCluster,
    release: str,
    realnode_namespace: str,
    runtime_class: str,
    weights_volume: tuple[str, str],
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    storage_class, node = weights_volume
    apply(bed, ns, *production_objects(bed, storage_class), quick(load("diagonal.yaml")))
    prof = wait_ready(bed, release, ns, "llama")
    why = diagnostics(bed, release, ns, "llama")
    (table,) = prof["status"]["tables"]
    job = get_json(bed, "job", table["run"], "-n", ns)
    assert job["status"].get("succeeded") == 1, why
    (job_pod,) = get_json(bed, "pods", "-n", ns, "-l", f"job-name={table['run']}")["items"]
    spec, kubelet = job_pod["spec"], statuses(job_pod)

    # ReadWriteOnce weights: pinned to the node holding the claim, next to the GPU pin.
    assert spec["nodeName"] == node, why
    assert spec["nodeSelector"][GPU_LABEL] == GPU_H100
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "metadata.name", "operator": "In", "values": [node]} in terms[
        "nodeSelectorTerms"
    ][0]["matchFields"], spec["affinity"]
    assert f"pin it to node {node}" in job["metadata"]["annotations"][L.ANNOTATION_VOLUME_PIN]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]
              if "persistentVolumeClaim" in v]  # fmt: skip
    assert claims == ["weights"]

    # The pull secret, the runtime class and the toleration, as written on the target.
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["runtimeClassName"] == RUNTIME_CLASS
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]

    # The containers: the init container ran to success, the native sidecar and the plain
    # one (now native) ran beside the clone's server, the plain one found the token and the
    # init container's file the first time (it exits otherwise).
    inits = {c["name"]: c for c in spec["initContainers"]}
    assert list(inits) == ["fetch-config", "mesh-proxy", "log-shipper", "sglang-server"], why
    assert "restartPolicy" not in inits["fetch-config"]
    assert inits["mesh-proxy"]["restartPolicy"] == inits["log-shipper"]["restartPolicy"] == "Always"
    assert kubelet["fetch-config"]["state"]["terminated"]["exitCode"] == 0, kubelet
    for name in ("mesh-proxy", "log-shipper", "sglang-server"):
        assert started(kubelet[name]), kubelet[name]
    assert kubelet["log-shipper"]["restartCount"] == 0, kubelet["log-shipper"]
    assert kubelet["profiler"]["state"]["terminated"]["exitCode"] == 0, kubelet["profiler"]

    # The HF token: by reference on the clone's server, never as a value.
    server_env = {e["name"]: e for e in inits["sglang-server"]["env"]}
    assert server_env["HF_TOKEN"] == {
        "name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}
    }  # fmt: skip
    assert "hf_not_a_real_token" not in json.dumps(job)

    # The table went live: the Deployment rolled onto it, on the claim's node, and serves it.
    serving = serves(bed, ns, "llama", table["hash"])
    assert serving["spec"]["nodeName"] == node
