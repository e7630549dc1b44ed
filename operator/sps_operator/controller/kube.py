"""The operator's only door to the API server: a thin, synchronous facade over the
`kubernetes` client that speaks plain camelCase dicts (what the builders produce)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from sps_operator.constants import API_GROUP, API_VERSION, FIELD_MANAGER, KIND, PLURAL

log = logging.getLogger(__name__)
APPLY = "application/apply-patch+yaml"


def _raw(response: Any) -> dict[str, Any]:
    return dict(json.loads(response.data))


class Kube:
    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api = api_client or client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    # ---- reads (None when absent)

    def list_deployments(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        resp = self.apps.list_namespaced_deployment(
            namespace, label_selector=label_selector, _preload_content=False
        )
        return list(_raw(resp).get("items", []))

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(
            lambda: self.apps.read_namespaced_deployment(name, namespace, _preload_content=False)
        )

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(
            lambda: self.batch.read_namespaced_job(name, namespace, _preload_content=False)
        )

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(
            lambda: self.core.read_namespaced_config_map(name, namespace, _preload_content=False)
        )

    def list_config_maps(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_config_map(
            namespace, label_selector=label_selector, _preload_content=False
        )
        return list(_raw(resp).get("items", []))

    def list_jobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        resp = self.batch.list_namespaced_job(
            namespace, label_selector=label_selector, _preload_content=False
        )
        return list(_raw(resp).get("items", []))

    @staticmethod
    def _get(call: Any) -> dict[str, Any] | None:
        try:
            return _raw(call())
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # ---- writes

    def create(self, obj: Mapping[str, Any]) -> bool:
        """Create; False when it already exists (deterministic names make that an adoption)."""
        ns = obj["metadata"]["namespace"]
        kind = obj["kind"]
        body: Any = dict(obj)  # the client accepts plain dicts (camelCase) as bodies
        calls = {
            "Job": lambda: self.batch.create_namespaced_job(ns, body),
            "ConfigMap": lambda: self.core.create_namespaced_config_map(ns, body),
            "ServiceAccount": lambda: self.core.create_namespaced_service_account(ns, body),
            "Role": lambda: self.rbac.create_namespaced_role(ns, body),
            "RoleBinding": lambda: self.rbac.create_namespaced_role_binding(ns, body),
        }
        try:
            calls[kind]()
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def delete(self, kind: str, namespace: str, name: str) -> None:
        body = client.V1DeleteOptions(propagation_policy="Background")
        calls = {
            "Job": lambda: self.batch.delete_namespaced_job(name, namespace, body=body),
            "ConfigMap": lambda: self.core.delete_namespaced_config_map(name, namespace),
            "ServiceAccount": lambda: self.core.delete_namespaced_service_account(name, namespace),
            "Role": lambda: self.rbac.delete_namespaced_role(name, namespace),
            "RoleBinding": lambda: self.rbac.delete_namespaced_role_binding(name, namespace),
        }
        try:
            calls[kind]()
        except ApiException as exc:
            if exc.status != 404:
                raise

    def apply_deployment(self, body: dict[str, Any], force: bool = True) -> None:
        self._apply(self.apps.patch_namespaced_deployment, body, force)

    def apply_config_map(self, body: dict[str, Any], force: bool = True) -> None:
        self._apply(self.core.patch_namespaced_config_map, body, force)

    @staticmethod
    def _apply(patch: Callable[..., Any], body: dict[str, Any], force: bool) -> None:
        """Server-side apply of `body` as the operator's field manager."""
        meta = body["metadata"]
        patch(
            meta["name"],
            meta["namespace"],
            body,
            field_manager=FIELD_MANAGER,
            force=force,
            _content_type=APPLY,
        )

    def patch_config_map_metadata(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.core.patch_namespaced_config_map(name, namespace, patch)

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            API_GROUP, API_VERSION, namespace, PLURAL, name, {"status": status}
        )

    def event(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        now: datetime,
    ) -> None:
        """A core/v1 Event with a constant reason; failures to post are only logged."""
        meta = involved.get("metadata", {})
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        body: Any = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{meta.get('name', 'sps')}.",
                "namespace": meta.get("namespace"),
            },
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", f"{API_GROUP}/{API_VERSION}"),
                "kind": involved.get("kind", KIND),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": FIELD_MANAGER,
        }
        try:
            self.core.create_namespaced_event(meta.get("namespace"), body)
        except ApiException as exc:
            log.warning("could not post event %s: %s", reason, exc.reason)
