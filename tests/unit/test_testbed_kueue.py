"""The test bed's Kueue set-up, without a cluster: the shipped manifests as the bed changes
them, and the queues it makes for the bed's GPU products (sps_testbed.kueue)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed.controlplane import DEFAULT_NODES, NodeSpec
from sps_testbed.kueue import (
    CLUSTER_QUEUE,
    KueueError,
    bed_manifests,
    condition,
    flavor_name,
    local_queue,
    queue_manifests,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

# The shape of `kubectl kustomize config/default` of Kueue, cut down to what the bed touches.
RENDERED = """
apiVersion: v1
kind: Namespace
metadata:
  name: kueue-system
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: kueue-controller-manager
  namespace: kueue-system
spec:
  template:
    spec:
      containers:
      - name: manager
        image: us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:main
        imagePullPolicy: Always
        resources:
          limits: {cpu: "2", memory: 512Mi}
          requests: {cpu: 500m, memory: 512Mi}
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
  name: kueue-mutating-webhook-configuration
webhooks:
- name: mjob.kb.io
  failurePolicy: Fail
"""


def test_the_manager_runs_the_release_image_everything_else_as_shipped() -> None:
    docs = bed_manifests(RENDERED, "registry.k8s.io/kueue/kueue:v0.17.1")
    shipped = [d for d in yaml.safe_load_all(RENDERED) if d]
    assert [d["kind"] for d in docs] == [d["kind"] for d in shipped]
    (container,) = docs[1]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/kueue/kueue:v0.17.1"
    # Pulled from the bed's registry as shipped (no side-loaded image to keep).
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == {
        "limits": {"cpu": "2", "memory": "512Mi"},
        "requests": {"cpu": "100m", "memory": "512Mi"},
    }
    shipped_manager = shipped[1]["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"] == {
        **shipped_manager["readinessProbe"],
        "initialDelaySeconds": 0,
        "periodSeconds": 1,
    }
    assert container["livenessProbe"] == shipped_manager["livenessProbe"]
    assert docs[0] == shipped[0] and docs[2] == shipped[2]


def test_a_rendering_without_the_manager_is_refused() -> None:
    other = RENDERED.replace("name: manager", "name: sidecar")
    with pytest.raises(KueueError, match="kueue-controller-manager"):
        bed_manifests(other, "img")


def test_flavor_names_of_the_bed_products() -> None:
    assert flavor_name(GPU_H100) == "nvidia-h100-80gb-hbm3"
    assert flavor_name(GPU_H200) == "nvidia-h200"
    with pytest.raises(ValueError, match="no ResourceFlavor name"):
        flavor_name("--__--")


@given(st.text(min_size=1, max_size=200))
def test_a_flavor_name_is_a_dns_label_or_refused(product: str) -> None:
    try:
        name = flavor_name(product)
    except ValueError:
        assert not re.search(r"[a-z0-9]", product.lower())
        return
    assert DNS_LABEL.match(name), name


def test_a_flavor_per_product_and_a_gpu_quota_of_its_gpus() -> None:
    nodes = [*DEFAULT_NODES, NodeSpec("gpu-h200-2", GPU_H200, gpus=4)]
    docs = queue_manifests(nodes)
    flavors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceFlavor"}
    assert {n: f["spec"]["nodeLabels"] for n, f in flavors.items()} == {
        "nvidia-h100-80gb-hbm3": {GPU_PRODUCT_LABEL: GPU_H100},
        "nvidia-h200": {GPU_PRODUCT_LABEL: GPU_H200},
    }
    (cq,) = [d for d in docs if d["kind"] == "ClusterQueue"]
    assert cq["metadata"]["name"] == CLUSTER_QUEUE == "gpu"
    assert cq["spec"]["namespaceSelector"] == {}  # null would admit no namespace
    (group,) = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", GPU_RESOURCE]
    gpu_quota = {}
    for flavor in group["flavors"]:
        # Kueue rejects a flavor whose resources differ from coveredResources (or their order).
        assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
        gpu_quota[flavor["name"]] = flavor["resources"][2]["nominalQuota"]
    assert gpu_quota == {"nvidia-h100-80gb-hbm3": 16, "nvidia-h200": 20}
    assert list(gpu_quota) == list(flavors)  # the order Kueue tries them in
    priorities = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] != "ResourceFlavor"
                  and d["kind"] != "ClusterQueue"}  # fmt: skip
    assert priorities["high"] > priorities["low"]
    assert all(d["apiVersion"] == "kueue.x-k8s.io/v1beta2" for d in docs)


def test_no_nodes_no_queues() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        queue_manifests([])


def test_a_local_queue_points_at_the_cluster_queue() -> None:
    lq = local_queue("team-a")
    assert lq["kind"] == "LocalQueue"
    assert lq["metadata"] == {"name": "gpu", "namespace": "team-a"}
    assert lq["spec"] == {"clusterQueue": "gpu"}


def test_condition_by_type() -> None:
    obj = {"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "B"}]}}
    assert condition(obj, "A") == {"type": "A", "status": "False"}
    assert condition(obj, "C") == {}
    assert condition({}, "A") == {}


INNER_CONFTEST = """
import pytest
from sps_testbed.kueue import KueueError


class Bed:
    def install_kueue(self):
        raise KueueError("Deployment kueue-system/kueue-controller-manager available: "
                         "not within 300s")


@pytest.fixture(scope="session")
def realnode_cluster():
    return Bed()
"""


def test_the_kueue_fixtures_fail_never_skip_when_kueue_does_not_install(tmp_path: Path) -> None:
    """A Kueue that does not come up fails every test that asks for it, with Kueue's words,
    in a session run as CI runs it (the plugin from its entry point); nothing is skipped."""
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(
        "def test_a(realnode_kueue):\n    pass\n\ndef test_b(realnode_kueue_namespace):\n    pass\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "-rA", str(tmp_path / "test_inner.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 errors" in proc.stdout and "skipped" not in proc.stdout, out
    assert "Kueue did not install on the test bed" in proc.stdout, out
    assert "kueue-controller-manager available: not within 300s" in proc.stdout, out


def test_the_kueue_modules_run_after_every_other_bed_test(tmp_path: Path) -> None:
    """Kueue's modules, whole and in order, move behind the last other test using the bed
    (the bed then stops right after them: no removal); tests without the bed keep their
    place."""
    files = {
        "test_a.py": "def test_bed(realnode_cluster): pass\ndef test_pure(): pass\n",
        "test_kueue.py": (
            "def test_queued(realnode_kueue): pass\n"
            "def test_plain(realnode_namespace): pass\n"
            "def test_ns(realnode_kueue_namespace): pass\n"
        ),
        "test_m.py": "def test_bed(realnode_kubectl): pass\n",
        "test_z.py": "def test_pure(): pass\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", os.devnull, "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "--collect-only", "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    order = [line for line in proc.stdout.splitlines() if "::" in line]
    assert order == [
        "test_a.py::test_bed",
        "test_a.py::test_pure",
        "test_m.py::test_bed",
        "test_kueue.py::test_queued",
        "test_kueue.py::test_plain",
        "test_kueue.py::test_ns",
        "test_z.py::test_pure",
    ], proc.stdout
