"""The operator's only door to the API server: `KubeApi`, the protocol every step of a pass
talks to, and `Kube`, its implementation on the synchronous `kubernetes` client's bare
`ApiClient` (plain camelCase dicts, what the builders produce; no typed API is imported,
see `rest`). The unit tests' in-memory fake implements the same protocol."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from sps_operator.api.labels import KUEUE_GROUP, KUEUE_VERSIONS, KUEUE_VISIBILITY_GROUP
from sps_operator.constants import API_GROUP, API_VERSION, FIELD_MANAGER, KIND
from sps_operator.controller.kube.ratelimit import TokenBucket
from sps_operator.controller.kube.rest import RESOURCES, Resource, request
from sps_operator.controller.policies import workloads
from sps_operator.kube_rest import APPLY, LIST_CAP, MERGE_PATCH, AnswerRefused

log = logging.getLogger(__name__)
# How often `serves` asks discovery again about a workload kind a profile names.
SERVED_RECHECK_SECONDS = 60.0
# Workload kinds every API server serves (a LIST of them never 404s for want of a CRD).
BUILT_IN_WORKLOADS = frozenset(
    kind for kind, found in workloads.KINDS.items() if found.group in ("", "apps")
)
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
    def patch_lender(
        self, namespace: str, name: str, patch: Obj, kind: str = "Deployment"
    ) -> None: ...
    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None: ...
    def event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str, now: datetime
    ) -> None: ...


def _limit_requests(api: Any, limit: TokenBucket) -> None:
    """Every request of this client (reads, writes, events) waits for a token: they all go
    through its REST client's `request`."""
    rest_client = api.rest_client
    send = rest_client.request

    def limited(*args: Any, **kwargs: Any) -> Any:
        limit.take()
        return send(*args, **kwargs)

    rest_client.request = limited


