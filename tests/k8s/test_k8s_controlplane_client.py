"""The operator's client (`Kube`, requests on the bare ApiClient) against the real API
server: each kind's path, the UID a create returns, delete's UID precondition, events,
the lists a pass reads, and the lender patch's resourceVersion precondition. The typed
client reads back what the operator's wrote."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from sps_operator.constants import FIELD_MANAGER
from sps_operator.controller.kube.client import Kube

pytestmark = pytest.mark.k8s


def _objects(namespace: str) -> list[dict[str, Any]]:
    meta = {"name": "sps-client", "namespace": namespace, "labels": {"sps.dev/test": "yes"}}
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [rule]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "sps-client"},
         "subjects": [{"kind": "ServiceAccount", "name": "sps-client", "namespace": namespace}]},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"clusterIP": "None", "selector": {"app": "x"}}},
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
         "spec": {"holderIdentity": "me"}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
         "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                  "containers": [{"name": "c", "image": "busybox"}]}}}},
    ]  # fmt: skip


def test_k8s_controlplane_the_client_creates_reads_and_deletes_each_kind(
    k8s_api: ApiClient, namespace: str
) -> None:
    kube = Kube(k8s_api)
    for obj in _objects(namespace):
        kind = obj["kind"]
        uid = kube.create(obj)
        read = kube.get(kind, namespace, "sps-client")
        assert uid and read is not None and read["metadata"]["uid"] == uid, kind
        assert kube.create(obj) is None, kind  # the name is taken: an adoption, not an error
    assert [s["metadata"]["name"] for s in kube.list_services(namespace)] == ["sps-client"]
    assert len(kube.list_leases(namespace, "sps.dev/test=yes")) == 1
    assert kube.list_leases(namespace, "sps.dev/test=no") == []
    assert len(kube.list_jobs(namespace, "sps.dev/test in (yes)")) == 1
    assert kube.list_pdbs(namespace) == [] and kube.list_hpas(namespace) == []
    assert kube.list_workloads(namespace, "") is None  # no Kueue on this API server

    # With a UID, only that very object: another one under the name is left alone.
    kube.delete("ConfigMap", namespace, "sps-client", uid="00000000-0000-0000-0000-000000000000")
    assert kube.get("ConfigMap", namespace, "sps-client") is not None
    for obj in _objects(namespace):
        read = kube.get(obj["kind"], namespace, "sps-client") or {}
        kube.delete(obj["kind"], namespace, "sps-client", uid=read["metadata"]["uid"])
        kube.delete(obj["kind"], namespace, "sps-client")  # gone already: no error
    core, test = client.CoreV1Api(k8s_api), "sps.dev/test"
    assert core.list_namespaced_config_map(namespace, label_selector=test).items == []
    assert core.list_namespaced_service_account(namespace, label_selector=test).items == []


def test_k8s_controlplane_the_client_posts_events_and_patches_a_lender(
    k8s_api: ApiClient, namespace: str
) -> None:
    kube = Kube(k8s_api)
    involved = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "t", "namespace": namespace, "uid": "u-1"}}  # fmt: skip
    kube.event(involved, "Warning", "SpsClientTest", "x" * 2000, datetime.now(UTC))
    (event,) = client.CoreV1Api(k8s_api).list_namespaced_event(namespace).items
    assert (event.reason, event.type, event.involved_object.name) == (
        "SpsClientTest", "Warning", "t")  # fmt: skip
    assert len(event.message) == 1024 and event.source.component == FIELD_MANAGER

    apps = client.AppsV1Api(k8s_api)
    labels = {"app": "lender"}
    apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "lender", "namespace": namespace},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    })  # fmt: skip
    for _attempt in range(5):  # the Deployment controller's status writes move it: read again
        read = kube.get("Deployment", namespace, "lender") or {}
        stale = read["metadata"]["resourceVersion"]
        try:
            kube.patch_lender(namespace, "lender", {"metadata": {"annotations": {
                "sps.dev/t": "1"}, "resourceVersion": stale}, "spec": {"replicas": 1}})  # fmt: skip
            break
        except client.ApiException as exc:
            assert exc.status == 409
            time.sleep(0.5)
    else:
        pytest.fail("the lender patch was refused five times")
    now = apps.read_namespaced_deployment("lender", namespace)
    assert now.spec.replicas == 1 and now.metadata.annotations["sps.dev/t"] == "1"
    assert FIELD_MANAGER in {m.manager for m in now.metadata.managed_fields}
    with pytest.raises(client.ApiException) as conflict:  # the object changed since
        kube.patch_lender(namespace, "lender", {"metadata": {"resourceVersion": stale},
                          "spec": {"replicas": 2}})  # fmt: skip
    assert conflict.value.status == 409
    assert apps.read_namespaced_deployment("lender", namespace).spec.replicas == 1
