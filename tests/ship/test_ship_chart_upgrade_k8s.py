"""`helm upgrade` from 0.1.0 (its chart installed the CRD from `crds/`, which Helm never
upgrades) to this chart (the CRD a template) on a real API server: the CRD is upgraded,
every SpsProfile is kept, and `helm uninstall` keeps both (crds.keep)."""

from __future__ import annotations

import io
import json
import secrets
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from ship_helpers import CHART, ROOT, helm, profile_manifest

from sps_operator.api.crd import CRD_NAME, build_crd
from sps_testbed.controlplane_fixtures import K8sCluster
from waiting import wait_crd_established

pytestmark = pytest.mark.k8s

OLD_CHART = ROOT / "tests" / "ship" / "fixtures" / "sps-operator-0.1.0.tgz"
# A field the models gained after 0.1.0 (18c8f3b): served once the upgrade upgraded the CRD.
NEW_TEXT = "minIntervalSeconds"


def old_crd() -> dict[str, Any]:
    with tarfile.open(OLD_CHART) as tar:
        member = tar.extractfile("sps-operator/crds/sps.dev_spsprofiles.yaml")
        assert member is not None
        return dict(yaml.safe_load(io.TextIOWrapper(member, encoding="utf-8")))


def served(cluster: K8sCluster) -> dict[str, Any]:
    return dict(json.loads(cluster.kubectl("get", "crd", CRD_NAME, "-o", "json")))


def install_as_0_1_0_left_it(cluster: K8sCluster) -> None:
    """The CRD as 0.1.0's `helm install` created it from crds/: its schema, no Helm
    ownership (the session's CRD is replaced whole, whoever applied it before)."""
    text = yaml.safe_dump(old_crd())
    if cluster.kubectl("get", "crd", CRD_NAME, "--ignore-not-found", "-o", "name"):
        cluster.kubectl("replace", "-f", "-", input=text)
    else:
        cluster.kubectl("create", "-f", "-", input=text)
    wait_crd_established(cluster.kubectl)
    crd = served(cluster)
    assert NEW_TEXT not in json.dumps(crd["spec"])
    assert "meta.helm.sh/release-name" not in (crd["metadata"].get("annotations") or {})


def profiles(cluster: K8sCluster, namespace: str) -> dict[str, tuple[str, Any]]:
    items = json.loads(cluster.kubectl("get", "spsprofiles", "-n", namespace, "-o", "json"))
    return {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]) for p in items["items"]}


@pytest.mark.parametrize("adopt", ["take-ownership", "label-and-annotate"])
def test_helm_upgrade_from_0_1_0_upgrades_the_crd_and_keeps_every_profile(
    k8s_cluster: K8sCluster, namespace: str, tmp_path: Path, adopt: str
) -> None:
    cluster = k8s_cluster
    release = f"up-{secrets.token_hex(3)}"
    system = cluster.create_namespace(f"{namespace}-sys")
    values = ["--set", "watch.mode=namespaces", "--set", f"watch.namespaces={{{namespace}}}"]
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", system]
    try:
        install_as_0_1_0_left_it(cluster)
        helm("install", release, str(OLD_CHART), *kubeconfig, *values)
        for name in ("llama", "qwen", "mistral"):
            cluster.kubectl("create", "-n", namespace, "-f", "-",
                            input=profile_manifest(name))  # fmt: skip
        before = profiles(cluster, namespace)
        assert len(before) == 3

        # Plain Helm 0.1.0 -> this chart: the CRD exists and is not the release's.
        refused = helm("upgrade", release, str(CHART), *kubeconfig, *values, check=False)
        assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr

        # The documented one-time step (charts/sps-operator/README.md), then the upgrade.
        if adopt == "take-ownership":
            helm("upgrade", release, str(CHART), *kubeconfig, *values, "--take-ownership")
        else:
            cluster.kubectl("label", "crd", CRD_NAME, "app.kubernetes.io/managed-by=Helm",
                            "--overwrite")  # fmt: skip
            cluster.kubectl("annotate", "crd", CRD_NAME, "--overwrite",
                            f"meta.helm.sh/release-name={release}",
                            f"meta.helm.sh/release-namespace={system}")  # fmt: skip
            helm("upgrade", release, str(CHART), *kubeconfig, *values)
        wait_crd_established(cluster.kubectl)

        crd = served(cluster)
        assert NEW_TEXT in json.dumps(crd["spec"])
        (version,) = crd["spec"]["versions"]
        (wanted,) = build_crd()["spec"]["versions"]
        assert version["schema"] == wanted["schema"]  # the models' schema, whole
        annotations = crd["metadata"]["annotations"]
        assert annotations["helm.sh/resource-policy"] == "keep"
        assert annotations["meta.helm.sh/release-name"] == release
        assert profiles(cluster, namespace) == before  # same objects (UIDs), same specs

        # Uninstall: the CRD and every SpsProfile stay (crds.keep).
        helm("uninstall", release, *kubeconfig, "--wait")
        assert served(cluster)["metadata"]["uid"] == crd["metadata"]["uid"]
        assert profiles(cluster, namespace) == before
    finally:
        helm("uninstall", release, *kubeconfig, check=False)
        cluster.delete_namespace(system)


