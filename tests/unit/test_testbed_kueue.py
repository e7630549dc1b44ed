"""The test bed's Kueue set-up, without a cluster: the shipped manifests as the bed changes
them, and the queues it makes for the bed's GPU products (sps_testbed.kueue)."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.constants import GPU_H100, GPU_H200, GPU_PRODUCT_LABEL, GPU_RESOURCE
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
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: kueue-mutating-webhook-configuration
webhooks:
- name: mjob.kb.io
  failurePolicy: Fail
"""


def test_the_manager_runs_the_bed_image_without_a_registry_everything_else_as_shipped() -> None:
    docs = bed_manifests(RENDERED, "registry.k8s.io/kueue/kueue:v0.17.1")
    shipped = [d for d in yaml.safe_load_all(RENDERED) if d]
    assert [d["kind"] for d in docs] == [d["kind"] for d in shipped]
    (container,) = docs[1]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.k8s.io/kueue/kueue:v0.17.1"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["resources"] == {
        "limits": {"cpu": "2", "memory": "512Mi"},
        "requests": {"cpu": "100m", "memory": "512Mi"},
    }
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
