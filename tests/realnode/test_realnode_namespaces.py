"""A test's namespace goes when the test is done, whatever its custom objects hold."""

from __future__ import annotations

import secrets

import pytest

from sps_testbed import RealNodeCluster
from waiting import wait_for

# Its own CRD and namespace: it may run beside other tests (tests/run-all.sh).
pytestmark = pytest.mark.bed_shared


def holder_crd(group: str) -> dict[str, object]:
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"holders.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "holders", "singular": "holder", "kind": "Holder"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                }
            ],
        },
    }


def test_a_namespace_goes_even_when_a_custom_object_holds_a_finalizer_nobody_removes(
    realnode_cluster: RealNodeCluster,
) -> None:
    # A test's operator, stopped before its namespace is deleted, leaves its finalizer on
    # the profiles: the namespace stayed Terminating for the rest of the run, and the
    # controller-manager tried it again every second or two (~10 API requests a second).
    bed = realnode_cluster
    group = f"t{secrets.token_hex(3)}.bedtest.sps.dev"
    crd_path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/holders.{group}"
    bed.api("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", holder_crd(group))
    try:

        def established() -> bool:
            conditions = ((bed.api("GET", crd_path) or {}).get("status") or {}).get("conditions")
            return any(
                c.get("type") == "Established" and c.get("status") == "True"
                for c in conditions or []
            )

        wait_for("the CRD established", established, timeout=60)
        namespace = bed.create_namespace(f"finalizer-held-{secrets.token_hex(3)}")
        held = {
            "apiVersion": f"{group}/v1",
            "kind": "Holder",
            "metadata": {"name": "held", "finalizers": [f"{group}/nobody-removes-this"]},
        }
        bed.api("POST", f"/apis/{group}/v1/namespaces/{namespace}/holders", held)

        bed.delete_namespace(namespace)

        wait_for(
            f"namespace {namespace} gone",
            lambda: bed.api("GET", f"/api/v1/namespaces/{namespace}") is None,
            timeout=60,
        )
    finally:
        bed.api("DELETE", crd_path)
