"""An in-memory `KubeApi` for the controller's unit tests and the fuzzing harness.

It keeps objects by (kind, namespace, name), answers label-selector LISTs, honours the
resourceVersion precondition of a merge patch and of an apply body (409 when the object
changed since), and plays the Deployment controller and the
kubelet instantly (an applied template is rolled out and available at once, unless a test
says otherwise). The end-to-end tests run the same passes against a real control plane.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kubernetes.client.rest import ApiException

from sps_operator.api import reason_registry as registry
from sps_operator.api import reasons as R
from sps_operator.constants import FIELD_MANAGER
from sps_operator.controller.kube.client import KubeApi, Obj
from sps_operator.controller.policies import workloads

# Every reason a pass writes (status and events) that api/reasons.py does not list; the
# autouse fixture in tests/unit/conftest.py fails the test that wrote one.
UNLISTED_REASONS: list[str] = []
STATUS_REASONS = set(registry.REASONS)
EVENT_REASONS = set(registry.REASONS) | set(R.EVENT_REASONS)


def status_reasons(status: Mapping[str, Any]) -> list[str]:
    """The reasons a status (or a status patch) carries, wherever it carries them."""
    found = [c.get("reason") for c in status.get("conditions") or []]
    found += [t.get("reason") for t in status.get("targets") or []]
    found += [(status.get("lastFailure") or {}).get("reason"), status.get("refreshReason")]
    found.append(((status.get("currentRun") or {}).get("waiting") or {}).get("reason"))
    return [str(r) for r in found if r]


_SET_EXPR = re.compile(r"^([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)$")


def _split_selector(selector: str) -> list[str]:
    """Selector terms, keeping `k in (a,b)` together."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    if current:
        terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    for term in _split_selector(selector):
        if m := _SET_EXPR.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if (op == "in") != (labels.get(key) in values):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "=" in term:
            key, _, value = term.partition("=")
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _merge_named(current: list[dict[str, Any]], applied: list[dict[str, Any]]) -> None:
    """SSA of a list keyed by name: the applied entries replace or join by name."""
    for entry in applied:
        for i, old in enumerate(current):
            if old.get("name") == entry.get("name"):
                current[i] = {**old, **copy.deepcopy(entry)}
                break
        else:
            current.append(copy.deepcopy(entry))


