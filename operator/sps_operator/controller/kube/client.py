"""The operator's only door to the API server: `KubeApi`, the protocol every step of a pass
talks to, and `Kube`, its implementation on the synchronous `kubernetes` client (plain
camelCase dicts, what the builders produce). The unit tests' in-memory fake implements
the same protocol."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import quote

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from sps_operator.api.labels import KUEUE_GROUP, KUEUE_VERSIONS, KUEUE_VISIBILITY_GROUP
from sps_operator.constants import API_GROUP, API_VERSION, FIELD_MANAGER, KIND, PLURAL
from sps_operator.controller.kube.ratelimit import TokenBucket
from sps_operator.controller.policies import workloads

log = logging.getLogger(__name__)
APPLY = "application/apply-patch+yaml"
# How often `serves` asks discovery again about a workload kind a profile names.
SERVED_RECHECK_SECONDS = 60.0
Obj = dict[str, Any]


class KubeApi(Protocol):
    """What a reconcile pass may ask of the API server."""

    # Reads (None when absent).
    def list_deployments(self, namespace: str, label_selector: str) -> list[Obj]: ...
    def list_targets(self, namespace: str, label_selector: str) -> list[Obj]: ...
    def serves(self, kind: str) -> bool: ...
    def list_config_maps(self, namespace: str, label_selector: str) -> list[Obj]: ...
    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]: ...
    def list_profiles(self, namespace: str) -> list[Obj]: ...
    def list_pdbs(self, namespace: str) -> list[Obj]: ...
    def list_hpas(self, namespace: str) -> list[Obj]: ...
    def list_services(self, namespace: str) -> list[Obj]: ...
    def list_leases(self, namespace: str, label_selector: str) -> list[Obj]: ...
    # Kueue's Workloads; None when the API group kueue.x-k8s.io is not served.
    def list_workloads(self, namespace: str, label_selector: str) -> list[Obj] | None: ...
    def get(self, kind: str, namespace: str, name: str) -> Obj | None: ...
    # Kueue's visibility API: a LocalQueue's pending workloads (at most `limit`, first in
    # the queue first); None when that API is not served.
    def pending_workloads(self, namespace: str, queue: str, limit: int) -> Obj | None: ...

    # Writes.
    def create(self, obj: Mapping[str, Any]) -> str | None: ...
    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None: ...
    def apply(self, body: Obj) -> None: ...
    def patch_metadata(self, kind: str, namespace: str, name: str, patch: Obj) -> Obj: ...
    def patch_deployment(
        self, namespace: str, name: str, patch: Obj, kind: str = "Deployment"
    ) -> None: ...
    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None: ...
    def event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str, now: datetime
    ) -> None: ...


def _limit_requests(api: Any, limit: TokenBucket) -> None:
    """Every request of this client (reads, writes, events) waits for a token: they all go
    through its REST client's `request`."""
    rest = api.rest_client
    request = rest.request

    def limited(*args: Any, **kwargs: Any) -> Any:
        limit.take()
        return request(*args, **kwargs)

    rest.request = limited


def _raw(response: Any) -> Obj:
    return dict(json.loads(response.data))


