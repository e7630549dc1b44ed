"""`kubectl sps` against the local control plane, through kubectl's plugin mechanism.

The SpsProfile and its table ConfigMaps are created by hand, with the status shape of
the API models, so this tests the plugin, not the operator.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiClient
from ship_helpers import apply_chart_crd

from sps_operator.api import labels as names
from sps_operator.api.result import encode_rounds
from sps_operator.api.status import SpsProfileStatus
from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed.controlplane_fixtures import K8sCluster

pytestmark = pytest.mark.k8s

H100_TABLE = SpsCostTable([8, 16, 32, 64], [1000.0, 900.0, 600.0, 350.0], 128)
H200_TABLE = SpsCostTable([8, 16, 32, 64], [1200.0, 1100.0, 800.0, 500.0], 128)
ADDITIVE = SpsAdditiveCostTable(0.004, [1, 8, 16], [0.0, 0.0005, 0.001], [0, 64], [0.0, 0.002])


@pytest.fixture(scope="module")
def crd(k8s_cluster: K8sCluster) -> Iterator[None]:
    apply_chart_crd(k8s_cluster.kubectl)
    yield


def table_cm(
    namespace: str,
    name: str,
    table: SpsCostTable | SpsAdditiveCostTable,
    rounds: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A table ConfigMap as the operator publishes it: with the rounds it was fitted from,
    labelled for 0.1.0 with its server's version-1 key (api/legacy_tables.py), meta.json
    keeping the fingerprint it was measured for."""
    data, _ = encode_rounds(rounds or [])
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                names.LABEL_PROFILE: "llama",
                names.LABEL_COMPONENT: names.COMPONENT_TABLE,
                names.LABEL_TABLE_HASH: "0123456789abcdef",
                names.LABEL_FINGERPRINT: "5a5a5a5a5a5a5a5a",
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
            },
        },
        "immutable": True,
        "data": {
            names.TABLE_KEY: table.to_json(),
            names.META_KEY: json.dumps({"fingerprint": "fp01"}),
            **{k: v for k, v in data.items() if v and rounds},
        },
    }


def table_ref(
    gpu: str, cm: str, kind: str = "Diagonal", run: str = "llama-0a1b2c3d4e"
) -> dict[str, Any]:
    return {
        "gpuProduct": gpu,
        "fingerprint": "fp01",
        "kind": kind,
        "configMap": cm,
        "hash": "0123456789abcdef",
        "quality": {"rmsMs": 0.031, "r2": 0.9991, "maxRelErr": 0.021},
        "profiledAt": "2026-12-02T11:30:00Z",
        "run": run,
    }


def measured_rounds() -> list[dict[str, Any]]:
    return [
        {"batch_size_per_rank": bs, "batch_tokens": bs * 8, "steps_per_sec": sps}
        for bs, sps in [(1, 1010.0), (2, 905.0), (4, 598.0), (8, 352.0)]
    ]


def condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-02T11:31:00Z",
        "observedGeneration": 1,
    }


def create_profile(api: ApiClient, namespace: str, name: str, status: dict[str, Any]) -> None:
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "SpsProfile",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": name}}},
    }
    custom.create_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, body)
    # The status has the shape the operator writes: validate it with the API model first.
    wire = SpsProfileStatus.model_validate(status).to_k8s()
    custom.patch_namespaced_custom_object_status(
        API_GROUP, API_VERSION, namespace, PLURAL, name, {"status": wire}
    )


