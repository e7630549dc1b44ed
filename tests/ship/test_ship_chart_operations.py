"""The chart as clusters run it: the CRD as a template (upgraded by helm, vendorable), the
roles users get, the replicas' PodDisruptionBudget and spread, the pods' labels."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from ship_helpers import CHART, by_kind, helm, render

from sps_operator.api import labels as L
from sps_operator.api.crd import build_crd
from sps_operator.plugin.view import operator_pod_version


def one(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = by_kind(objects, kind)
    return obj


def pod_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    return dict(one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"])


def selector_labels(objects: list[dict[str, Any]]) -> dict[str, str]:
    return dict(one(objects, "Deployment")["spec"]["selector"]["matchLabels"])


def test_the_crd_is_a_template_of_the_generated_crd_kept_on_uninstall() -> None:
    crd = one(render(), "CustomResourceDefinition")
    assert crd["spec"] == build_crd()["spec"]  # no drift: the models' schema, verbatim
    assert crd["metadata"]["name"] == "spsprofiles.sps.dev"
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    unkept = one(render("crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in unkept["metadata"]
    assert not by_kind(render("crds.enabled=false"), "CustomResourceDefinition")


def test_the_packaged_chart_carries_the_crd_without_links(tmp_path: Path) -> None:
    # A symlinked crds/ broke for anyone vendoring the chart; nothing links out any more.
    assert not [p for p in CHART.rglob("*") if p.is_symlink()]
    assert not (CHART / "crds").exists()
    helm("package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("sps-operator-*.tgz")
    with tarfile.open(package) as tar:
        names = tar.getnames()
        assert "sps-operator/templates/crd-spsprofiles.yaml" in names
        assert "sps-operator/dashboards/sps-operator.json" in names
        tar.extractall(tmp_path / "x", filter="data")
    out = helm("template", "r", str(tmp_path / "x" / "sps-operator"), "--kube-version",
               "1.36.0").stdout  # fmt: skip
    crds = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "CustomResourceDefinition"]
    assert [c["spec"] for c in crds] == [build_crd()["spec"]]


def test_replicas_get_a_disruption_budget_and_a_spread_that_select_them() -> None:
    objects = render()
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == selector_labels(objects)
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"].items() <= pod_labels(objects).items()
    assert spread["matchLabelKeys"] == ["pod-template-hash"]

    single = render("replicaCount=1")
    assert not by_kind(single, "PodDisruptionBudget")
    assert "topologySpreadConstraints" not in one(single, "Deployment")["spec"]["template"]["spec"]
    zones = render(
        "topologySpread.enabled=false",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
    )
    (only,) = one(zones, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert only["topologyKey"] == "topology.kubernetes.io/zone"
    assert not by_kind(render("podDisruptionBudget.enabled=false"), "PodDisruptionBudget")


@pytest.mark.parametrize(
    ("values", "tag"),
    [([], "0.1.0"), (["image.tag=0.2.0-rc.1", "image.digest=sha256:" + "cd" * 32], "0.2.0-rc.1")],
)
def test_kubectl_sps_version_finds_the_operator_pods_and_their_version(
    values: list[str], tag: str
) -> None:
    objects = render(*values)
    labels = pod_labels(objects)
    wanted = dict(pair.split("=") for pair in L.OPERATOR_POD_SELECTOR.split(","))
    assert wanted.items() <= labels.items()
    # What `kubectl sps version` reads from such a pod (its spec as the chart makes it).
    template = one(objects, "Deployment")["spec"]["template"]
    pod = {"metadata": {"name": "p", "namespace": "sps-system", **template["metadata"]},
           "spec": template["spec"]}  # fmt: skip
    assert operator_pod_version(pod)["version"] == tag
    assert labels["app.kubernetes.io/version"] == tag
