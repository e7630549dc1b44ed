"""Workloads on the simulated GPU nodes: an SGLang Deployment served by sps-sim that
follows its nodeSelector across GPU products, pod networking, and in-cluster API access
limited by RBAC. Against the real local control plane."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from nodeagent_helpers import apply, get_json, wait_until

from sps_operator.constants import GPU_H100, GPU_H200, GPU_PRODUCT_LABEL
from sps_operator.devcluster.nodeagent import read_container_log

pytestmark = pytest.mark.k8s


def sglang_deployment(product: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "sglang"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "sglang"}},
            "strategy": {"rollingUpdate": {"maxUnavailable": 2, "maxSurge": 2}},
            "template": {
                "metadata": {"labels": {"app": "sglang"}},
                "spec": {
                    "nodeSelector": {GPU_PRODUCT_LABEL: product},
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "server",
                            "image": "lmsysorg/sglang:v0.5.4-cu129",
                            "command": ["python3", "-m", "sglang.launch_server"],
                            "args": [
                                "--model-path=Qwen/Qwen3-8B",
                                "--host=0.0.0.0",
                                "--port=30000",
                                "--speculative-algorithm=DSPARK",
                            ],
                            "ports": [{"name": "http", "containerPort": 30000}],
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                            "readinessProbe": {
                                "httpGet": {"path": "/health", "port": "http"},
                                "periodSeconds": 1,
                            },
                        }
                    ],
                },
            },
        },
    }


def ready_pods(kubectl: Callable[..., str], ns: str, product: str) -> list[dict[str, Any]]:
    """The Deployment's pods when exactly `replicas` are Ready on nodes of `product`."""
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(GPU_PRODUCT_LABEL)
        for n in get_json(kubectl, "nodes")["items"]
    }
    pods = get_json(kubectl, "pods", "-n", ns, "-l", "app=sglang")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    ok = [
        p
        for p in live
        if p["status"].get("phase") == "Running"
        and nodes.get(p["spec"].get("nodeName")) == product
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in p["status"].get("conditions") or []
        )
    ]
    return ok if len(ok) == 2 and len(pods) == 2 else []


def server_info(pod_ip: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{pod_ip}:30000/server_info", timeout=5) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_sglang_deployment_serves_sps_sim_and_follows_its_gpu_product(
    k8s_cluster, node_agent, namespace
):
    kubectl = k8s_cluster.kubectl
    apply(kubectl, namespace, sglang_deployment(GPU_H100))
    pods = wait_until("2 Ready pods on H100", lambda: ready_pods(kubectl, namespace, GPU_H100))
    ips = {p["status"]["podIP"] for p in pods}
    assert len(ips) == 2 and all(ip.startswith("10.244.") for ip in ips)
    for ip in ips:  # from the host, on the pod IP
        info = server_info(ip)
        assert info["sps_sim"]["preset"] == GPU_H100
        assert info["speculative_algorithm"] == "DSPARK"
        assert info["port"] == 30000
    deploy = get_json(kubectl, "deployment", "sglang", "-n", namespace)
    assert deploy["status"]["readyReplicas"] == 2

    patch = {"spec": {"template": {"spec": {"nodeSelector": {GPU_PRODUCT_LABEL: GPU_H200}}}}}
    kubectl(
        "patch", "deployment", "sglang", "-n", namespace, "--type=merge", "-p", json.dumps(patch)
    )
    moved = wait_until("2 Ready pods on H200", lambda: ready_pods(kubectl, namespace, GPU_H200))
    for pod in moved:
        assert server_info(pod["status"]["podIP"])["sps_sim"]["preset"] == GPU_H200
    old = [ip for ip in ips if ip not in {p["status"]["podIP"] for p in moved}]
    assert old, "the moved pods should have new IPs"


