"""Pods reach each other through Services by DNS name (kube-proxy and CoreDNS)."""

from __future__ import annotations

from typing import Any

import pytest
from realnode_helpers import apply, finished, logs, pod

from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed import RealNodeCluster

# Their own namespaces and a few GPUs: they may run beside other tests (tests/run-all.sh).
pytestmark = pytest.mark.bed_shared

CLIENT = """
import sys, time, urllib.request
url = sys.argv[1]
for _ in range(60):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            print(r.status, r.read().decode().strip())
            break
    except Exception as err:
        print("retry", err, flush=True)
        time.sleep(1)
else:
    sys.exit(1)
"""


def service(name: str, port: int, target: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": port, "targetPort": target}]},
    }


def test_a_pod_reaches_another_through_a_service_dns_name(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    image = realnode_cluster.image("operator")
    # The server on an H200 node, the client on an H100 node: across nodes, through the ClusterIP.
    server = pod(
        "web",
        image,
        [
            "sh",
            "-c",
            "mkdir -p /tmp/www && hostname > /tmp/www/who"
            " && exec python3 -m http.server 8000 -d /tmp/www",
        ],
        labels={"app": "web"},
        node_selector={"nvidia.com/gpu.product": GPU_H200},
        restart="Always",
    )
    server["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    server["spec"]["containers"][0]["volumeMounts"] = [{"name": "tmp", "mountPath": "/tmp"}]
    server["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = True
    url = f"http://web.{ns}.svc.cluster.local/who"
    client = pod(
        "client",
        image,
        ["python3", "-c", CLIENT, url],
        node_selector={"nvidia.com/gpu.product": GPU_H100},
    )
    apply(realnode_cluster, ns, server, service("web", 80, 8000), client)
    assert finished(realnode_cluster, ns, "client", timeout=120) == "Succeeded", logs(
        realnode_cluster, ns, "client"
    )
    assert logs(realnode_cluster, ns, "client").strip().splitlines()[-1] == "200 web"


def test_pods_resolve_the_api_server_service(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    probe = "import socket; print(socket.gethostbyname('kubernetes.default.svc.cluster.local'))"
    apply(
        realnode_cluster,
        ns,
        pod("dns", realnode_cluster.image("operator"), ["python3", "-c", probe]),
    )
    assert finished(realnode_cluster, ns, "dns") == "Succeeded", logs(realnode_cluster, ns, "dns")
    assert logs(realnode_cluster, ns, "dns").strip() == "10.96.0.1"
