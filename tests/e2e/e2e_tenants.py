"""Two tenants on the real bed: a tenant user who may use one namespace only, what a
namespace holds (compared before and after an attack), waiting for the operator to have
looked, a thread beside a test, and what Jobs and pods existed since a moment.

The tenant is a real user: a client certificate signed by the bed's CA, bound to the
built-in `edit` ClusterRole in its namespace and nowhere else (the chart aggregates the
SpsProfile rights into `edit`). Everything it does goes through the API server's
authentication and RBAC, as `kubectl --kubeconfig=<its kubeconfig>`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from e2e_cluster import E2eCluster
from e2e_env import GROUP, PLURAL, VERSION, OperatorRelease
from kubernetes import client, watch
from kubernetes.client import ApiClient
from kubernetes.client.rest import ApiException

from waiting import wait_for

TICK = "e2e.sps.dev/tick"  # an annotation that wakes a profile (the operator reads none)
Obj = dict[str, Any]


# ----------------------------------------------------------------------------- the tenant


@dataclass
class Tenant:
    """A user with `edit` in `namespace` only, acting through kubectl with its own
    certificate."""

    cluster: E2eCluster
    user: str
    namespace: str
    kubeconfig: Path

    @classmethod
    def enrol(cls, cluster: E2eCluster, namespace: str, directory: Path) -> Tenant:
        user = f"{namespace}-user"
        kubeconfig = cluster.bed.user_kubeconfig(user, [], directory / f"{user}.kubeconfig")
        cluster.kubectl("create", "rolebinding", f"{user}-edit", "--clusterrole=edit",
                        f"--user={user}", "-n", namespace)  # fmt: skip
        tenant = cls(cluster, user, namespace, kubeconfig)
        # RBAC (and the aggregation of the chart's user roles into `edit`) takes effect
        # a moment after the objects are written.
        wait_for(
            f"{user} may create SpsProfiles in {namespace}",
            lambda: tenant.can_i("create", "spsprofiles.sps.dev"),
            timeout=60,
        )
        return tenant

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        return self.cluster.kubectl(*args, input=input, check=check, kubeconfig=self.kubeconfig)

    def can_i(
        self, verb: str, resource: str, namespace: str | None = None, subresource: str = ""
    ) -> bool:
        out = self.kubectl("auth", "can-i", verb, resource, "-n", namespace or self.namespace,
                           f"--subresource={subresource}", check=False)  # fmt: skip
        return out.strip() == "yes"

    def create(self, *objects: Obj) -> None:
        for obj in objects:
            body = {**obj, "metadata": {**obj["metadata"], "namespace": self.namespace}}
            self.kubectl("create", "-f", "-", input=json.dumps(body))

    def get(self, kind: str, name: str) -> Obj | None:
        out = self.kubectl("get", kind, name, "-n", self.namespace, "-o", "json", check=False)
        return json.loads(out) if out.strip() else None

    def delete(self, kind: str, *names: str) -> None:
        if names:
            self.kubectl("delete", kind, *names, "-n", self.namespace, "--ignore-not-found",
                         "--wait=false")  # fmt: skip


# ----------------------------------------------------------------------------- a namespace


# Written by Kubernetes' own controllers, never by the operator (its damage shows in spec,
# metadata and data): a Deployment's and a Job's status, and every object's bookkeeping.
VOLATILE_METADATA = ("resourceVersion", "managedFields")


def normalized(obj: Obj) -> Obj:
    """An object as compared between two looks: what the operator could damage."""
    out = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in VOLATILE_METADATA}
    if obj.get("kind") == "SpsProfile":
        # The profile's owner writes its spec and metadata; the operator its status.
        return {"status": obj.get("status") or {}}
    out["metadata"] = meta
    return out


def namespace_objects(api: ApiClient, namespace: str) -> dict[str, Obj]:
    """Every Deployment, Job, ConfigMap and SpsProfile of `namespace` (as the admin reads
    them), normalized, by `Kind/name`."""

    def items(call: Callable[..., Any], *args: str) -> list[Obj]:
        resp = call(*args, _preload_content=False)
        return list(json.loads(resp.data)["items"])

    apps, core, batch = client.AppsV1Api(api), client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    found: dict[str, Obj] = {}
    for kind, objs in (
        ("Deployment", items(apps.list_namespaced_deployment, namespace)),
        ("Job", items(batch.list_namespaced_job, namespace)),
        ("ConfigMap", items(core.list_namespaced_config_map, namespace)),
        ("SpsProfile", items(custom.list_namespaced_custom_object, GROUP, VERSION, namespace,
                             PLURAL)),
    ):  # fmt: skip
        for obj in objs:
            obj.setdefault("kind", kind)
            found[f"{kind}/{obj['metadata']['name']}"] = normalized(obj)
    return found


def _changes(a: Any, b: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Where two JSON values differ: (leaf path, before, after)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [c for k in keys for c in _changes(a.get(k), b.get(k), f"{prefix}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [c for i, (x, y) in pairs for c in _changes(x, y, f"{prefix}[{i}]")]
    return [] if a == b else [(prefix or ".", a, b)]


def _short(value: Any, limit: int = 100) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def damage(
    before: Mapping[str, Obj], after: Mapping[str, Obj], allowed: Callable[[str], bool]
) -> list[str]:
    """What changed between two looks at a namespace, except the keys `allowed` says the
    namespace's own owner changed meanwhile."""
    found = []
    for key in sorted(set(before) | set(after)):
        if allowed(key):
            continue
        if key not in after:
            found.append(f"{key} deleted")
        elif key not in before:
            found.append(f"{key} created")
        elif before[key] != after[key]:
            # What changed before when: a condition's reason says more than its time.
            changes = sorted(_changes(before[key], after[key]), key=lambda c: "Time" in c[0])
            shown = "; ".join(f"{p}: {_short(x)} -> {_short(y)}" for p, x, y in changes[:4])
            more = f" (and {len(changes) - 4} more)" if len(changes) > 4 else ""
            found.append(f"{key} changed: {shown}{more}")
    return found


