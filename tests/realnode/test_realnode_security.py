"""The runtime enforces the pods' security contexts (the node agent ignored them)."""

from __future__ import annotations

import json

import pytest
from realnode_helpers import apply, finished, get_json, logs, pod

from sps_testbed import KubectlError, RealNodeCluster
from waiting import wait_for

# Their own namespaces and a few GPUs: they may run beside other tests (tests/run-all.sh).
pytestmark = pytest.mark.bed_shared

WRITE_ROOT_FS = ["sh", "-c", "echo probe > /tmp/probe && echo wrote"]


def test_a_container_cannot_write_its_read_only_root_fs(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    image = realnode_cluster.image("operator")
    apply(
        realnode_cluster,
        ns,
        pod("readonly", image, WRITE_ROOT_FS, security={"readOnlyRootFilesystem": True}),
        # The same write on a writable root file system succeeds: the difference is the runtime's.
        pod("writable", image, WRITE_ROOT_FS, security={"readOnlyRootFilesystem": False}),
    )
    assert finished(realnode_cluster, ns, "writable") == "Succeeded", logs(
        realnode_cluster, ns, "writable"
    )
    assert "wrote" in logs(realnode_cluster, ns, "writable")
    assert finished(realnode_cluster, ns, "readonly") == "Failed"
    assert "Read-only file system" in logs(realnode_cluster, ns, "readonly")


def test_the_kubelet_refuses_root_under_run_as_non_root(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    apply(
        realnode_cluster,
        ns,
        pod(
            "root",
            realnode_cluster.image("operator"),
            ["id"],
            security={"runAsUser": 0, "runAsNonRoot": True},
        ),
    )

    def refused() -> str:
        statuses = (
            get_json(realnode_cluster, "pod", "root", "-n", ns)
            .get("status", {})
            .get("containerStatuses", [])
        )
        waiting = (statuses[0].get("state", {}).get("waiting") or {}) if statuses else {}
        return (
            str(waiting.get("message", ""))
            if waiting.get("reason") == "CreateContainerConfigError"
            else ""
        )

    assert "non-root" in wait_for("kubelet refuses the root container", refused, timeout=60)


def test_a_root_pod_is_refused_in_a_restricted_namespace(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    ns = realnode_namespace
    realnode_cluster.kubectl(
        "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted"
    )
    root = pod(
        "root",
        realnode_cluster.image("operator"),
        ["id"],
        security={"runAsUser": 0, "runAsNonRoot": False, "capabilities": {"add": ["NET_ADMIN"]}},
    )
    with pytest.raises(KubectlError) as refused:
        realnode_cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(root))
    assert "violates PodSecurity" in str(refused.value) and "restricted" in str(refused.value)
    # A restricted-compliant pod in the same namespace runs.
    apply(realnode_cluster, ns, pod("ok", realnode_cluster.image("operator"), ["id", "-u"]))
    assert finished(realnode_cluster, ns, "ok") == "Succeeded"
    assert logs(realnode_cluster, ns, "ok").strip() == "65532"
