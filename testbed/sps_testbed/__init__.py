"""sps-testbed: a local Kubernetes cluster with real nodes, for testing sps-operator.

`RealNodeCluster(state_dir).start()` brings up the pinned control plane and, per
simulated GPU node, a kubelet with its own containerd and runc, a CNI bridge shared by
all nodes, kube-proxy, CoreDNS and a device plugin advertising `nvidia.com/gpu`, all in
a network namespace of the bed's own. See docs/dev-cluster.md.
"""

from sps_testbed.cluster import DEFAULT_NODES, KubectlError, NodeSpec, RealNodeCluster, TestbedError
from sps_testbed.controlplane import TEST_NODES

__all__ = [
    "DEFAULT_NODES",
    "TEST_NODES",
    "KubectlError",
    "NodeSpec",
    "RealNodeCluster",
    "TestbedError",
]
