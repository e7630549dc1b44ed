"""The test bed's LeaderWorkerSet set-up, without a cluster: the shipped manifests as the
bed changes them, and how it sees LWS's webhooks serve (sps_testbed.lws)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from sps_testbed.binaries import CONTROL_PLANE_BINARIES, OPTIONAL_BINARIES
from sps_testbed.cluster import RealNodeCluster
from sps_testbed.lws import (
    API_VERSION,
    DEPLOYMENT,
    MANAGER_CPU_REQUEST,
    LwsError,
    bed_manifests,
    defaulted_by_webhook,
    probe_manifest,
)
from sps_testbed.pytest_plugin import addon_modules_last

# The shape of `kubectl kustomize config/default` of LWS v0.9.0, cut down to what the bed
# touches.
RENDERED = """
apiVersion: v1
kind: Namespace
metadata:
  name: lws-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: lws-controller-manager
  namespace: lws-system
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: manager
        image: us-central1-docker.pkg.dev/k8s-staging-images/lws/lws:release-0.9
        args: [--config=/controller_manager_config.yaml, --zap-log-level=2]
        resources:
          requests: {cpu: 1, memory: 1Gi}
        readinessProbe:
          httpGet: {path: /readyz, port: 8081}
          initialDelaySeconds: 5
          periodSeconds: 10
        livenessProbe:
          httpGet: {path: /healthz, port: 8081}
          initialDelaySeconds: 15
          periodSeconds: 20
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: lws-mutating-webhook-configuration
webhooks:
- name: mpod.kb.io
  failurePolicy: Fail
  objectSelector:
    matchExpressions: [{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}]
"""


def test_the_manager_runs_the_release_image_once_everything_else_as_shipped() -> None:
    docs = bed_manifests(RENDERED, "registry.k8s.io/lws/lws:v0.9.0")
    shipped = [d for d in yaml.safe_load_all(RENDERED) if d]
    assert [d["kind"] for d in docs] == [d["kind"] for d in shipped]
    deployment = docs[1]
    # One replica: the shipped two would each reserve a CPU on nodes that share two.
    assert deployment["spec"]["replicas"] == 1
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/lws/lws:v0.9.0"
    assert container["resources"]["requests"] == {"cpu": MANAGER_CPU_REQUEST, "memory": "1Gi"}
    assert container["readinessProbe"] == {
        "httpGet": {"path": "/readyz", "port": 8081},
        "initialDelaySeconds": 0,
        "periodSeconds": 1,
    }
    # The rest as shipped: its arguments, liveness, and the webhooks with their selector.
    shipped_container = shipped[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == shipped_container["args"]
    assert container["livenessProbe"] == shipped_container["livenessProbe"]
    assert docs[0] == shipped[0] and docs[2] == shipped[2]


def test_a_layout_without_the_manager_is_refused_with_what_was_looked_for() -> None:
    renamed = RENDERED.replace(f"name: {DEPLOYMENT}", "name: lws-manager")
    with pytest.raises(LwsError, match=f"no Deployment {DEPLOYMENT}"):
        bed_manifests(renamed, "img")
    no_container = RENDERED.replace("- name: manager", "- name: main")
    with pytest.raises(LwsError, match="changed its layout"):
        bed_manifests(no_container, "img")


def test_only_the_webhooks_defaults_say_they_served() -> None:
    probe = probe_manifest("ns")
    assert probe["apiVersion"] == API_VERSION and probe["metadata"]["namespace"] == "ns"
    assert probe["spec"]["leaderWorkerTemplate"]["size"] == 1
    # As the CRD alone stores it: no subdomain policy (the schema has no default for it).
    assert not defaulted_by_webhook(probe)
    served = {**probe, "spec": {**probe["spec"], "networkConfig": {"subdomainPolicy": "Shared"}}}
    assert defaulted_by_webhook(served)
    assert not defaulted_by_webhook({})


def test_the_modules_of_either_add_on_run_after_every_other_bed_test() -> None:
    def item(nodeid: str, *fixtures: str) -> Any:
        return SimpleNamespace(nodeid=nodeid, fixturenames=fixtures)

    items = [
        item("t/test_lws.py::a", "realnode_lws"),
        item("t/test_lws.py::b", "realnode_cluster"),
        item("t/test_kueue.py::a", "realnode_kueue"),
        item("t/test_bed.py::a", "realnode_cluster"),
        item("t/test_unit.py::a"),
    ]
    ordered = [i.nodeid for i in addon_modules_last(items)]
    assert ordered == [
        "t/test_bed.py::a",
        "t/test_lws.py::a",
        "t/test_lws.py::b",  # its whole module, in order
        "t/test_kueue.py::a",
        "t/test_unit.py::a",
    ]


def test_a_bed_attached_without_a_build_runs_the_pinned_kubectl_not_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `sps-testbed up --with lws` on a running bed attaches without building; an older
    # kubectl on PATH read the add-on's stream of JSON documents as one and failed.
    assets = tmp_path / "assets"
    assets.mkdir()
    for name in (*CONTROL_PLANE_BINARIES, *OPTIONAL_BINARIES):
        (assets / name).write_text("#!/bin/sh\n")
        (assets / name).chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("PATH", "/usr/bin")
    bed = RealNodeCluster(tmp_path / "state", detached=True)
    assert bed.artifacts is None
    assert bed.env()["PATH"].split(os.pathsep)[0] == str(assets)
