"""CRDs on the local control plane: structural schema, CEL rules, pruning, status."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

pytestmark = pytest.mark.k8s

GROUP = "cptest.sps.dev"


def _crd(plural: str, kind: str) -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "required": ["minReplicas", "maxReplicas"],
        "properties": {
            "minReplicas": {"type": "integer", "minimum": 0},
            "maxReplicas": {"type": "integer"},
            "mode": {"type": "string", "enum": ["Diagonal", "Additive"]},
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.minReplicas <= self.maxReplicas",
                "message": "minReplicas must not exceed maxReplicas",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": spec_schema,
                                "status": {
                                    "type": "object",
                                    "properties": {"phase": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture
def crd(k8s_api: ApiClient) -> Iterator[tuple[str, str]]:
    """A fresh CRD (unique name, so reruns in one session never collide); deleted after."""
    suffix = secrets.token_hex(3)
    plural, kind = f"widgets{suffix}", f"Widget{suffix}"
    ext = client.ApiextensionsV1Api(k8s_api)
    ext.create_custom_resource_definition(_crd(plural, kind))
    name = f"{plural}.{GROUP}"
    deadline = time.monotonic() + 30
    while True:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conds):
            break
        assert time.monotonic() < deadline, f"CRD {name} not Established: {conds}"
        time.sleep(0.1)
    try:
        yield plural, kind
    finally:
        ext.delete_custom_resource_definition(name)


def _message(err: client.ApiException) -> str:
    message: str = json.loads(err.body)["message"]
    return message


def _obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def test_k8s_controlplane_crd_schema_and_cel(
    k8s_api: ApiClient, namespace: str, crd: tuple[str, str]
) -> None:
    plural, kind = crd
    custom = client.CustomObjectsApi(k8s_api)

    def create(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = custom.create_namespaced_custom_object(
            GROUP, "v1", namespace, plural, _obj(kind, name, spec)
        )
        return obj

    # CEL rule across two fields: rejected with the rule's message.
    with pytest.raises(client.ApiException) as cel:
        create("bad-range", {"minReplicas": 3, "maxReplicas": 1})
    assert cel.value.status == 422
    assert "minReplicas must not exceed maxReplicas" in _message(cel.value)

    # Structural schema: wrong type, value outside the enum, missing required field.
    with pytest.raises(client.ApiException) as typed:
        create("bad-type", {"minReplicas": "three", "maxReplicas": 1})
    assert typed.value.status == 422
    assert "spec.minReplicas" in _message(typed.value)
    with pytest.raises(client.ApiException) as enum:
        create("bad-enum", {"minReplicas": 0, "maxReplicas": 1, "mode": "Sideways"})
    assert 'Unsupported value: "Sideways"' in _message(enum.value)
    with pytest.raises(client.ApiException) as required:
        create("missing", {"minReplicas": 0})
    assert "spec.maxReplicas: Required value" in _message(required.value)

    # A valid object is stored, with unknown fields pruned by the structural schema.
    stored = create("good", {"minReplicas": 1, "maxReplicas": 2, "unknownField": "x"})
    assert stored["spec"] == {"minReplicas": 1, "maxReplicas": 2}


def test_k8s_controlplane_crd_status_subresource(
    k8s_api: ApiClient, namespace: str, crd: tuple[str, str]
) -> None:
    plural, kind = crd
    custom = client.CustomObjectsApi(k8s_api)
    body = _obj(kind, "w", {"minReplicas": 0, "maxReplicas": 1})
    body["status"] = {"phase": "Ignored"}
    created = custom.create_namespaced_custom_object(GROUP, "v1", namespace, plural, body)
    # With the status subresource, status written through the main resource is dropped...
    assert "status" not in created or created["status"].get("phase") is None
    generation = created["metadata"]["generation"]
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, "v1", namespace, plural, "w", {"status": {"phase": "Ready"}}
    )
    # ...and status writes go through /status without bumping the generation.
    assert patched["status"]["phase"] == "Ready"
    assert patched["metadata"]["generation"] == generation
