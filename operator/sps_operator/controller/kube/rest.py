"""Requests to the API server through the bare `kubernetes.client.ApiClient`: where each
kind lives (`RESOURCES`) and one `request` (JSON in, a plain camelCase dict out).

Not the typed APIs (`CoreV1Api`, `AppsV1Api`, ...): in client version 37 each imports and
builds a few hundred pydantic models and a validator per method, about 1.3 CPU-s of every
operator start, and parses answers into models the operator turned back into dicts. The
profiler's publisher (`profiler/publish.py`) writes the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from sps_operator.api.labels import KUEUE_GROUP, KUEUE_VERSIONS
from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.controller.policies import workloads

Obj = dict[str, Any]
APPLY = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    """A namespaced kind's coordinates: API group ("" for the core API), version, plural."""

    group: str
    version: str
    plural: str

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection(self, namespace: str) -> str:
        return f"{self.prefix}/namespaces/{_segment(namespace)}/{self.plural}"

    def object(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{_segment(name)}"


def _workload(kind: str) -> Resource:
    found = workloads.KINDS[kind]
    return Resource(found.group, found.version, found.plural)


# Every kind the operator reads or writes. Kueue's are at the first version it may serve;
# `Kube` uses the version its last LIST of Workloads found.
RESOURCES: dict[str, Resource] = {
    **{kind: _workload(kind) for kind in workloads.KINDS},
    "Job": Resource("batch", "v1", "jobs"),
    "ConfigMap": Resource("", "v1", "configmaps"),
    "ServiceAccount": Resource("", "v1", "serviceaccounts"),
    "Service": Resource("", "v1", "services"),
    "Event": Resource("", "v1", "events"),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles"),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings"),
    "Lease": Resource("coordination.k8s.io", "v1", "leases"),
    "PodDisruptionBudget": Resource("policy", "v1", "poddisruptionbudgets"),
    "HorizontalPodAutoscaler": Resource("autoscaling", "v2", "horizontalpodautoscalers"),
    "SpsProfile": Resource(API_GROUP, API_VERSION, PLURAL),
    "LocalQueue": Resource(KUEUE_GROUP, KUEUE_VERSIONS[0], "localqueues"),
    "Workload": Resource(KUEUE_GROUP, KUEUE_VERSIONS[0], "workloads"),
}


def _segment(value: str) -> str:
    """One path segment: everything escaped, as the typed client escapes its path
    parameters (a name is never a path)."""
    return quote(str(value), safe="")


def request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: Iterable[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str | None = None,
) -> Obj:
    """One request; the answer's JSON object ({} when empty). A non-2xx answer raises
    `ApiException` (its typed subclass, NotFoundException for a 404, ...) with the status,
    reason and body as the typed client raised it: callers compare `exc.status`."""
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    serialized = api.param_serialize(
        method, path, query_params=list(query) or None, header_params=headers, body=body,
        auth_settings=["BearerToken"],
    )  # fmt: skip
    response = api.call_api(*serialized)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return dict(json.loads(data)) if data else {}