class Kube:
    """`KubeApi` on the bare `kubernetes` ApiClient (`rest.request`, paths from
    `rest.RESOURCES`); every request takes a token from `limit`."""

    def __init__(
        self, api_client: ApiClient | None = None, limit: TokenBucket | None = None
    ) -> None:
        self.api = api_client or ApiClient()
        if limit is not None:
            _limit_requests(self.api, limit)
        self.kueue_version = KUEUE_VERSIONS[0]  # the one the last LIST of Workloads found
        self._served: dict[str, tuple[bool, float]] = {}  # kind -> (served, when asked)

    def _resource(self, kind: str) -> Resource:
        resource = RESOURCES[kind]
        if resource.group == KUEUE_GROUP:
            return replace(resource, version=self.kueue_version)
        return resource

    def _list(self, kind: str, namespace: str, label_selector: str = "") -> list[Obj]:
        return self._items(self._resource(kind), namespace, label_selector)

    def _items(self, resource: Resource, namespace: str, label_selector: str) -> list[Obj]:
        query = [("labelSelector", label_selector)] if label_selector else []
        path = resource.collection(namespace)
        found = request(self.api, "GET", path, query=query, cap=LIST_CAP)
        return list(found.get("items") or [])

    # ---- reads

    def list_deployments(self, namespace: str, label_selector: str) -> list[Obj]:
        return self._list(workloads.DEPLOYMENT, namespace, label_selector)

    def list_targets(self, namespace: str, label_selector: str) -> list[Obj]:
        """The workloads a profile may serve, of every kind the API serves (a
        LeaderWorkerSet only where its CRD is installed), each with its kind set."""
        found: list[Obj] = []
        for kind in workloads.KINDS:
            try:
                items = self._list(kind, namespace, label_selector)
            except ApiException as exc:
                # 404: the API does not serve the kind (a CRD's, LeaderWorkerSet's).
                if exc.status != 404 or kind in BUILT_IN_WORKLOADS:
                    raise
                continue
            found += [{**item, "kind": kind} for item in items]
        return found

    def serves(self, kind: str) -> bool:
        """The API server serves this workload kind (discovery, at most once a minute per
        kind: a CRD installed later is seen within a minute)."""
        workload = workloads.KINDS[kind]
        if kind in BUILT_IN_WORKLOADS:
            return True
        now = time.monotonic()
        cached = self._served.get(kind)
        if cached is not None and now - cached[1] < SERVED_RECHECK_SECONDS:
            return cached[0]
        try:
            found = request(self.api, "GET", RESOURCES[kind].prefix)
            resources = found.get("resources") or []
            served = any(
                isinstance(r, Mapping) and r.get("name") == workload.plural for r in resources
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            served = False
        self._served[kind] = (served, now)
        return served

    def list_config_maps(self, namespace: str, label_selector: str) -> list[Obj]:
        return self._list("ConfigMap", namespace, label_selector)

    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        return self._list("Job", namespace, label_selector)

    def list_profiles(self, namespace: str) -> list[Obj]:
        return self._list("SpsProfile", namespace)

    def list_pdbs(self, namespace: str) -> list[Obj]:
        return self._list("PodDisruptionBudget", namespace)

    def list_hpas(self, namespace: str) -> list[Obj]:
        return self._list("HorizontalPodAutoscaler", namespace)

    def list_services(self, namespace: str) -> list[Obj]:
        return self._list("Service", namespace)

    def list_leases(self, namespace: str, label_selector: str) -> list[Obj]:
        return self._list("Lease", namespace, label_selector)

    def list_workloads(self, namespace: str, label_selector: str) -> list[Obj] | None:
        for version in KUEUE_VERSIONS:  # Kueue before v0.15 serves only v1beta1
            workloads_at = replace(RESOURCES["Workload"], version=version)
            try:
                found = self._items(workloads_at, namespace, label_selector)
            except ApiException as exc:
                if exc.status == 404:  # a LIST of a resource the API does not serve
                    continue
                raise
            self.kueue_version = version
            return found
        return None

    def pending_workloads(self, namespace: str, queue: str, limit: int) -> Obj | None:
        for version in KUEUE_VERSIONS:
            queues = Resource(KUEUE_VISIBILITY_GROUP, version, "localqueues")
            path = f"{queues.object(namespace, queue)}/pendingworkloads"
            try:
                return request(self.api, "GET", path, query=[("limit", limit)], cap=LIST_CAP)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return None

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        try:
            return request(self.api, "GET", self._resource(kind).object(namespace, name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # ---- writes

    def create(self, obj: Mapping[str, Any]) -> str | None:
        """Create; the new object's UID, None when one exists under the name
        (deterministic names make that an adoption, which the caller checks)."""
        path = self._resource(obj["kind"]).collection(obj["metadata"]["namespace"])
        try:
            created = request(self.api, "POST", path, body=dict(obj))
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return str((created.get("metadata") or {}).get("uid") or "")

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete; with `uid`, only that very object (a precondition: one created since
        under the same name is left alone)."""
        options: Obj = {"propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        path = self._resource(kind).object(namespace, name)
        try:
            request(self.api, "DELETE", path, body=options)
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
        meta = body["metadata"]
        path = self._resource(body["kind"]).object(meta["namespace"], meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", True)]
        request(self.api, "PATCH", path, query=query, body=body, content_type=APPLY)

    def patch_metadata(self, kind: str, namespace: str, name: str, patch: Obj) -> Obj:
        """A JSON merge patch (of metadata) under the operator's field manager; returns the
        object as patched (a later conditional write in the same pass starts from it)."""
        path = self._resource(kind).object(namespace, name)
        query = [("fieldManager", FIELD_MANAGER)]
        return request(self.api, "PATCH", path, query=query, body=patch, content_type=MERGE_PATCH)

    def patch_lender(
        self, namespace: str, name: str, patch: Obj, kind: str = workloads.DEPLOYMENT
    ) -> None:
        """A JSON merge patch of a lender's annotations and replicas in one write
        (BorrowReplica's record and scale; a Deployment, or `kind` StatefulSet or
        LeaderWorkerSet), under the operator's field manager; a metadata.resourceVersion in
        it is a precondition (409 when the object changed)."""
        self.patch_metadata(kind, namespace, name, patch)

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        path = RESOURCES["SpsProfile"].object(namespace, name) + "/status"
        request(self.api, "PATCH", path, body={"status": status}, content_type=MERGE_PATCH)

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
        path = RESOURCES["Event"].collection(str(meta.get("namespace") or ""))
        try:
            request(self.api, "POST", path, body=body)
        except ApiException as exc:
            log.warning("could not post event %s: %s", reason, exc.reason)


def owned_by(obj: Mapping[str, Any] | None, uid: str) -> bool:
    """`obj` exists and its controller ownerReference is the profile with `uid`."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return any(isinstance(r, Mapping) and r.get("uid") == uid and r.get("controller") for r in refs)


def api_error_detail(exc: BaseException) -> str:
    """What an exception says, with the API server's own message when it is one."""
    if isinstance(exc, AnswerRefused):  # an answer this client refused: which and why
        return f"API answer refused: {exc}"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason  # one attempt (kube_rest): what failed it, without the pool's repr
    if isinstance(exc, urllib3.exceptions.HTTPError):  # a timeout, a dropped connection
        return f"no answer from the API server: {type(exc).__name__}: {exc}"
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
