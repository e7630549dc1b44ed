"""The chart's roles for users, on a real API server with real tokens of non-admin users:
a namespace `edit` user (built-in ClusterRole, one RoleBinding) writes SpsProfiles and
runs `kubectl sps reprofile`; a `view` user reads them; neither writes status, and
neither reaches another namespace."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ship_helpers import CHART, apply_chart_crd, helm, profile_manifest

from sps_testbed.controlplane_fixtures import K8sCluster, KubectlError
from waiting import wait_for

pytestmark = pytest.mark.k8s

KUBECTL_SPS = Path(sys.executable).parent / "kubectl-sps"


def user(cluster: K8sCluster, namespace: str, name: str, role: str, tmp: Path) -> Path:
    """A ServiceAccount bound to the built-in ClusterRole `role` in `namespace` only, and a
    kubeconfig with a real token of it."""
    cluster.kubectl("create", "serviceaccount", name, "-n", namespace)
    cluster.kubectl("create", "rolebinding", f"{name}-{role}", "-n", namespace,
                    f"--clusterrole={role}", f"--serviceaccount={namespace}:{name}")  # fmt: skip
    return cluster.service_account_kubeconfig(name, namespace, tmp / f"{name}.kubeconfig")


def forbidden(cluster: K8sCluster, config: Path, *args: str, input: str | None = None) -> str:
    with pytest.raises(KubectlError) as refused:
        cluster.kubectl(*args, kubeconfig=config, input=input)
    assert "forbidden" in refused.value.stderr.lower(), refused.value.stderr
    return refused.value.stderr


def plugin(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(config)}
    return subprocess.run([str(KUBECTL_SPS), *args], capture_output=True, text=True, env=env,
                          check=False, timeout=60)  # fmt: skip


def aggregated(cluster: K8sCluster, role: str) -> list[dict[str, Any]]:
    rules = json.loads(cluster.kubectl("get", "clusterrole", role, "-o", "json"))["rules"]
    return [r for r in rules or [] if "sps.dev" in r.get("apiGroups", [])]


def test_namespace_edit_and_view_users_with_the_charts_roles(
    k8s_cluster: K8sCluster, namespace: str, tmp_path: Path
) -> None:
    cluster = k8s_cluster
    apply_chart_crd(cluster.kubectl)
    release = f"rbac-{secrets.token_hex(3)}"
    system = cluster.create_namespace(f"{namespace}-sys")
    other = cluster.create_namespace(f"{namespace}-other")
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", system]
    try:
        # The session's CRD is applied by the tests, not by a release: crds.enabled=false.
        watch = ["--set", "watch.mode=namespaces", "--set", f"watch.namespaces={{{namespace}}}"]
        helm("install", release, str(CHART), *kubeconfig, "--set", "crds.enabled=false", *watch)
        # kube-controller-manager's clusterrole-aggregation folds the chart's roles in.
        for role in ("edit", "admin", "view"):
            wait_for(f"SpsProfiles in the built-in {role} role",
                     lambda role=role: aggregated(cluster, role), timeout=60)  # fmt: skip
        for role in ("edit", "admin", "view"):
            for rule in aggregated(cluster, role):
                assert rule["resources"] == ["spsprofiles"], (role, rule)  # never /status
                assert "*" not in rule["verbs"], (role, rule)
        alice = user(cluster, namespace, "alice", "edit", tmp_path)
        bob = user(cluster, namespace, "bob", "view", tmp_path)

        # edit: create, change, reprofile (an annotation), delete.
        cluster.kubectl("create", "-n", namespace, "-f", "-", input=profile_manifest("llama"),
                        kubeconfig=alice)  # fmt: skip
        cluster.kubectl("label", "spsprofile", "llama", "-n", namespace, "team=ml",
                        kubeconfig=alice)  # fmt: skip
        done = plugin(alice, "reprofile", "llama", "-n", namespace, "--value", "t-1")
        assert done.returncode == 0, done.stderr
        annotations = json.loads(cluster.kubectl(
            "get", "spsprofile", "llama", "-n", namespace, "-o", "json"
        ))["metadata"]["annotations"]  # fmt: skip
        assert annotations["sps.dev/reprofile"] == "t-1"
        status = json.dumps({"status": {"observedGeneration": 99}})
        forbidden(cluster, alice, "patch", "spsprofile", "llama", "-n", namespace,
                  "--subresource=status", "--type=merge", "-p", status)  # fmt: skip

        # view: read with kubectl and the plugin; nothing else.
        listed = cluster.kubectl("get", "spsprofiles", "-n", namespace, "-o", "name",
                                 kubeconfig=bob)  # fmt: skip
        assert listed.split() == ["spsprofile.sps.dev/llama"]
        got = plugin(bob, "get", "-n", namespace, "-o", "name")
        assert got.returncode == 0 and got.stdout == "spsprofile.sps.dev/llama\n", got.stderr
        refused = plugin(bob, "reprofile", "llama", "-n", namespace)
        assert refused.returncode == 1 and "forbidden" in refused.stderr
        qwen = profile_manifest("qwen")
        forbidden(cluster, bob, "create", "-n", namespace, "-f", "-", input=qwen)
        forbidden(cluster, bob, "patch", "spsprofile", "llama", "-n", namespace,
                  "--subresource=status", "--type=merge", "-p", status)  # fmt: skip
        forbidden(cluster, bob, "delete", "spsprofile", "llama", "-n", namespace)

        # Neither reaches another namespace.
        for config in (alice, bob):
            forbidden(cluster, config, "get", "spsprofiles", "-n", other)
        forbidden(cluster, alice, "create", "-n", other, "-f", "-", input=profile_manifest("x"))

        cluster.kubectl("delete", "spsprofile", "llama", "-n", namespace, kubeconfig=alice)
    finally:
        helm("uninstall", release, *kubeconfig, check=False)
        cluster.delete_namespace(system)
        cluster.delete_namespace(other)
