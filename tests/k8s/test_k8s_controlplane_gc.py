"""Garbage collection and workload controllers on the local control plane."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from waiting import wait_for

pytestmark = pytest.mark.k8s


def _configmap_names(core: client.CoreV1Api, namespace: str) -> set[str]:
    return {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}


def test_k8s_controlplane_gc_deletes_dependents_of_deleted_owner(
    k8s_api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(k8s_api)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
    }
    for name in ("dep-a", "dep-b"):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "ownerReferences": [ref]}}
        )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "bystander"}})

    core.delete_namespaced_config_map("owner", namespace)  # background propagation

    wait_for(
        "dependents to be garbage-collected",
        lambda: not {"dep-a", "dep-b"} & _configmap_names(core, namespace),
    )
    assert "bystander" in _configmap_names(core, namespace)


def test_k8s_controlplane_gc_foreground_deletion_waits_for_dependents(
    k8s_api: ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(k8s_api)
    labels = {"app": "gc-test"}
    deployment = {
        "metadata": {"name": "web", "labels": labels},
        "spec": {
            # No replicas: the controllers' work (ReplicaSet, ownership) without any pod.
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
        },
    }
    created = apps.create_namespaced_deployment(namespace, deployment)

    def replica_sets() -> list[client.V1ReplicaSet]:
        items: list[client.V1ReplicaSet] = apps.list_namespaced_replica_set(namespace).items
        return items

    # The deployment controller creates a ReplicaSet owned by the Deployment.
    wait_for("the deployment controller's ReplicaSet", lambda: len(replica_sets()) == 1)
    owners = replica_sets()[0].metadata.owner_references
    assert [(o.kind, o.uid, o.controller) for o in owners] == [
        ("Deployment", created.metadata.uid, True)
    ]

    apps.delete_namespaced_deployment(
        "web", namespace, body=client.V1DeleteOptions(propagation_policy="Foreground")
    )
    wait_for("the ReplicaSet to be garbage-collected", lambda: not replica_sets())
    wait_for(
        "the Deployment to go once its dependents are gone",
        lambda: not apps.list_namespaced_deployment(namespace).items,
    )
