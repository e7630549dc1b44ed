"""The `node_agent` fixture: GPU nodes Ready, and pod logs reachable for failure reports."""

from __future__ import annotations

import secrets
import time
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from sps_operator.constants import GPU_COUNT_LABEL, GPU_H100, GPU_H200, GPU_PRODUCT_LABEL
from sps_operator.devcluster.pytest_plugin import K8sCluster, NodeAgent, _failure_sections

pytestmark = pytest.mark.k8s


def test_k8s_controlplane_node_agent_fixture_nodes(
    node_agent: NodeAgent, k8s_api: ApiClient
) -> None:
    nodes = {n.metadata.name: n for n in client.CoreV1Api(k8s_api).list_node().items}
    assert set(node_agent.nodes_with_product(GPU_H100)) == {"gpu-h100-0", "gpu-h100-1"}
    assert set(node_agent.nodes_with_product(GPU_H200)) == {"gpu-h200-0", "gpu-h200-1"}
    for spec in node_agent.nodes:
        node = nodes[spec.name]
        assert node.metadata.labels[GPU_PRODUCT_LABEL] == spec.product
        assert node.metadata.labels[GPU_COUNT_LABEL] == str(spec.gpus)
        assert node.status.allocatable["nvidia.com/gpu"] == str(spec.gpus)
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert [c.status for c in ready] == ["True"]


def test_k8s_controlplane_failure_report_has_pod_logs_and_events(
    k8s_cluster: K8sCluster, node_agent: NodeAgent, k8s_api: ApiClient, namespace: str
) -> None:
    token = f"marker-{secrets.token_hex(4)}"
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "talker"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "busybox:1.36", "command": ["echo", token]}
                ],
            },
        },
    )
    deadline = time.monotonic() + 60
    while core.read_namespaced_pod("talker", namespace).status.phase != "Succeeded":
        assert time.monotonic() < deadline, "pod did not succeed in time"
        time.sleep(0.2)

    assert token in node_agent.pod_logs(namespace)
    # What the report hook attaches to a failed test that used these fixtures.
    item = SimpleNamespace(
        funcargs={"k8s_cluster": k8s_cluster, "node_agent": node_agent, "namespace": namespace}
    )
    sections = dict(_failure_sections(item))  # type: ignore[arg-type]
    assert token in sections[f"pod logs ({namespace})"]
    assert "talker" in sections[f"events ({namespace})"]
    assert "node agent log (tail)" in sections
