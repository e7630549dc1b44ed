"""What the test bed writes for its nodes (no cluster needed)."""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path

import pytest

from sps_testbed import NodeSpec
from sps_testbed.node import (
    NodeConfig,
    cni_conflist,
    containerd_toml,
    in_memory_dirs,
    kubelet_config,
    private_dirs,
)
from sps_testbed.supervisor import pod_ranges


def node_config(**over: object) -> NodeConfig:
    values: dict[str, object] = {
        "name": "gpu-h200-0",
        "product": "NVIDIA-H200",
        "gpus": 8,
        "node_ip": "10.244.7.4",
        "gateway": "10.244.7.1",
        "pod_subnet": "10.244.7.0/24",
        "range_start": "10.244.7.32",
        "range_end": "10.244.7.86",
        "dir": "/state/nodes/gpu-h200-0",
        "run_dir": "/run/sps-testbed/spstb-3/gpu-h200-0",
        "cgroup_root": "/parent/spstb-3-gpu-h200-0",
        "kubeconfig": "/state/kubeconfig",
        "cluster_dns": "10.96.0.10",
        "node_bin": "/cache/nodes",
        "cni_bin": "/usr/lib/cni",
        "containerd_bin": "/cache/containerd",
        "registry": "10.244.7.1:5000",
        "registry_ca": "/state/registry/trust/ca.crt",
    }
    values.update(over)
    return NodeConfig(**values)  # type: ignore[arg-type]


def test_pod_ranges_split_the_network_without_overlap() -> None:
    ranges = pod_ranges("10.244.7.0/24", 4)
    seen: set[ipaddress.IPv4Address] = set()
    for start, end in ranges:
        a, b = ipaddress.IPv4Address(start), ipaddress.IPv4Address(end)
        assert a <= b
        block = {ipaddress.IPv4Address(int(a) + k) for k in range(int(b) - int(a) + 1)}
        assert not block & seen
        seen |= block
    assert min(seen) == ipaddress.IPv4Address("10.244.7.32")
    assert max(seen) <= ipaddress.IPv4Address("10.244.7.254")
    with pytest.raises(ValueError):
        pod_ranges("10.244.7.0/24", 0)


def test_kubelet_runs_on_cgroup_v1_with_its_own_root_and_cluster_dns() -> None:
    conf = kubelet_config(node_config())
    assert conf["failCgroupV1"] is False
    assert conf["cgroupDriver"] == "cgroupfs"
    assert conf["cgroupRoot"] == "/parent/spstb-3-gpu-h200-0"
    assert (
        conf["containerRuntimeEndpoint"]
        == "unix:///run/sps-testbed/spstb-3/gpu-h200-0/containerd.sock"
    )
    assert conf["address"] == conf["healthzBindAddress"] == "10.244.7.4"
    assert conf["clusterDNS"] == ["10.96.0.10"]
    assert conf["imageGCHighThresholdPercent"] == 100  # pulled images are never collected
    # Changes within 5 s, an unchanged status not rewritten every 5 s (the Lease is the heartbeat).
    assert conf["nodeStatusUpdateFrequency"] == "5s"
    assert conf["nodeStatusReportFrequency"] == "5m"


def test_containerd_config_keeps_state_per_node_and_restricts_oom_score() -> None:
    text = containerd_toml(node_config())
    conf = tomllib.loads(text)
    assert conf["version"] == 3  # containerd 2.x
    runtime = conf["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["cni"]["bin_dirs"] == ["/usr/lib/cni"]
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {
        "Root": "/run/sps-testbed/spstb-3/gpu-h200-0/runc",
        "SystemdCgroup": False,
    }
    images = conf["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10"
    assert images["registry"] == {"config_path": "/state/nodes/gpu-h200-0/certs.d"}
    # NRI's socket is host-wide: shared by every node of every bed unless it is off.
    assert "io.containerd.nri.v1.nri" in conf["disabled_plugins"]
    assert 'root = "/state/nodes/gpu-h200-0/containerd"' in text
    assert 'address = "/run/sps-testbed/spstb-3/gpu-h200-0/containerd.sock"' in text
    assert 'Root = "/run/sps-testbed/spstb-3/gpu-h200-0/runc"' in text
    assert "restrict_oom_score_adj = true" in text
    assert "netns_mounts_under_state_dir = true" in text
    assert "mirrors" not in text  # the registry host configuration is the one way


def test_cni_bridge_allocates_from_the_nodes_range() -> None:
    bridge = cni_conflist(node_config())["plugins"][0]
    (rng,) = bridge["ipam"]["ranges"][0:1]
    assert rng[0]["rangeStart"] == "10.244.7.32" and rng[0]["rangeEnd"] == "10.244.7.86"
    assert rng[0]["gateway"] == "10.244.7.1"
    assert bridge["bridge"] == "tb0" and bridge["isGateway"] is True


def test_node_spec_parsing() -> None:
    assert NodeSpec.parse("a=NVIDIA-H200") == NodeSpec("a", "NVIDIA-H200", 8)
    assert NodeSpec.parse("b=NVIDIA-H100-80GB-HBM3:2") == NodeSpec("b", "NVIDIA-H100-80GB-HBM3", 2)
    for bad in ("a", "=P", "a=", "a=P:x"):
        with pytest.raises(ValueError):
            NodeSpec.parse(bad)


def test_the_stores_in_memory_hold_the_runtimes_state_and_nothing_the_host_reads() -> None:
    cfg = node_config()
    stores = in_memory_dirs(cfg)
    conf = tomllib.loads(containerd_toml(cfg))
    runc = conf["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]
    for path in (conf["root"], conf["state"], runc["options"]["Root"], cfg.kubelet_root):
        assert Path(path) in stores, path
    # What the host reaches (the sockets ctr and the tests use, the ready file, the logs,
    # the directories bound over the kubelet's fixed paths) is in no store: a tmpfs in the
    # node's mount namespace is invisible outside it.
    host_read = [cfg.socket, cfg.ready_file, cfg.logs, Path(cfg.dir) / "pod-logs"]
    host_read += list(private_dirs(cfg).values())
    for path in host_read:
        assert not any(path.is_relative_to(store) for store in stores), path