def _own(obj: Obj, patch: Mapping[str, Any]) -> None:
    """The operator's managedFields entry after a merge patch: it owns the annotation keys
    it set (and no longer those it removed), and spec.replicas once it set them."""
    meta = obj["metadata"]
    entries = meta.setdefault("managedFields", [])
    entry = next(
        (
            e
            for e in entries
            if e.get("manager") == FIELD_MANAGER and e.get("operation") == "Update"
        ),
        None,
    )
    if entry is None:
        entry = {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": {}}
        entries.append(entry)
    fields = entry["fieldsV1"]
    for key, value in ((patch.get("metadata") or {}).get("annotations") or {}).items():
        owned = fields.setdefault("f:metadata", {}).setdefault("f:annotations", {})
        if value is None:
            owned.pop(f"f:{key}", None)
        else:
            owned[f"f:{key}"] = {}
    if "replicas" in (patch.get("spec") or {}):
        fields.setdefault("f:spec", {})["f:replicas"] = {}


def _at(obj: Obj, path: tuple[str, ...]) -> Obj:
    for key in path:
        obj = obj[key]
    return obj


def _apply_template(template: Obj, applied: Obj) -> bool:
    """Server-side apply of the operator's fields of one pod template; True if it changed."""
    before = copy.deepcopy(template)
    merge(template.setdefault("metadata", {}), applied.get("metadata") or {})
    pod = applied.get("spec") or {}
    current_pod = template.setdefault("spec", {})
    for applied_container in pod.get("containers") or []:
        for container in current_pod.get("containers") or []:
            if container["name"] == applied_container["name"]:
                container["args"] = list(applied_container.get("args") or [])
                _merge_named(
                    container.setdefault("volumeMounts", []),
                    applied_container.get("volumeMounts") or [],
                )
    if pod.get("volumes"):
        _merge_named(current_pod.setdefault("volumes", []), pod["volumes"])
    return template != before


class FakeKube(KubeApi):
    """Enough of the API server for reconcile passes, in memory."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.status_patches: list[dict[str, Any]] = []
        self.applied: list[Obj] = []
        self.metadata_patches: list[tuple[str, str, Obj]] = []
        self.scales: list[tuple[str, int]] = []
        self.events: list[tuple[str, str]] = []
        self.calls: list[str] = []
        self.fail: dict[str, Exception] = {}  # method name -> exception to raise once
        self.reject_status: ApiException | None = None
        self.instant_rollout = True
        self.kueue_installed = True  # False: the API group kueue.x-k8s.io is not served
        self.lws_installed = True  # False: leaderworkerset.x-k8s.io is not served
        # Kueue's visibility API: (namespace, LocalQueue) -> its pending workloads summary;
        # None: the API is not served.
        self.pending: dict[tuple[str, str], Obj] | None = {}
        self._clock = itertools.count(1)

    # ---- helpers for tests

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise self.fail.pop(name)

    def put(self, obj: Obj) -> Obj:
        """Store `obj` as if created (metadata filled in)."""
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "serving")
        n = next(self._clock)
        meta.setdefault("uid", f"uid-{obj['kind'].lower()}-{n}")
        meta.setdefault("creationTimestamp", f"2026-03-01T00:{n // 60:02d}:{n % 60:02d}Z")
        meta["resourceVersion"] = str(n)
        meta.setdefault("generation", 1)
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = obj
        return obj

    def obj(self, kind: str, name: str, namespace: str = "serving") -> Obj:
        return self.objects[(kind, namespace, name)]

    def kinds(self, kind: str) -> list[Obj]:
        return [o for (k, _, _), o in self.objects.items() if k == kind]

    def collect_garbage(self) -> None:
        """The garbage collector's part (background deletion): an object whose owners are
        all gone goes, and then what it owned, until nothing is left to collect."""
        while True:
            uids = {o["metadata"].get("uid") for o in self.objects.values()}
            gone = [
                key
                for key, o in self.objects.items()
                if (refs := o["metadata"].get("ownerReferences"))
                and not any(r.get("uid") in uids for r in refs)
            ]
            if not gone:
                return
            for key in gone:
                del self.objects[key]

    def _bump(self, obj: Obj) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._clock))

    def edit(self, kind: str, name: str, change: Any, namespace: str = "serving") -> Obj:
        """Someone else's update (`kubectl edit`): `change(obj)` mutates the object, which
        gets a new resourceVersion (and generation, for a Deployment's spec)."""
        obj = self.objects[(kind, namespace, name)]
        spec = copy.deepcopy(obj.get("spec"))
        change(obj)
        if kind in workloads.KINDS and obj.get("spec") != spec:
            obj["metadata"]["generation"] += 1
            if self.instant_rollout:
                self.roll(obj)
        self._bump(obj)
        return obj

    def _precondition(self, obj: Obj, body: Mapping[str, Any]) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")

    # ---- reads

    def _list(self, kind: str, namespace: str, selector: str) -> list[Obj]:
        return [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self.objects.items())
            if k == kind
            and ns == namespace
            and selector_matches(selector, o["metadata"].get("labels") or {})
        ]

    def list_deployments(self, namespace: str, label_selector: str) -> list[Obj]:
        self._call("list_deployments")
        return self._list("Deployment", namespace, label_selector)

    def list_targets(self, namespace: str, label_selector: str) -> list[Obj]:
        self._call("list_targets")
        return [o for kind in workloads.KINDS if self.serves(kind)
                for o in self._list(kind, namespace, label_selector)]  # fmt: skip

    def serves(self, kind: str) -> bool:
        return kind != workloads.LEADER_WORKER_SET or self.lws_installed

    def list_config_maps(self, namespace: str, label_selector: str) -> list[Obj]:
        self._call("list_config_maps")
        return self._list("ConfigMap", namespace, label_selector)

    def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        self._call("list_jobs")
        return self._list("Job", namespace, label_selector)

    def list_profiles(self, namespace: str) -> list[Obj]:
        self._call("list_profiles")
        return self._list("SpsProfile", namespace, "")

    def list_pdbs(self, namespace: str) -> list[Obj]:
        self._call("list_pdbs")
        return self._list("PodDisruptionBudget", namespace, "")

    def list_hpas(self, namespace: str) -> list[Obj]:
        self._call("list_hpas")
        return self._list("HorizontalPodAutoscaler", namespace, "")

    def list_services(self, namespace: str) -> list[Obj]:
        self._call("list_services")
        return self._list("Service", namespace, "")

    def list_leases(self, namespace: str, label_selector: str) -> list[Obj]:
        self._call("list_leases")
        return self._list("Lease", namespace, label_selector)

    def list_workloads(self, namespace: str, label_selector: str) -> list[Obj] | None:
        self._call("list_workloads")
        return self._list("Workload", namespace, label_selector) if self.kueue_installed else None

    def pending_workloads(self, namespace: str, queue: str, limit: int) -> Obj | None:
        self._call("pending_workloads")
        if self.pending is None or not self.kueue_installed:
            return None
        summary = copy.deepcopy(self.pending.get((namespace, queue), {"items": []}))
        summary["items"] = summary["items"][:limit]
        return summary

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        self._call("get")
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    # ---- writes

    def create(self, obj: Mapping[str, Any]) -> str | None:
        self._call(f"create_{obj['kind']}")
        meta = obj["metadata"]
        if (obj["kind"], meta["namespace"], meta["name"]) in self.objects:
            return None
        return str(self.put(copy.deepcopy(dict(obj)))["metadata"]["uid"])

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        self._call(f"delete_{kind}")
        found = self.objects.get((kind, namespace, name))
        if found is not None and uid is not None and found["metadata"].get("uid") != uid:
            return  # the precondition failed (409), which `Kube.delete` takes as done
        self.objects.pop((kind, namespace, name), None)

    def apply(self, body: Obj) -> None:
        self._call(f"apply_{body['kind']}")
        meta = body["metadata"]
        key = (body["kind"], meta["namespace"], meta["name"])
        if key in self.objects:
            self._precondition(self.objects[key], body)
        self.applied.append(copy.deepcopy(body))
        if body["kind"] == "ConfigMap":
            current = self.objects.get(key)
            if current is None:
                self.put(copy.deepcopy(body))
                return
            merge(current, {k: v for k, v in body.items() if k in ("metadata", "data")})
            self._bump(current)
            return
        dep = self.objects[key]
        changed = False
        for path, _ in workloads.templates(body):
            changed = _apply_template(_at(dep, path), _at(body, path)) or changed
        if changed:
            dep["metadata"]["generation"] += 1
            self._bump(dep)
            if self.instant_rollout:
                self.roll(dep)

    def roll(self, dep: Obj) -> None:
        """The Deployment controller and the kubelet: the template is rolled and available."""
        replicas = dep["spec"].get("replicas", 1)
        revision = f"rev-{dep['metadata']['generation']}"
        dep.setdefault("status", {}).update(
            {
                "currentRevision": revision,  # a StatefulSet's
                "updateRevision": revision,
                "observedGeneration": dep["metadata"]["generation"],
                "replicas": replicas,
                "updatedReplicas": replicas,
                "availableReplicas": replicas,
                "readyReplicas": replicas,
            }
        )

    def _merge_patch(self, kind: str, namespace: str, name: str, patch: Obj) -> Obj:
        """A JSON merge patch under the field manager sps-operator (recorded in
        managedFields as the API server does), honouring a resourceVersion precondition."""
        obj = self.objects.get((kind, namespace, name))
        if obj is None:
            raise ApiException(status=404, reason="NotFound")
        self._precondition(obj, patch)
        body = copy.deepcopy(patch)
        body.get("metadata", {}).pop("resourceVersion", None)
        merge(obj, body)
        _own(obj, body)
        self._bump(obj)
        return obj

    def patch_metadata(self, kind: str, namespace: str, name: str, patch: Obj) -> Obj:
        self._call(f"patch_{kind}")
        obj = self._merge_patch(kind, namespace, name, patch)
        self.metadata_patches.append((kind, name, copy.deepcopy(patch)))
        return copy.deepcopy(obj)

    def patch_lender(self, namespace: str, name: str, patch: Obj, kind: str = "Deployment") -> None:
        self._call("patch_lender")
        dep = self.objects.get((kind, namespace, name))
        before = dep["spec"].get("replicas") if dep is not None else None
        dep = self._merge_patch(kind, namespace, name, patch)
        self.metadata_patches.append((kind, name, copy.deepcopy(patch)))
        replicas = (patch.get("spec") or {}).get("replicas")
        if replicas is not None:
            self.scales.append((name, replicas))
        if dep["spec"].get("replicas") != before:
            dep["metadata"]["generation"] += 1
            if self.instant_rollout:
                self.roll(dep)

    def patch_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        self._call("patch_status")
        if self.reject_status is not None and "targets" in status:
            raise self.reject_status
        self.status_patches.append(copy.deepcopy(dict(status)))
        UNLISTED_REASONS.extend(r for r in status_reasons(status) if r not in STATUS_REASONS)
        profile = self.objects.get(("SpsProfile", namespace, name))
        if profile is not None:
            merge(profile.setdefault("status", {}), dict(status))
            self._bump(profile)  # every write, a status write too, gets a new version

    def event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str, now: datetime
    ) -> None:
        self.events.append((reason, message))
        if reason not in EVENT_REASONS:
            UNLISTED_REASONS.append(reason)
