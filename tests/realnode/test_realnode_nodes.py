"""The bed's nodes are real kubelets with simulated GPUs from the device plugin."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from realnode_helpers import apply, finished, get_json, logs, pod

from sps_sim.costmodel import GPU_H100, GPU_H200, GPU_RTX_PRO_6000
from sps_testbed import TEST_NODES, RealNodeCluster
from waiting import wait_for

# Their own namespaces and a few GPUs: they may run beside other tests (tests/run-all.sh).
pytestmark = pytest.mark.bed_shared

CONTAINERD_GO_MOD = Path(__file__).parents[2] / "testbed" / "recipes" / "containerd" / "go.mod"


def pinned_containerd() -> str:
    """The containerd version the bed builds (its pin in go.mod), without the leading v."""
    pin = re.search(
        r"^require github\.com/containerd/containerd/v2 v(\S+)$",
        CONTAINERD_GO_MOD.read_text(),
        re.MULTILINE,
    )
    assert pin, f"no containerd/v2 pin in {CONTAINERD_GO_MOD}"
    return pin.group(1)


def test_nodes_are_kubelets_with_gpu_labels_and_capacity(realnode_cluster: RealNodeCluster) -> None:
    nodes = get_json(realnode_cluster, "nodes")["items"]
    pinned = pinned_containerd()
    by_product: dict[str, list[str]] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        status = node["status"]
        # The pinned containerd 2.x, not Debian's 1.6 (the CRI reports the built version).
        runtime = status["nodeInfo"]["containerRuntimeVersion"]
        assert runtime.startswith("containerd://"), status["nodeInfo"]
        assert runtime.removeprefix("containerd://").removeprefix("v") == pinned, runtime
        assert pinned.startswith("2."), pinned
        assert status["nodeInfo"]["kubeletVersion"] == "v1.36.3"
        assert status["capacity"]["nvidia.com/gpu"] == "8"
        assert labels["nvidia.com/gpu.count"] == "8"
        ready = [c for c in status["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", node["metadata"]["name"]
        by_product.setdefault(labels["nvidia.com/gpu.product"], []).append(node["metadata"]["name"])
    # The tests' bed (TEST_NODES): two nodes of each product, named as asked.
    assert sorted(by_product) == sorted([GPU_H100, GPU_H200, GPU_RTX_PRO_6000])
    assert all(len(v) == 2 for v in by_product.values()), by_product
    assert {n: p for p, names in by_product.items() for n in names} == {
        n.name: n.product for n in TEST_NODES
    }


def test_device_plugin_hands_out_gpus_and_the_product(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    image = realnode_cluster.image("operator")
    apply(
        realnode_cluster,
        ns,
        pod(
            "gpus",
            image,
            ["sh", "-c", 'echo "ids=$NVIDIA_VISIBLE_DEVICES product=$SPS_SIM_GPU_PRODUCT"'],
            node_selector={"nvidia.com/gpu.product": GPU_H200},
            gpus=3,
        ),
    )
    assert finished(realnode_cluster, ns, "gpus") == "Succeeded", logs(realnode_cluster, ns, "gpus")
    out = logs(realnode_cluster, ns, "gpus").strip()
    ids = out.split("ids=", 1)[1].split(" ", 1)[0].split(",")
    assert len(ids) == 3 and all(i.startswith("GPU-gpu-h200-") for i in ids), out
    assert out.endswith(f"product={GPU_H200}"), out


def test_more_gpus_than_a_node_has_stay_pending(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    apply(realnode_cluster, ns, pod("greedy", realnode_cluster.image("operator"), ["true"], gpus=9))

    def unschedulable() -> bool:
        conds = (
            get_json(realnode_cluster, "pod", "greedy", "-n", ns)
            .get("status", {})
            .get("conditions", [])
        )
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds
        )

    assert wait_for("greedy pod reported Unschedulable", unschedulable, timeout=30)


def test_kubectl_exec_and_logs_reach_the_container(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    apply(
        realnode_cluster,
        ns,
        pod(
            "shell",
            realnode_cluster.image("operator"),
            ["sh", "-c", "echo started; exec sleep 300"],
        ),
    )
    wait_for(
        "shell running",
        lambda: (
            get_json(realnode_cluster, "pod", "shell", "-n", ns)["status"].get("phase") == "Running"
        ),
        timeout=60,
    )
    # Through the API server to the kubelet and containerd's streaming server: the node
    # agent had no exec at all.
    out = realnode_cluster.kubectl(
        "exec", "-n", ns, "shell", "--", "sh", "-c", "id -u; cat /proc/1/cmdline"
    )
    assert out.splitlines()[0] == "65532"
    assert "sleep" in out
    assert wait_for("logs", lambda: "started" in logs(realnode_cluster, ns, "shell"), timeout=20)


def test_killing_one_pods_containers_behind_the_kubelet_leaves_its_neighbours_alone(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    # The e2e tests kill a force-deleted operator's containers by the kubelet's labels; the
    # same namespace on the same node holds the Deployment's replacement pod (ci5: it was
    # killed too, ctr ORing the name and namespace filters).
    ns, node = realnode_namespace, TEST_NODES[0].name
    image = realnode_cluster.image("operator")
    on_node = {"kubernetes.io/hostname": node}
    for name in ("victim", "neighbour"):
        apply(realnode_cluster, ns, pod(name, image, ["sleep", "300"], node_selector=on_node,
                                        restart="Always"))  # fmt: skip

    def status(name: str) -> dict[str, Any]:
        statuses = get_json(realnode_cluster, "pod", name, "-n", ns)["status"].get(
            "containerStatuses"
        ) or [{}]
        return dict(statuses[0])

    for name in ("victim", "neighbour"):
        wait_for(f"{name} running", lambda n=name: "running" in status(n).get("state", {}),
                 timeout=60)  # fmt: skip
    neighbour = status("neighbour")["containerID"]
    assert realnode_cluster.kill_containers_of(node, ns, "victim") >= 1
    wait_for("the victim restarted", lambda: status("victim").get("restartCount", 0) >= 1,
             timeout=60)  # fmt: skip
    # By now a killed neighbour's task has long exited (the victim's restart took a sandbox
    # and a container); containerd says so at once, the kubelet's status later.
    tasks = realnode_cluster.ctr(node, "tasks", "ls").split("\n")
    running = {line.split()[0] for line in tasks if line.split()[2:3] == ["RUNNING"]}
    assert neighbour.removeprefix("containerd://") in running, tasks
    after = status("neighbour")
    assert (after["containerID"], after.get("restartCount")) == (neighbour, 0), after
    assert realnode_cluster.kill_containers_of(node, ns, "nobody") == 0