class Kube:
    """`KubeApi` on the `kubernetes` client; every request takes a token from `limit`."""

    def __init__(
        self, api_client: client.ApiClient | None = None, limit: TokenBucket | None = None
    ) -> None:
        self.api = api_client or client.ApiClient()
        if limit is not None:
            _limit_requests(self.api, limit)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.rbac = client.RbacAuthorizationV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.kueue_version = KUEUE_VERSIONS[0]  # the one the last LIST of Workloads found
        self._served: dict[str, tuple[bool, float]] = {}  # kind -> (served, when asked)

    # ---- reads

    def list_deployments(self, namespace: str, label_selector: str) -> list[Obj]:
        return self._items(self.apps.list_namespaced_deployment, namespace, label_selector)

    def list_targets(self, namespace: str, label_selector: str) -> list[Obj]:
        """The workloads a profile may serve, of every kind the API serves (a
        LeaderWorkerSet only where its CRD is installed), each with its kind set."""
        found = [
            {**d, "kind": workloads.DEPLOYMENT}
            for d in self.list_deployments(namespace, label_selector)
        ]
        found += [
            {**d, "kind": workloads.STATEFUL_SET}
            for d in self._items(self.apps.list_namespaced_stateful_set, namespace, label_selector)
        ]
        lws = workloads.KINDS[workloads.LEADER_WORKER_SET]
        try:
            resp = self.custom.list_namespaced_custom_object(
                lws.group, lws.version, namespace, lws.plural,
                label_selector=label_selector, _preload_content=False,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:  # 404: the API does not serve LeaderWorkerSets
                raise
        else:
            found += [{**d, "kind": lws.kind} for d in _raw(resp).get("items", [])]
        return found

    def serves(self, kind: str) -> bool:
        """The API server serves this workload kind (discovery, at most once a minute per
        kind: a CRD installed later is seen within a minute)."""
        workload = workloads.KINDS[kind]
        if not workload.group or workload.group == "apps":
            return True
        now = time.monotonic()
        cached = self._served.get(kind)
        if cached is not None and now - cached[1] < SERVED_RECHECK_SECONDS:
            return cached[0]
        try:
            resources = self.custom.get_api_resources(workload.group, workload.version)
            served = any(r.name == workload.plural for r in resources.resources or [])
        except ApiException as exc:
            if exc.status != 404:
                raise
            served = False
        self._served[kind] = (served, now)
        return served

    def list_config_maps(self, namespace: str, label_selector: str) -> list[Obj]:
        return self._items(self.core.list_namespaced_config_map, namespace, label_selector)

    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        return self._items(self.batch.list_namespaced_job, namespace, label_selector)

    def list_profiles(self, namespace: str) -> list[Obj]:
        resp = self.custom.list_namespaced_custom_object(
            API_GROUP, API_VERSION, namespace, PLURAL, _preload_content=False
        )
        return list(_raw(resp).get("items", []))

    def list_pdbs(self, namespace: str) -> list[Obj]:
        api = client.PolicyV1Api(self.api)
        return self._items(api.list_namespaced_pod_disruption_budget, namespace, "")

    def list_hpas(self, namespace: str) -> list[Obj]:
        api = client.AutoscalingV2Api(self.api)
        return self._items(api.list_namespaced_horizontal_pod_autoscaler, namespace, "")

    def list_services(self, namespace: str) -> list[Obj]:
        return self._items(self.core.list_namespaced_service, namespace, "")

    def list_leases(self, namespace: str, label_selector: str) -> list[Obj]:
        api = client.CoordinationV1Api(self.api)
        return self._items(api.list_namespaced_lease, namespace, label_selector)

    def list_workloads(self, namespace: str, label_selector: str) -> list[Obj] | None:
        for version in KUEUE_VERSIONS:  # Kueue before v0.15 serves only v1beta1
            try:
                resp = self.custom.list_namespaced_custom_object(
                    KUEUE_GROUP, version, namespace, "workloads",
                    label_selector=label_selector, _preload_content=False,
                )  # fmt: skip
            except ApiException as exc:
                if exc.status == 404:  # a LIST of a resource the API does not serve
                    continue
                raise
            self.kueue_version = version
            return list(_raw(resp).get("items", []))
        return None

    def pending_workloads(self, namespace: str, queue: str, limit: int) -> Obj | None:
        for version in KUEUE_VERSIONS:
            path = (
                f"/apis/{KUEUE_VISIBILITY_GROUP}/{version}/namespaces/{quote(namespace)}"
                f"/localqueues/{quote(queue)}/pendingworkloads"
            )
            request = self.api.param_serialize(
                "GET", path, query_params=[("limit", limit)],
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
            )  # fmt: skip
            resp = self.api.call_api(*request)
            data = resp.read()
            if resp.status == 404:
                continue
            if not 200 <= resp.status <= 299:
                raise ApiException(http_resp=resp)
            return dict(json.loads(data or b"{}"))
        return None

    @staticmethod
    def _items(call: Callable[..., Any], namespace: str, label_selector: str) -> list[Obj]:
        resp = call(namespace, label_selector=label_selector, _preload_content=False)
        return list(_raw(resp).get("items", []))

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        calls: dict[str, Callable[[], Any]] = {
            "Deployment": lambda: self.apps.read_namespaced_deployment(
                name, namespace, _preload_content=False
            ),
            "StatefulSet": lambda: self.apps.read_namespaced_stateful_set(
                name, namespace, _preload_content=False
            ),
            "LeaderWorkerSet": lambda: self.custom.get_namespaced_custom_object(
                *_lws(), namespace, _lws_plural(), name, _preload_content=False
            ),
            "Job": lambda: self.batch.read_namespaced_job(name, namespace, _preload_content=False),
            "ConfigMap": lambda: self.core.read_namespaced_config_map(
                name, namespace, _preload_content=False
            ),
            "ServiceAccount": lambda: self.core.read_namespaced_service_account(
                name, namespace, _preload_content=False
            ),
            "Service": lambda: self.core.read_namespaced_service(
                name, namespace, _preload_content=False
            ),
            "Role": lambda: self.rbac.read_namespaced_role(name, namespace, _preload_content=False),
            "RoleBinding": lambda: self.rbac.read_namespaced_role_binding(
                name, namespace, _preload_content=False
            ),
            "Lease": lambda: client.CoordinationV1Api(self.api).read_namespaced_lease(
                name, namespace, _preload_content=False
            ),
            "SpsProfile": lambda: self.custom.get_namespaced_custom_object(
                API_GROUP, API_VERSION, namespace, PLURAL, name, _preload_content=False
            ),
            "LocalQueue": lambda: self.custom.get_namespaced_custom_object(
                KUEUE_GROUP,
                self.kueue_version,
                namespace,
                "localqueues",
                name,
                _preload_content=False,
            ),
        }
        try:
            return _raw(calls[kind]())
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # ---- writes

    def create(self, obj: Mapping[str, Any]) -> str | None:
        """Create; the new object's UID, None when one exists under the name
        (deterministic names make that an adoption, which the caller checks)."""
        ns = obj["metadata"]["namespace"]
        kind = obj["kind"]
        body: Any = dict(obj)  # the client accepts plain dicts (camelCase) as bodies
        calls = {
            "Job": lambda: self.batch.create_namespaced_job(ns, body),
            "ConfigMap": lambda: self.core.create_namespaced_config_map(ns, body),
            "ServiceAccount": lambda: self.core.create_namespaced_service_account(ns, body),
            "Service": lambda: self.core.create_namespaced_service(ns, body),
            "Role": lambda: self.rbac.create_namespaced_role(ns, body),
            "RoleBinding": lambda: self.rbac.create_namespaced_role_binding(ns, body),
            "Lease": lambda: client.CoordinationV1Api(self.api).create_namespaced_lease(ns, body),
        }
        try:
            created = calls[kind]()
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return str(getattr(getattr(created, "metadata", None), "uid", None) or "")

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete; with `uid`, only that very object (a precondition: one created since
        under the same name is left alone)."""
        preconditions = client.V1Preconditions(uid=uid) if uid else None
        body = client.V1DeleteOptions(propagation_policy="Background", preconditions=preconditions)
        calls = {
            "Job": lambda: self.batch.delete_namespaced_job(name, namespace, body=body),
            "ConfigMap": lambda: self.core.delete_namespaced_config_map(name, namespace, body=body),
            "ServiceAccount": lambda: self.core.delete_namespaced_service_account(name, namespace),
            "Service": lambda: self.core.delete_namespaced_service(name, namespace, body=body),
            "Role": lambda: self.rbac.delete_namespaced_role(name, namespace),
            "RoleBinding": lambda: self.rbac.delete_namespaced_role_binding(name, namespace),
            "Lease": lambda: client.CoordinationV1Api(self.api).delete_namespaced_lease(
                name, namespace, body=body
            ),
        }
        try:
            calls[kind]()
        except ApiException as exc:
            if exc.status == 409 and uid:
                log.info("%s %s/%s is another object now: not deleted", kind, namespace, name)
                return
            if exc.status != 404:
                raise

    def apply(self, body: Obj) -> None:
        """Server-side apply of `body` (a Deployment or a ConfigMap) as the operator's
        field manager; it owns exactly the fields in `body`.

        Forced, because the operator must co-own the atomic `args` list with whoever wrote
        it. A Deployment body carries the resourceVersion its content was read at
        (`workload_apply.inject_apply`, `annotate_apply`): the API server refuses it (409)
        when the object changed since, so a force never writes stale values over a newer edit."""
        patches: dict[str, Callable[..., Any]] = {
            "Deployment": self.apps.patch_namespaced_deployment,
            "StatefulSet": self.apps.patch_namespaced_stateful_set,
            "LeaderWorkerSet": self._patch_lws,
            "ConfigMap": self.core.patch_namespaced_config_map,
        }
        patch = patches[body["kind"]]
        meta = body["metadata"]
        patch(
            meta["name"],
            meta["namespace"],
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type=APPLY,
        )

    def _patch_lws(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        return self.custom.patch_namespaced_custom_object(
            *_lws(), namespace, _lws_plural(), name, body, **kwargs
        )

    def patch_metadata(self, kind: str, namespace: str, name: str, patch: Obj) -> Obj:
        """A JSON merge patch (of metadata) under the operator's field manager; returns the
        object as patched (a later conditional write in the same pass starts from it)."""
        calls: dict[str, Callable[..., Any]] = {
            "Deployment": self.apps.patch_namespaced_deployment,
            "StatefulSet": self.apps.patch_namespaced_stateful_set,
            "LeaderWorkerSet": self._patch_lws,
            "ConfigMap": self.core.patch_namespaced_config_map,
            "Lease": client.CoordinationV1Api(self.api).patch_namespaced_lease,
        }
        call = calls[kind]
        response = call(
            name,
            namespace,
            patch,
            field_manager=FIELD_MANAGER,
            _content_type="application/merge-patch+json",
            _preload_content=False,
        )
        return _raw(response)

    def patch_deployment(
        self, namespace: str, name: str, patch: Obj, kind: str = "Deployment"
    ) -> None:
        """A JSON merge patch of a lender's annotations and replicas in one write
        (BorrowReplica's record and scale; a Deployment, or `kind` StatefulSet or
        LeaderWorkerSet), under the operator's field manager; a metadata.resourceVersion in
        it is a precondition (409 when the object changed)."""
        self.patch_metadata(kind, namespace, name, patch)

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


def _lws() -> tuple[str, str]:
    lws = workloads.KINDS[workloads.LEADER_WORKER_SET]
    return lws.group, lws.version


def _lws_plural() -> str:
    return workloads.KINDS[workloads.LEADER_WORKER_SET].plural


def owned_by(obj: Mapping[str, Any] | None, uid: str) -> bool:
    """`obj` exists and its controller ownerReference is the profile with `uid`."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, Mapping) and r.get("uid") == uid and r.get("controller") for r in refs)


def api_error_detail(exc: BaseException) -> str:
    """What an exception says, with the API server's own message when it is one."""
    if isinstance(exc, ApiException):
        message = ""
        if exc.body:
            try:
                message = json.loads(exc.body).get("message", "")
            except (ValueError, AttributeError):
                message = str(exc.body)
        return f"API error {exc.status} {exc.reason}: {message}".strip()
    return f"{type(exc).__name__}: {exc}"


def is_transient(exc: BaseException) -> bool:
    """Worth retrying as it is: conflicts, throttling, server-side and network trouble."""
    if isinstance(exc, ApiException):
        return exc.status in (0, 409, 429, 500, 502, 503, 504) or exc.status is None
    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError))