@pytest.fixture
def profiles(crd: None, k8s_api: ApiClient, namespace: str) -> str:
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_config_map(
        namespace, table_cm(namespace, "llama-table-h100", H100_TABLE, measured_rounds())
    )
    core.create_namespaced_config_map(
        namespace, table_cm(namespace, "llama-table-h200", H200_TABLE)
    )
    core.create_namespaced_config_map(namespace, table_cm(namespace, "llama-table-rej", ADDITIVE))
    create_profile(
        k8s_api,
        namespace,
        "llama",
        {
            "observedGeneration": 1,
            "gpuProduct": GPU_H200,
            "liveTable": "llama-table-h200",
            "tables": [
                table_ref(GPU_H100, "llama-table-h100"),
                table_ref(GPU_H200, "llama-table-h200"),
            ],
            "rejectedTable": table_ref(GPU_H200, "llama-table-rej", "Additive", "llama-ffff"),
            "conditions": [
                condition("Ready", "True", "TableLive", "table live on 1/1 targets"),
                condition("TableReady", "True", "Published"),
            ],
            "targets": [{"deployment": "llama", "gpuProduct": GPU_H200, "rolledOut": True}],
        },
    )
    create_profile(
        k8s_api,
        namespace,
        "qwen",
        {
            "observedGeneration": 1,
            "gpuProduct": GPU_H100,
            "conditions": [condition("Ready", "False", "ProfilingFailed", "the last run failed")],
            "lastFailure": {
                "run": "qwen-9f8e7d6c5b",
                "reason": "VerifyAllShortcut",
                "message": "every fraction ran at the full-width tier; "
                "the pinned budget did not take",
                "at": "2026-12-02T11:40:00Z",
                "gpuProduct": GPU_H100,
                "attempts": 1,
            },
            "targets": [{"deployment": "qwen", "gpuProduct": GPU_H100}],
        },
    )
    return namespace