def nothing_else(_key: str) -> bool:
    return False


# ----------------------------------------------------------------------------- the operator


@dataclass
class Passes:
    """Waits until the operator has passed given profiles after a moment: two passes of
    each that both ended after it (the second began after it), woken by an annotation the
    operator does not read."""

    api: ApiClient
    operator: OperatorRelease
    ticks: int = 0

    def tick(self, namespace: str, name: str) -> None:
        self.ticks += 1
        patch = {"metadata": {"annotations": {TICK: str(self.ticks)}}}
        with contextlib.suppress(ApiException):  # a profile being deleted
            client.CustomObjectsApi(self.api).patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, patch
            )

    def counts(self) -> dict[tuple[str, str], float]:
        """The operator's pass counts, once its replica answers (it may be starting)."""

        def answer() -> dict[tuple[str, str], float] | None:
            try:
                return self.operator.passes()
            except (KeyError, AssertionError, httpx.HTTPError):  # no pod IP, no pod, not up
                return None

        counts: dict[tuple[str, str], float] = wait_for("the operator's metrics", answer, 120)
        return counts

    def settle(self, profiles: Iterable[tuple[str, str]], timeout: float = 60) -> None:
        wanted = list(profiles)
        base = self.counts()
        deadline = time.monotonic() + timeout
        pending = wanted
        while pending:
            for namespace, name in pending:
                self.tick(namespace, name)
            time.sleep(0.5)
            counts = self.counts()
            pending = [p for p in wanted if counts.get(p, 0) < base.get(p, 0) + 2]
            if time.monotonic() > deadline:
                raise AssertionError(f"the operator did not pass {pending} twice in {timeout}s")


# ----------------------------------------------------------------------------- beside a test


class Background:
    """A daemon thread running `loop(stopped)` from `start` until `stop`."""

    def __init__(self, name: str, loop: Callable[[threading.Event], None]) -> None:
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=loop, args=(self.stopped,), name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)


# ----------------------------------------------------------------------------- what ran


def listed_at(api: ApiClient, kind: str, namespace: str, selector: str) -> str:
    """The resourceVersion of a list of `kind` ("jobs" or "pods"): where `seen_since`
    starts."""
    call = _LISTS[kind](api)
    return str(call(namespace, label_selector=selector, limit=1).metadata.resource_version)


def seen_since(
    api: ApiClient, kind: str, namespace: str, selector: str, resource_version: str
) -> dict[str, Any]:
    """Every `kind` matching `selector` that existed at some moment after
    `resource_version`, by name, as last seen: a watch from there replays each change, so
    an object created and deleted meanwhile (a Job that ran and was collected) is seen."""
    seen: dict[str, Any] = {}
    stream = watch.Watch().stream(
        _LISTS[kind](api), namespace, label_selector=selector,
        resource_version=resource_version, timeout_seconds=1, _request_timeout=10,
    )  # fmt: skip
    for event in stream:
        obj = event["object"]
        seen[obj.metadata.name] = obj
    return seen


_LISTS: dict[str, Callable[[ApiClient], Callable[..., Any]]] = {
    "jobs": lambda api: client.BatchV1Api(api).list_namespaced_job,
    "pods": lambda api: client.CoreV1Api(api).list_namespaced_pod,
}
