"""examples/: every manifest is valid (API models, and the API server's own validation)."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import pytest
import yaml
from ship_helpers import ROOT, apply_chart_crd

from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.policies.job_policy import JobPolicy, spec_refusal
from sps_testbed.controlplane_fixtures import K8sCluster

EXAMPLES = ROOT / "examples"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_objects() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, doc)
        for path in sorted(EXAMPLES.rglob("*.yaml"))
        if path.name != "kustomization.yaml"
        for doc in documents(path)
    ]


def by_kind(kind: str) -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p, d in all_objects() if d["kind"] == kind]


def test_the_examples_the_issue_asks_for_exist() -> None:
    profiles = {d["metadata"]["name"]: d["spec"] for _, d in by_kind("SpsProfile")}
    kinds = {(s.get("table") or {}).get("kind") for s in profiles.values()}
    assert kinds == {"Diagonal", "Additive"}
    assert any((s.get("server") or {}).get("source") == "External" for s in profiles.values())
    assert any((s.get("rollout") or {}).get("mode") == "AnnotateOnly" for s in profiles.values())
    assert by_kind("Application"), "the GitOps example has an Argo CD Application"
    assert by_kind("Deployment"), "a sample SGLang Deployment"


@pytest.mark.parametrize(
    "doc", [d for _, d in by_kind("SpsProfile")], ids=lambda d: d["metadata"]["name"]
)
def test_profiles_validate_against_the_api_models(doc: dict[str, Any]) -> None:
    spec = SpsProfileSpec.model_validate(doc["spec"])
    assert spec.to_k8s()["selector"] == doc["spec"]["selector"]


@pytest.mark.parametrize(
    "doc", [d for _, d in by_kind("SpsProfile")], ids=lambda d: d["metadata"]["name"]
)
def test_profiles_pass_the_default_admin_policy(doc: dict[str, Any]) -> None:
    """What a user copies runs under the chart's default policy (namespace `serving`, as
    the External example's URL says)."""
    spec = SpsProfileSpec.model_validate(doc["spec"])
    assert spec_refusal(JobPolicy(), spec, namespace="serving", profiler_image="x") is None


def test_each_selector_matches_exactly_one_example_deployment_or_none() -> None:
    deployments = [d for _, d in by_kind("Deployment")]
    for _, profile in by_kind("SpsProfile"):
        wanted = profile["spec"]["selector"]["matchLabels"]
        hits = [
            d for d in deployments if wanted.items() <= (d["metadata"].get("labels") or {}).items()
        ]
        assert len(hits) <= 1, profile["metadata"]["name"]
        for dep in hits:
            names = [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]]
            assert profile["spec"].get("serverContainer", names[0]) in names


def test_gitops_deployment_mounts_what_the_profile_names() -> None:
    ((_, profile),) = [
        (p, d)
        for p, d in by_kind("SpsProfile")
        if d["spec"].get("rollout", {}).get("mode") == "AnnotateOnly"
    ]
    rollout = profile["spec"]["rollout"]
    ((_, dep),) = [
        (p, d)
        for p, d in by_kind("Deployment")
        if d["metadata"]["labels"].items() >= profile["spec"]["selector"]["matchLabels"].items()
    ]
    pod = dep["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == rollout["tableConfigMap"]
    (container,) = [c for c in pod["containers"] if c["name"] == profile["spec"]["serverContainer"]]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    directory, filename = posixpath.split(rollout["tablePath"])
    assert mount["mountPath"] == directory and filename == "table.json"
    assert f"--speculative-dspark-sps-table-path={rollout['tablePath']}" in container["args"]
    # No GitOps tool owns the table ConfigMap: it is not among the manifests.
    assert not by_kind("ConfigMap")


def test_argocd_application_ignores_the_operator_fields() -> None:
    ((_, app),) = by_kind("Application")
    assert {
        "group": "apps",
        "kind": "Deployment",
        "managedFieldsManagers": ["sps-operator"],
    } in app["spec"]["ignoreDifferences"]
    assert "RespectIgnoreDifferences=true" in app["spec"]["syncPolicy"]["syncOptions"]
    assert app["spec"]["source"]["path"] == "examples/gitops"
    kustomization = yaml.safe_load((EXAMPLES / "gitops" / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (EXAMPLES / "gitops" / resource).is_file()


@pytest.mark.k8s
def test_ship_examples_pass_server_side_validation(k8s_cluster: K8sCluster, namespace: str) -> None:
    apply_chart_crd(k8s_cluster.kubectl)
    for path, doc in all_objects():
        if doc["kind"] == "Application":
            continue  # Argo CD's CRD is not installed here
        out = k8s_cluster.kubectl(
            "apply",
            "--server-side",
            "--dry-run=server",
            "-n",
            namespace,
            "-f",
            "-",
            input=yaml.safe_dump(doc),
        )
        assert "serverside-applied (server dry run)" in out, (path, out)