def kubectl_sps(
    cluster: K8sCluster, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`kubectl sps ...`: kubectl finds the plugin `kubectl-sps` on PATH."""
    env = cluster.env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    proc = subprocess.run(
        [str(cluster.binaries.kubectl), "sps", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_ship_plugin_get(k8s_cluster: K8sCluster, profiles: str) -> None:
    out = kubectl_sps(k8s_cluster, "get", "-n", profiles).stdout.splitlines()
    assert out[0].split() == ["NAME", "KIND", "GPU", "TABLE", "STATE", "PROGRESS", "AGE"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["llama"][1:6] == ["Diagonal", GPU_H200, "llama-table-h200", "Ready", "-"]
    assert rows["qwen"][1:6] == ["Diagonal", GPU_H100, "<none>", "ProfilingFailed", "-"]
    data = json.loads(kubectl_sps(k8s_cluster, "get", "-A", "-o", "json").stdout)
    mine = [r for r in data if r["namespace"] == profiles]
    assert {r["name"] for r in mine} == {"llama", "qwen"}


def test_ship_plugin_table_and_plot(k8s_cluster: K8sCluster, profiles: str, tmp_path: Path) -> None:
    out = kubectl_sps(k8s_cluster, "table", "llama", "-n", profiles).stdout
    assert f"GPU product:  {GPU_H200}" in out
    assert "ConfigMap:    llama-table-h200" in out
    lines = out.splitlines()
    assert ["8", "1200.00", "0.833"] in [line.split() for line in lines]
    png = tmp_path / "h100.png"
    data = yaml.safe_load(
        kubectl_sps(
            k8s_cluster,
            "table",
            "llama",
            "--gpu",
            GPU_H100,
            "--plot",
            str(png),
            "-n",
            profiles,
            "-o",
            "yaml",
        ).stdout
    )
    assert data["configMap"] == "llama-table-h100"
    assert data["table"]["probes"][0] == {"batchTokens": 8, "stepsPerSec": 1000.0, "stepMs": 1.0}
    assert png.read_bytes()[:4] == b"\x89PNG"
    # The run's raw rounds are still there: the plot shows the measured cells and the fit.
    human = kubectl_sps(
        k8s_cluster, "table", "llama", "--gpu", GPU_H100, "--plot", str(png), "-n", profiles
    ).stdout
    assert f"Plot (measured cells, fit and residuals) written to {png}" in human
    rejected_png = tmp_path / "rejected.png"
    rejected = kubectl_sps(
        k8s_cluster, "table", "llama", "--rejected", "--plot", str(rejected_png), "-n", profiles
    ).stdout
    assert "bias = 4.000 ms" in rejected
    assert f"Plot (the table) written to {rejected_png}" in rejected
    assert rejected_png.read_bytes()[:4] == b"\x89PNG"
    missing = kubectl_sps(
        k8s_cluster, "table", "llama", "--gpu", "A100", "-n", profiles, check=False
    )
    assert missing.returncode == 1
    assert "no table for GPU 'A100'" in missing.stderr


def test_ship_plugin_diff(k8s_cluster: K8sCluster, profiles: str, tmp_path: Path) -> None:
    data = json.loads(
        kubectl_sps(
            k8s_cluster,
            "diff",
            f"llama@{GPU_H100}",
            f"llama@{GPU_H200}",
            "-n",
            profiles,
            "-o",
            "json",
        ).stdout
    )
    by_m = {p["verifyTokens"]: p for p in data["points"]}
    assert by_m[64]["oldMs"] == pytest.approx(1000 / 350)
    assert by_m[64]["newMs"] == pytest.approx(2.0)
    assert data["old"] == "configmap/llama-table-h100"
    # A cluster table against a local file works too.
    local = tmp_path / "t.json"
    local.write_text(H200_TABLE.to_json())
    human = kubectl_sps(
        k8s_cluster, "diff", "configmap/llama-table-h200", str(local), "-n", profiles
    )
    assert "median +0.0%" in human.stdout


def test_ship_plugin_export_is_an_applicable_manifest(
    k8s_cluster: K8sCluster, profiles: str
) -> None:
    text = kubectl_sps(k8s_cluster, "export", "llama", "-n", profiles).stdout
    manifest = yaml.safe_load(text)
    assert manifest["metadata"]["name"] == "llama-pinned-0123456789"
    assert "ownerReferences" not in manifest["metadata"]
    assert manifest["metadata"]["annotations"][names.LABEL_FINGERPRINT] == "fp01"
    assert json.loads(manifest["data"][names.TABLE_KEY]) == H200_TABLE.to_dict()
    # It is what `git add` + GitOps would apply: the API server accepts it as is.
    k8s_cluster.kubectl("apply", "-n", profiles, "--server-side", "-f", "-", input=text)
    applied = json.loads(
        k8s_cluster.kubectl(
            "get", "configmap", "llama-pinned-0123456789", "-n", profiles, "-o", "json"
        )
    )
    assert applied["data"][names.TABLE_KEY] == H200_TABLE.to_json()
    assert names.LABEL_PROFILE not in applied["metadata"].get("labels", {})


def test_ship_plugin_reprofile_sets_the_annotation_only(
    k8s_cluster: K8sCluster, profiles: str
) -> None:
    before = json.loads(k8s_cluster.kubectl("get", "sps", "llama", "-n", profiles, "-o", "json"))
    out = kubectl_sps(k8s_cluster, "reprofile", "llama", "--value", "t-42", "-n", profiles).stdout
    assert "reprofile requested (sps.dev/reprofile=t-42)" in out
    after = json.loads(k8s_cluster.kubectl("get", "sps", "llama", "-n", profiles, "-o", "json"))
    assert after["metadata"]["annotations"][names.ANNOTATION_REPROFILE] == "t-42"
    assert after["spec"] == before["spec"]
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    missing = kubectl_sps(k8s_cluster, "reprofile", "nope", "-n", profiles, check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr


def test_ship_plugin_explain(k8s_cluster: K8sCluster, profiles: str) -> None:
    out = kubectl_sps(k8s_cluster, "explain", "qwen", "-n", profiles).stdout
    assert out.startswith(f"SpsProfile {profiles}/qwen: ProfilingFailed")
    assert "verify-all shortcut" in out
    assert "Next:" in out and "non-flat table" in out
    healthy = json.loads(
        kubectl_sps(k8s_cluster, "explain", "llama", "-n", profiles, "-o", "json").stdout
    )
    assert healthy["state"] == "Ready"
    assert [f["what"] for f in healthy["findings"]] == [
        "A new table failed an acceptance gate and was not rolled out"
    ]


def test_ship_plugin_takes_kubectls_connection_flags(
    k8s_cluster: K8sCluster, profiles: str
) -> None:
    """`--as` reaches the API server (impersonation by the admin the kubeconfig names: an
    unprivileged user is refused, in the server's words); `--server` replaces the
    kubeconfig's address; `--request-timeout` bounds each request."""
    ok = kubectl_sps(k8s_cluster, "get", "-n", profiles, "--request-timeout", "30s")
    assert "llama" in ok.stdout
    nobody = kubectl_sps(k8s_cluster, "get", "-n", profiles, "--as", "nobody", check=False)
    assert nobody.returncode == 1
    assert "forbidden" in nobody.stderr and "SpsProfiles" in nobody.stderr
    dead = kubectl_sps(
        k8s_cluster, "get", "-n", profiles, "--server", "https://127.0.0.1:9",
        "--request-timeout", "5s", check=False,
    )  # fmt: skip
    assert dead.returncode == 1
    assert "cannot reach the API server" in dead.stderr
