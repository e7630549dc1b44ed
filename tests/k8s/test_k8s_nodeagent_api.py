"""The node agent's Python API: start() registers nodes and runs pods, stop() leaves no
process, namespace, link or node behind. A second agent on the shared test cluster, with
its own node and pod network."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nodeagent_helpers import get_json, wait_until

from sps_operator.constants import GPU_COUNT_LABEL, GPU_PRODUCT_LABEL, GPU_RTX_PRO_6000
from sps_operator.devcluster import podnet
from sps_operator.devcluster.nodeagent import AgentConfig, NodeAgent, read_container_log

pytestmark = pytest.mark.k8s
NODE = "api-rtx-0"


@pytest.fixture
def pod_network(tmp_path: Path) -> Iterator[podnet.PodNetwork]:
    network = podnet.reserve(os.getpid(), tmp_path)
    try:
        yield network
    finally:
        podnet.release(network, tmp_path)


def host_state(index: int) -> tuple[list[str], list[str]]:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    ours = [line.split()[0] for line in netns.splitlines() if line.startswith(f"sps{index}-")]
    names = [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
    return ours, [n for n in names if n == f"spsbr{index}" or n.startswith(f"sps{index}p")]


def test_start_runs_pods_and_stop_cleans_up(k8s_cluster, namespace, pod_network, tmp_path):
    kubectl = k8s_cluster.kubectl
    record = k8s_cluster.control_plane.record
    state = tmp_path / "agent"
    cfg = AgentConfig.from_argv(
        [
            f"--kubeconfig={k8s_cluster.kubeconfig}",
            f"--state-dir={state}",
            f"--node={NODE}={GPU_RTX_PRO_6000}:2",
            f"--pod-cidr={pod_network.cidr}",
            f"--api-server-host={record.gateway}",  # the cluster's own gateway is in the cert
            f"--api-server-port={record.api_server_port}",
        ]
    )
    agent = NodeAgent(cfg)
    stopped = False
    marker = f"sleep {os.getpid() % 1000 + 3000}"
    try:
        agent.start()
        assert json.loads((state / "ready").read_text())["nodes"] == [NODE]
        node = get_json(kubectl, "node", NODE)
        labels = node["metadata"]["labels"]
        assert (labels[GPU_PRODUCT_LABEL], labels[GPU_COUNT_LABEL]) == (GPU_RTX_PRO_6000, "2")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
        lease = get_json(kubectl, "lease", NODE, "-n", "kube-node-lease")
        assert lease["spec"]["holderIdentity"] == NODE

        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "rtx"},
            "spec": {
                "nodeSelector": {GPU_PRODUCT_LABEL: GPU_RTX_PRO_6000},
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "command": ["sh", "-c", f"echo started; {marker}"],
                        "resources": {"limits": {"nvidia.com/gpu": 2}},
                    }
                ],
            },
        }
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))

        def running() -> dict[str, Any]:
            obj = get_json(kubectl, "pod", "rtx", "-n", namespace)
            return obj if obj.get("status", {}).get("phase") == "Running" else {}

        obj = wait_until("pod running on the API agent's node", running)
        assert obj["spec"]["nodeName"] == NODE
        assert ipaddress.ip_address(obj["status"]["podIP"]) in ipaddress.ip_network(
            pod_network.cidr
        )
        wait_until("log", lambda: "started" in read_container_log(state, namespace, "rtx", "main"))
        netns, links = host_state(pod_network.index)
        assert netns == [f"sps{pod_network.index}-{obj['metadata']['uid'][:12]}"]
        assert f"spsbr{pod_network.index}" in links and len(links) == 2
        assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0

        agent.stop(delete_nodes=True)
        stopped = True
        assert host_state(pod_network.index) == ([], [])
        assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
        assert not (state / "ready").exists()
        assert not get_json(kubectl, "node", NODE)
    finally:
        if not stopped:
            agent.stop(delete_nodes=True)
        kubectl("delete", "pod", "rtx", "-n", namespace, "--force", "--grace-period=0", check=False)


def test_pod_network_is_exclusive_and_cleaned_up(pod_network):
    from sps_operator.devcluster.nodeagent.config import pod_network as network_config
    from sps_operator.devcluster.nodeagent.netns import HostNetwork, NetworkError

    cfg = network_config(pod_network.cidr, None)
    first = HostNetwork(cfg)
    first.setup()
    try:
        with pytest.raises(NetworkError, match="another node agent"):
            HostNetwork(cfg).setup()
        sandbox = first.create_sandbox("0123456789abcdef")
        netns, links = host_state(pod_network.index)
        assert netns == [sandbox.netns]
        assert sorted(links) == sorted([f"spsbr{pod_network.index}", sandbox.veth])
        assert sandbox.ip == f"{pod_network.cidr.rsplit('.', 1)[0]}.2"
        first.delete_sandbox(sandbox)
        assert host_state(pod_network.index) == ([], [f"spsbr{pod_network.index}"])
    finally:
        first.teardown()
    assert host_state(pod_network.index) == ([], [])
    second = HostNetwork(cfg)  # the lock is free again
    second.setup()
    second.teardown()


def test_nothing_survives_an_agent_killed_with_sigkill(
    k8s_cluster, namespace, pod_network, tmp_path
):
    import signal
    import sys

    kubectl = k8s_cluster.kubectl
    record = k8s_cluster.control_plane.record
    node = "api-kill-0"
    marker = f"sleep {os.getpid() % 1000 + 5000}"
    argv = [
        sys.executable, "-m", "sps_operator.cli", "node-agent",
        f"--kubeconfig={k8s_cluster.kubeconfig}", f"--state-dir={tmp_path / 'agent'}",
        f"--node={node}=SIMULATED-KILL-TEST:1", f"--pod-cidr={pod_network.cidr}",
        f"--api-server-host={record.gateway}", f"--api-server-port={record.api_server_port}",
    ]  # fmt: skip
    log = open(tmp_path / "agent.log", "wb")  # noqa: SIM115
    agent = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    try:
        wait_until("agent ready", lambda: (tmp_path / "agent" / "ready").exists(), timeout=30)
        spec = {
            "nodeSelector": {GPU_PRODUCT_LABEL: "SIMULATED-KILL-TEST"},
            "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", marker]}],
        }
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "victim"}, "spec": spec}
        kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
        wait_until(
            "victim running",
            lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0,
        )
        assert host_state(pod_network.index)[0]  # its network namespace exists
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait(timeout=10)
        wait_until("network removed", lambda: host_state(pod_network.index) == ([], []), timeout=10)
        wait_until(
            "pod processes gone",
            lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1,
            timeout=10,
        )
    finally:
        if agent.poll() is None:
            os.killpg(agent.pid, signal.SIGKILL)
        log.close()
        kubectl(
            "delete", "pod", "victim", "-n", namespace, "--force", "--grace-period=0", check=False
        )
        kubectl("delete", "node", node, "--ignore-not-found", check=False)