def strategy(cluster: K8sCluster, namespace: str, release: str) -> str:
    dep = json.loads(
        cluster.kubectl(
            "get", "deployment", f"{release}-sps-operator", "-n", namespace, "-o", "json"
        )
    )
    return str(dep["spec"]["strategy"]["type"])


def test_an_upgrade_to_two_replicas_from_pods_that_elect_no_leader_replaces_them_first(
    k8s_cluster: K8sCluster, namespace: str
) -> None:
    """0.1.0 with one replica runs without leader election; rolling it onto two elected
    replicas (maxSurge 0, maxUnavailable 1) would start a new pod that takes the free Lease
    while the old one still acts: two operators at once. The chart reads the live pods'
    arguments and replaces them first (Recreate) this once; from elected pods it rolls."""
    cluster = k8s_cluster
    release = f"up-{secrets.token_hex(3)}"
    system = cluster.create_namespace(f"{namespace}-sys")
    values = ["--set", "watch.mode=namespaces", "--set", f"watch.namespaces={{{namespace}}}"]
    kubeconfig = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", system]
    try:
        install_as_0_1_0_left_it(cluster)
        helm("install", release, str(OLD_CHART), *kubeconfig, *values, "--set", "replicaCount=1")
        assert strategy(cluster, system, release) == "Recreate"
        two = [*values, "--set", "replicaCount=2", "--take-ownership"]
        helm("upgrade", release, str(CHART), *kubeconfig, *two)
        assert strategy(cluster, system, release) == "Recreate"
        helm("upgrade", release, str(CHART), *kubeconfig, *two)
        assert strategy(cluster, system, release) == "RollingUpdate"
    finally:
        helm("uninstall", release, *kubeconfig, check=False)
        cluster.delete_namespace(system)


def test_a_second_release_watching_the_same_namespace_is_refused(
    k8s_cluster: K8sCluster, namespace: str
) -> None:
    """Each release elects its leader on a Lease in its own namespace: two releases that
    watch one namespace would both act on its profiles. The second is refused, naming the
    first; one that watches another namespace installs."""
    cluster = k8s_cluster
    first, second = (f"r{i}-{secrets.token_hex(3)}" for i in (1, 2))
    sys1, sys2 = (cluster.create_namespace(f"{namespace}-s{i}") for i in (1, 2))
    other = cluster.create_namespace(f"{namespace}-other")
    crds = ["--set", "crds.enabled=false"]

    def watching(ns: str) -> list[str]:
        return ["--set", "watch.mode=namespaces", "--set", f"watch.namespaces={{{ns}}}", *crds]

    try:
        helm("install", first, str(CHART), "--kubeconfig", str(cluster.kubeconfig),
             "--namespace", sys1, *watching(namespace))  # fmt: skip
        args = ["--kubeconfig", str(cluster.kubeconfig), "--namespace", sys2]
        refused = helm("install", second, str(CHART), *args, *watching(namespace), check=False)
        assert refused.returncode != 0
        assert f"ServiceAccount {sys1}/{first}-sps-operator watches namespace {namespace}" in (
            refused.stderr
        ), refused.stderr
        refused = helm("install", second, str(CHART), *args, "--set", "watch.mode=cluster",
                       *crds, check=False)  # fmt: skip
        assert refused.returncode != 0 and f"{sys1}/{first}-sps-operator" in refused.stderr
        helm("install", second, str(CHART), *args, *watching(other))
        # The first release upgrades as before (its own bindings are not another's).
        helm("upgrade", first, str(CHART), "--kubeconfig", str(cluster.kubeconfig),
             "--namespace", sys1, *watching(namespace))  # fmt: skip
    finally:
        for release, ns in ((second, sys2), (first, sys1)):
            helm("uninstall", release, "--kubeconfig", str(cluster.kubeconfig), "--namespace", ns,
                 check=False)  # fmt: skip
        for ns in (sys1, sys2, other):
            cluster.delete_namespace(ns)