def test_pods_reach_each_other_by_pod_ip(k8s_cluster, node_agent, namespace):
    kubectl = k8s_cluster.kubectl
    server = (
        "import http.server as h\n"
        "class H(h.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'pong')\n"
        "h.HTTPServer(('', 8080), H).serve_forever()\n"
    )
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "server"},
            "spec": {
                "nodeSelector": {GPU_PRODUCT_LABEL: GPU_H100},
                "containers": [
                    {
                        "name": "main",
                        "image": "python:3.12",
                        "command": ["python3", "-c", server],
                        "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                    }
                ],
            },
        },
    )

    def server_ip() -> str:
        pod = get_json(kubectl, "pod", "server", "-n", namespace)
        conds = pod.get("status", {}).get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
        return str(pod["status"]["podIP"]) if ready else ""

    ip = wait_until("server ready", server_ip)
    # by name, through hostAliases (there is no cluster DNS)
    client = "import urllib.request as u; print(u.urlopen('http://server:8080/', timeout=5).read())"
    apply(
        kubectl,
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "client"},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {GPU_PRODUCT_LABEL: GPU_H200},  # another node
                "hostAliases": [{"ip": ip, "hostnames": ["server"]}],
                "containers": [
                    {"name": "main", "image": "python:3.12", "command": ["python3", "-c", client]}
                ],
            },
        },
    )

    def client_phase() -> str:
        return str(get_json(kubectl, "pod", "client", "-n", namespace)["status"].get("phase"))

    wait_until("client finished", lambda: client_phase() in ("Succeeded", "Failed"))
    log = read_container_log(node_agent.state_dir, namespace, "client", "main")
    assert client_phase() == "Succeeded", log
    assert log.strip() == "b'pong'"


WRITER = """
import json, sys
from kubernetes import client, config
config.load_incluster_config()
api = client.CoreV1Api()
results = {}
for ns in sys.argv[1:]:
    body = {"metadata": {"name": "written-by-pod"}, "data": {"from": "pod"}}
    try:
        api.create_namespaced_config_map(ns, body)
        results[ns] = "created"
    except client.exceptions.ApiException as exc:
        results[ns] = exc.status
print(json.dumps(results))
"""


def test_pod_service_account_writes_configmaps_only_where_rbac_allows(
    k8s_cluster, node_agent, namespace
):
    kubectl = k8s_cluster.kubectl
    other = k8s_cluster.create_namespace(f"{namespace[:50]}-other")
    try:
        kubectl("create", "serviceaccount", "writer", "-n", namespace)
        kubectl(
            "create", "role", "cm-writer", "-n", namespace, "--verb=create",
            "--resource=configmaps",
        )  # fmt: skip
        kubectl(
            "create", "rolebinding", "cm-writer", "-n", namespace, "--role=cm-writer",
            f"--serviceaccount={namespace}:writer",
        )  # fmt: skip
        apply(
            kubectl,
            namespace,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "writer"},
                "spec": {
                    "backoffLimit": 0,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "serviceAccountName": "writer",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "ghcr.io/sps-dev/sps-operator:0.1.0",
                                    "command": ["python", "-c", WRITER, namespace, other],
                                }
                            ],
                        }
                    },
                },
            },
        )

        def finished() -> bool:
            status = get_json(kubectl, "job", "writer", "-n", namespace).get("status", {})
            return bool(status.get("succeeded") or status.get("failed"))

        wait_until("writer job finished", finished)
        pods = get_json(kubectl, "pods", "-n", namespace, "-l", "job-name=writer")["items"]
        log = read_container_log(
            node_agent.state_dir, namespace, pods[0]["metadata"]["name"], "main"
        )
        assert json.loads(log.strip().splitlines()[-1]) == {namespace: "created", other: 403}
        cm = get_json(kubectl, "configmap", "written-by-pod", "-n", namespace)
        assert cm["data"] == {"from": "pod"}
        assert not get_json(kubectl, "configmap", "written-by-pod", "-n", other)
    finally:
        k8s_cluster.delete_namespace(other)
