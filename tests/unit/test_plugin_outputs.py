"""`kubectl sps get -o wide|name` (kubectl's output forms; -o jsonpath is kubectl get's), and
`kubectl sps version`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sps_operator import __version__
from sps_operator.plugin import cli, view


def profile(name: str, ready: str = "True", reason: str = "TableLive") -> dict[str, Any]:
    return {
        "apiVersion": "sps.dev/v1alpha1",
        "kind": "SpsProfile",
        "metadata": {"name": name, "namespace": "serving",
                     "creationTimestamp": "2026-03-01T12:00:00Z"},
        "spec": {"table": {"kind": "Diagonal"}},
        "status": {
            "gpuProduct": "NVIDIA-H200",
            "liveTable": f"{name}-table-1",
            "conditions": [{"type": "Ready", "status": ready, "reason": reason},
                           {"type": "Stale", "status": "False", "reason": "Current"}],
            "targets": [{"deployment": "a", "state": "Live"}, {"deployment": "b",
                                                                "state": "NoTable"}],
            "lastFailure": {"reason": "ProfilingFailed", "message": "x"},
        },
    }  # fmt: skip


class Profiles:
    default_namespace = "serving"

    def __init__(self, *profiles: dict[str, Any]) -> None:
        self.profiles = list(profiles)
        self.pods: list[dict[str, Any]] = []

    def list_profiles(self, namespace: str | None) -> list[dict[str, Any]]:
        return self.profiles

    def get_profile(self, namespace: str, name: str) -> dict[str, Any]:
        return next(p for p in self.profiles if p["metadata"]["name"] == name)

    def list_pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        self.selector = selector
        return self.pods


def run(capsys: pytest.CaptureFixture[str], cluster: Any, *argv: str) -> str:
    args = cli.build_parser().parse_args(list(argv))
    assert cli.COMMANDS[args.command](args, cluster) == 0
    return capsys.readouterr().out


def test_get_wide_adds_targets_reason_run_and_last_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run(capsys, Profiles(profile("llama")), "get", "-o", "wide").splitlines()
    assert out[0].split() == ["NAME", "KIND", "GPU", "TABLE", "STATE", "PROGRESS", "TARGETS",
                              "WORKLOADS", "REASON", "RUN", "LAST", "FAILURE", "GPU-SECONDS",
                              "ERROR-BOUND", "QUEUE", "AGE"]  # fmt: skip
    assert out[1].split()[6:11] == ["1/2", "Deployment", "TableLive", "-", "ProfilingFailed"]
    plain = run(capsys, Profiles(profile("llama")), "get").splitlines()
    assert "TARGETS" not in plain[0]


def test_get_name_prints_kubectl_resource_names(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, Profiles(profile("a"), profile("b")), "get", "-o", "name")
    assert out == "spsprofile.sps.dev/a\nspsprofile.sps.dev/b\n"


def test_get_leaves_jsonpath_to_kubectl_get(capsys: pytest.CaptureFixture[str]) -> None:
    """kubectl's own `-o jsonpath` reads SpsProfiles (a CRD); the plugin does not copy it."""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["get", "-o", "jsonpath={.items[*].metadata.name}"])
    assert "kubectl get spsprofiles -o jsonpath=" in capsys.readouterr().err


def operator_pod(name: str, image: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "sps-system",
                     "labels": {"app.kubernetes.io/version": "label-version"}},
        "spec": {"containers": [{"name": "operator", "image": image}]},
        "status": {"containerStatuses": [{"name": "operator", "ready": ready,
                                          "imageID": "reg/x@sha256:ab"}]},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("ghcr.io/sps-dev/sps-operator:0.1.0", "0.1.0"),
        ("registry.local:5000/sps/sps-operator:0.2.0@sha256:" + "ab" * 32, "0.2.0"),
        ("registry.local:5000/sps/sps-operator@sha256:" + "ab" * 32, "label-version"),
        ("sps-operator", "label-version"),
    ],
)
def test_the_operator_version_is_the_tag_it_runs(image: str, version: str) -> None:
    assert view.operator_pod_version(operator_pod("p", image))["version"] == version


def test_version_prints_the_client_and_every_operator_pod(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = Profiles()
    cluster.pods = [operator_pod("op-a", "r/sps-operator:0.1.0"),
                    operator_pod("op-b", "r/sps-operator:0.2.0", ready=False)]  # fmt: skip
    out = run(capsys, cluster, "version").splitlines()
    assert out[0] == f"Client Version: {__version__}"
    assert out[1] == "Operator Version: 0.1.0 (sps-system/op-a, r/sps-operator:0.1.0)"
    assert out[2] == "Operator Version: 0.2.0 (sps-system/op-b, r/sps-operator:0.2.0, not ready)"
    assert (
        cluster.selector
        == "app.kubernetes.io/part-of=sps-operator,app.kubernetes.io/component=operator"
    )
    data = json.loads(run(capsys, cluster, "version", "-o", "json"))
    assert data["client"] == __version__
    assert [o["version"] for o in data["operators"]] == ["0.1.0", "0.2.0"]
    cluster.pods = []
    missing = run(capsys, cluster, "version", "--operator-namespace", "ops")
    assert "no operator pod found (ops, selector app.kubernetes.io/part-of" in missing
