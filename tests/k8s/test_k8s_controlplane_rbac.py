"""RBAC on the local control plane, exercised as a service account (not as admin)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from sps_testbed.controlplane_fixtures import K8sCluster, KubectlError

pytestmark = pytest.mark.k8s


def _allow_configmaps(rbac: client.RbacAuthorizationV1Api, namespace: str, sa_ns: str) -> None:
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "configmap-writer"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "configmap-writer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "configmap-writer",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": sa_ns}],
        },
    )


def test_k8s_controlplane_rbac_service_account_limited_to_its_role(
    k8s_cluster: K8sCluster,
    k8s_api: ApiClient,
    namespace: str,
    impersonate: Callable[[str, str], ApiClient],
) -> None:
    core = client.CoreV1Api(k8s_api)
    rbac = client.RbacAuthorizationV1Api(k8s_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "writer"}})
    other = k8s_cluster.create_namespace(f"{namespace}-other")
    try:
        _allow_configmaps(rbac, namespace, namespace)
        as_writer = client.CoreV1Api(impersonate("writer", namespace))

        # The API server sees the service account, with its groups, not the admin.
        review = client.AuthenticationV1Api(as_writer.api_client).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
        assert review.status.user_info.username == f"system:serviceaccount:{namespace}:writer"
        assert f"system:serviceaccounts:{namespace}" in review.status.user_info.groups

        made = as_writer.create_namespaced_config_map(namespace, {"metadata": {"name": "ok"}})
        assert made.metadata.name == "ok"
        # Where no Role allows it, and for verbs or resources the Role does not name: 403.
        for attempt in (
            lambda: as_writer.create_namespaced_config_map(other, {"metadata": {"name": "no"}}),
            lambda: as_writer.delete_namespaced_config_map("ok", namespace),
            lambda: as_writer.create_namespaced_secret(namespace, {"metadata": {"name": "s"}}),
        ):
            with pytest.raises(client.ApiException) as denied:
                attempt()
            assert denied.value.status == 403
        assert "ok" in {c.metadata.name for c in core.list_namespaced_config_map(namespace).items}
        assert not core.list_namespaced_config_map(other, field_selector="metadata.name=no").items
    finally:
        k8s_cluster.delete_namespace(other)


def test_k8s_controlplane_rbac_token_kubeconfig(
    k8s_cluster: K8sCluster, k8s_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """A kubeconfig with a real service-account token (what a program under test uses)."""
    core = client.CoreV1Api(k8s_api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "writer"}})
    _allow_configmaps(client.RbacAuthorizationV1Api(k8s_api), namespace, namespace)
    kubeconfig = k8s_cluster.service_account_kubeconfig("writer", namespace, tmp_path / "kc")

    whoami = k8s_cluster.kubectl(
        "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}", kubeconfig=kubeconfig
    )
    assert whoami == f"system:serviceaccount:{namespace}:writer"
    k8s_cluster.kubectl("-n", namespace, "create", "configmap", "via-token", kubeconfig=kubeconfig)
    with pytest.raises(KubectlError, match="forbidden"):
        k8s_cluster.kubectl(
            "-n", namespace, "create", "secret", "generic", "s", kubeconfig=kubeconfig
        )
