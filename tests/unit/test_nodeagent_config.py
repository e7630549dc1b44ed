"""Node agent flags, node specs, kubeconfig reading and the Node/Lease objects it posts."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from sps_operator.constants import GPU_COUNT_LABEL, GPU_H100, GPU_PRODUCT_LABEL, GPU_RESOURCE
from sps_operator.devcluster.nodeagent.config import (
    AgentConfig,
    ConfigError,
    NodeSpec,
    parse_node_spec,
    pod_network,
    read_kubeconfig,
)
from sps_operator.devcluster.nodeagent.nodes import (
    lease_object,
    node_object,
    node_status,
    pod_event,
)


def test_parse_node_spec() -> None:
    assert parse_node_spec(f"gpu-a={GPU_H100}:4") == NodeSpec("gpu-a", GPU_H100, 4)
    assert parse_node_spec("gpu-b=NVIDIA-H200") == NodeSpec("gpu-b", "NVIDIA-H200", 8)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpu-a", "NAME=PRODUCT"),
        ("=NVIDIA-H200", "NAME=PRODUCT"),
        ("Bad_Name=NVIDIA-H200", "valid node name"),
        ("gpu-a=NVIDIA-H200:many", "whole number"),
        ("gpu-a=:4", "non-empty"),
    ],
)
def test_parse_node_spec_rejects(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_node_spec(text)


def test_pod_network_gateway_and_addresses() -> None:
    net = pod_network("10.244.7.0/24", None)
    assert (net.gateway, net.index, net.prefixlen) == ("10.244.7.1", 7, 24)
    addrs = net.pod_addresses()
    assert "10.244.7.1" not in addrs and addrs[0] == "10.244.7.2" and len(addrs) == 253
    with pytest.raises(ConfigError, match="not inside"):
        pod_network("10.244.7.0/24", "10.244.8.1")
    with pytest.raises(ConfigError, match="IPv4 subnet"):
        pod_network("10.244.7.0/30", None)


def write_kubeconfig(path: Path, server: str, ca: bytes) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca).decode(),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_read_kubeconfig(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:6443", b"CA PEM")
    info = read_kubeconfig(kc)
    assert (info.server, info.ca_pem) == ("https://127.0.0.1:6443", b"CA PEM")
    with pytest.raises(ConfigError, match="kubeconfig"):
        read_kubeconfig(tmp_path / "missing")


def test_agent_config_defaults_follow_the_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:41234", b"CA PEM")
    monkeypatch.setenv("SPS_NODE_AGENT_SIM_TIME_SCALE", "25")
    cfg = AgentConfig.from_argv(
        ["--kubeconfig", str(kc), "--state-dir", str(tmp_path / "s"), "--node", "n1=P:2",
         "--pod-cidr", "10.244.9.0/24"]
    )  # fmt: skip
    assert cfg.api_server_port == 41234
    assert cfg.api_server_host == "10.244.9.1"
    assert cfg.ca_pem == b"CA PEM"
    assert cfg.sim_time_scale == 25.0
    assert cfg.nodes == (NodeSpec("n1", "P", 2),)


def test_agent_config_rejects_duplicate_nodes_and_no_nodes(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", b"x")
    base = ["--kubeconfig", str(kc), "--state-dir", str(tmp_path)]
    with pytest.raises(ConfigError, match="unique"):
        AgentConfig.from_argv([*base, "--node", "a=P", "--node", "a=Q"])
    with pytest.raises(ConfigError, match="at least one"):
        AgentConfig.from_argv(base)


def test_node_object_status_and_lease() -> None:
    spec = NodeSpec("gpu-h100-0", GPU_H100, 4)
    node = node_object(spec)
    labels = node["metadata"]["labels"]
    assert labels[GPU_PRODUCT_LABEL] == GPU_H100 and labels[GPU_COUNT_LABEL] == "4"
    assert labels["kubernetes.io/hostname"] == "gpu-h100-0"
    now = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    status = node_status(spec, "10.244.1.1", now, now)
    assert status["capacity"][GPU_RESOURCE] == "4" == status["allocatable"][GPU_RESOURCE]
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True" and ready[0]["lastHeartbeatTime"] == "2026-01-02T03:04:05Z"
    assert {"type": "InternalIP", "address": "10.244.1.1"} in status["addresses"]
    lease = lease_object("gpu-h100-0", "uid-1", now)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["spec"]["renewTime"] == "2026-01-02T03:04:05.123456Z"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_pod_event() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"initContainers": [{"name": "side"}], "containers": [{"name": "main"}]},
    }
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    event = pod_event(pod, "gpu-0", "Warning", "BackOff", "back-off", "side", now)
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "p",
        "uid": "u",
        "fieldPath": "spec.initContainers{side}",
    }
    assert (event["type"], event["reason"], event["source"]) == (
        "Warning",
        "BackOff",
        {"component": "kubelet", "host": "gpu-0"},
    )
    assert event["metadata"] == {"generateName": "p.", "namespace": "ns"}
    assert event["lastTimestamp"] == "2026-01-02T03:04:05Z"
    assert "fieldPath" not in pod_event(pod, "n", "Normal", "X", "m", None, now)["involvedObject"]
    assert pod_event(pod, "n", "Normal", "X", "m", "main", now)["involvedObject"]["fieldPath"] == (
        "spec.containers{main}"
    )


def test_main_rejects_bad_flags_with_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sps_operator.devcluster.nodeagent import main

    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:1", b"x")
    assert main(["--kubeconfig", str(kc), "--state-dir", str(tmp_path), "--node", "n=P:x"]) == 2
    assert "GPU count 'x' is not a whole number" in capsys.readouterr().err
    bad_map = tmp_path / "map.yaml"
    bad_map.write_text("images: [{runtime: sglang}]")
    argv = ["--kubeconfig", str(kc), "--state-dir", str(tmp_path), "--node", "n=P"]
    assert main([*argv, "--image-map", str(bad_map)]) == 2
    assert "needs a string 'pattern'" in capsys.readouterr().err
