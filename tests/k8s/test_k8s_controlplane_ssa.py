"""Server-side apply on the local control plane: field managers and conflicts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient

from sps_operator.constants import FIELD_MANAGER

pytestmark = pytest.mark.k8s


def _configmap(namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "shared", "namespace": namespace},
        "data": data,
    }


def _owned_keys(obj: Any) -> dict[str, set[str]]:
    """manager -> data keys it owns, from managedFields."""
    owned: dict[str, set[str]] = {}
    for entry in obj.to_dict()["metadata"]["managedFields"]:
        fields = entry["fieldsV1"].get("f:data", {})
        owned.setdefault(entry["manager"], set()).update(k[2:] for k in fields)
    return owned


def test_k8s_controlplane_ssa_field_managers(k8s_api: ApiClient, namespace: str) -> None:
    dyn = DynamicClient(k8s_api)
    configmaps = dyn.resources.get(api_version="v1", kind="ConfigMap")

    def apply(manager: str, data: dict[str, str], force: bool = False) -> Any:
        return dyn.server_side_apply(
            configmaps,
            body=_configmap(namespace, data),
            namespace=namespace,
            field_manager=manager,
            force_conflicts=force,
        )

    apply("gitops", {"model": "llama", "replicas": "2"})
    obj = apply(FIELD_MANAGER, {"table": "t1"})
    # Each manager owns exactly the fields it applied; both sets of data are merged.
    assert _owned_keys(obj) == {"gitops": {"model", "replicas"}, FIELD_MANAGER: {"table"}}
    assert dict(obj.data) == {"model": "llama", "replicas": "2", "table": "t1"}

    # Applying a field another manager owns, with a different value, is a conflict...
    with pytest.raises(client.ApiException) as conflict:
        apply(FIELD_MANAGER, {"table": "t1", "model": "mistral"})
    assert conflict.value.status == 409
    assert 'conflict with "gitops"' in json.loads(conflict.value.body)["message"]

    # ...unless forced, which moves ownership of that field.
    obj = apply(FIELD_MANAGER, {"table": "t2", "model": "mistral"}, force=True)
    assert _owned_keys(obj) == {"gitops": {"replicas"}, FIELD_MANAGER: {"model", "table"}}

    # A manager that stops applying a field it alone owns removes it.
    obj = apply(FIELD_MANAGER, {"model": "mistral"})
    assert dict(obj.data) == {"model": "mistral", "replicas": "2"}
