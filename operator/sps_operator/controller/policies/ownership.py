"""Which SpsProfile serves a Deployment (pure).

Two profiles whose selectors match one Deployment would otherwise take turns rolling
their own tables onto it, restarting every GPU server each time. A Deployment belongs to
at most one profile, decided without any negotiation:

1. the profile recorded on the Deployment (annotation `sps.dev/owner`, written by the
   operator) keeps it while that profile exists, is not being deleted and still selects it
   (or has a spec the operator cannot read: an edit in progress must not hand it over);
2. otherwise the oldest profile that selects it (creation time, then name) takes it.

Every other profile reports `Conflict` naming the owner and never writes to it.

The same rule gives an AnnotateOnly stable ConfigMap (which several profiles may name)
its one writer: the profile recorded on it, else the oldest naming it.

And which objects hold a table ConfigMap: its profile, and each Deployment that mounts it
(see "table holders" below).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sps_operator.api.labels import ANNOTATION_OWNER
from sps_operator.api.reasons import LOCAL_QUEUE_MISSING
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.job_adoption import job_refusal
from sps_operator.controller.policies.selectors import matches_selector


@dataclass(frozen=True)
class ProfileSummary:
    """What ownership needs to know of every SpsProfile in the namespace."""

    name: str
    uid: str
    created: str  # RFC 3339; sorts chronologically
    selector: Mapping[str, Any] | None  # None: the spec cannot be read
    deleting: bool = False
    stable: str | None = None  # AnnotateOnly: the ConfigMap it writes the table into
    namespace: str = ""
    # Its run waits for its turn to borrow a replica on this GPU product (status says so;
    # the run's pending pod, not status, gives its place: `borrow.pool_bid`).
    pool_run: str | None = None
    pool_product: str | None = None
    pool_job_uid: str | None = None  # its Job's UID (status): only that Job's pods count
    # Its run waits for a Kueue LocalQueue of the namespace to be created.
    queue_missing: bool = False

    def selects(self, labels: Mapping[str, str]) -> bool:
        return self.selector is not None and matches_selector(self.selector, labels)


def profile_summary(body: Mapping[str, Any]) -> ProfileSummary:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    selector = spec.get("selector") if isinstance(spec, Mapping) else None
    return ProfileSummary(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        created=str(meta.get("creationTimestamp") or ""),
        selector=selector if isinstance(selector, Mapping) else None,
        deleting=bool(meta.get("deletionTimestamp")),
        stable=stable_config_map(spec) if isinstance(spec, Mapping) else None,
        namespace=str(meta.get("namespace", "")),
        queue_missing=_waiting_reason(body.get("status")) == LOCAL_QUEUE_MISSING,
        **_pool_turn(body.get("status")),
    )


def _waiting_reason(status: Any) -> str | None:
    run = status.get("currentRun") if isinstance(status, Mapping) else None
    waiting = run.get("waiting") if isinstance(run, Mapping) else None
    reason = waiting.get("reason") if isinstance(waiting, Mapping) else None
    return reason if isinstance(reason, str) else None


def _pool_turn(status: Any) -> dict[str, str]:
    """{pool_run, pool_product} when the status says the profile's run waits for its turn
    on a GPU pool (currentRun.waiting.poolTurn), else {}."""
    run = status.get("currentRun") if isinstance(status, Mapping) else None
    waiting = run.get("waiting") if isinstance(run, Mapping) else None
    if not isinstance(waiting, Mapping) or waiting.get("poolTurn") is not True:
        return {}
    name, product = run.get("name"), run.get("gpuProduct")  # type: ignore[union-attr]
    job_uid = run.get("jobUid")  # type: ignore[union-attr]
    if not isinstance(name, str) or not isinstance(product, str) or not name or not product:
        return {}
    if not isinstance(job_uid, str) or not job_uid:
        return {}  # no Job recorded: no pod of it to place the run
    return {"pool_run": name, "pool_product": product, "pool_job_uid": job_uid[:64]}


def stable_config_map(spec: Mapping[str, Any]) -> str | None:
    """The ConfigMap an AnnotateOnly spec (as stored, camelCase) writes its table into."""
    rollout = spec.get("rollout")
    if not isinstance(rollout, Mapping) or rollout.get("mode") != "AnnotateOnly":
        return None
    name = rollout.get("tableConfigMap")
    return str(name) if isinstance(name, str) and name else None


def recorded_owner(obj: Mapping[str, Any] | None) -> str | None:
    """The profile recorded on a Deployment or a stable ConfigMap (`sps.dev/owner`)."""
    annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION_OWNER)
    return str(value) if value else None


def owner_of(deployment: Mapping[str, Any], profiles: Iterable[ProfileSummary]) -> str | None:
    """The name of the profile that serves `deployment` (None: no profile selects it)."""
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    alive = [p for p in profiles if not p.deleting]
    recorded = recorded_owner(deployment)
    for profile in alive:
        if profile.name == recorded and (profile.selector is None or profile.selects(labels)):
            return profile.name
    candidates = sorted((p for p in alive if p.selects(labels)), key=lambda p: (p.created, p.name))
    return candidates[0].name if candidates else None


def stable_writer(
    config_map: Mapping[str, Any] | None, name: str, profiles: Iterable[ProfileSummary]
) -> str | None:
    """The name of the one profile that writes the AnnotateOnly ConfigMap `name` (None:
    no profile names it): the one recorded on it while that profile exists, is not being
    deleted and still names it, else the oldest naming it."""
    alive = [p for p in profiles if not p.deleting and p.stable == name]
    recorded = recorded_owner(config_map)
    if any(p.name == recorded for p in alive):
        return recorded
    candidates = sorted(alive, key=lambda p: (p.created, p.name))
    return candidates[0].name if candidates else None


# --------------------------------------------------------------------------- table holders
#
# A table ConfigMap is owned by its profile (the controller reference) and also by each
# Deployment whose pod template mounts it (a plain reference): the garbage collector
# deletes an object only when every owner is gone, so a table a Deployment mounts outlives
# its profile, the operator and the CRD, even when the profile's finalizer never runs
# (removed by hand), and goes with the Deployment once both are gone. The operator writes
# such a reference only from a Deployment it read in the ConfigMap's own namespace (the
# collector resolves ownerReferences within the dependent's namespace only) and touches
# no reference but that Deployment's and the profile's.


def mounted_config_maps(deployment: Mapping[str, Any]) -> set[str]:
    """ConfigMaps the workload's pod templates mount (directly or projected; a
    LeaderWorkerSet's leader and worker templates both)."""
    names: set[str] = set()
    for _, template in workloads.templates(deployment):
        pod_spec = template.get("spec") or {}
        for volume in pod_spec.get("volumes") or []:
            sources = [volume.get("configMap") or {}]
            sources += [
                s.get("configMap") or {}
                for s in (volume.get("projected") or {}).get("sources") or []
            ]
            names |= {str(s["name"]) for s in sources if s.get("name")}
    return names


def workload_reference(deployment: Mapping[str, Any]) -> dict[str, Any] | None:
    """The non-controller ownerReference that makes `deployment` hold a table (None: it has
    no name or UID to refer to)."""
    meta = deployment.get("metadata") or {}
    name, uid = meta.get("name"), meta.get("uid")
    if not isinstance(name, str) or not isinstance(uid, str) or not name or not uid:
        return None
    # No controller (the profile is), no blockOwnerDeletion (it needs update on
    # deployments/finalizers under OwnerReferencesPermissionEnforcement; GC needs none).
    kind = workloads.kind_of(deployment)
    return {"apiVersion": kind.api_version, "kind": kind.kind, "name": name, "uid": uid}


def _namespace(obj: Mapping[str, Any]) -> Any:
    return (obj.get("metadata") or {}).get("namespace")


def held_owner_references(
    config_map: Mapping[str, Any], deployment: Mapping[str, Any], holds: bool
) -> list[dict[str, Any]] | None:
    """The ConfigMap's ownerReferences with `deployment` holding it (`holds`) or not; None
    when they already say so, or when `deployment` may not hold it (another namespace, or
    no UID): nothing to write."""
    ref = workload_reference(deployment)
    namespace = _namespace(config_map)
    if ref is None or not namespace or _namespace(deployment) != namespace:
        return None
    current = _references(config_map)
    others = [r for r in current if r.get("uid") != ref["uid"]]
    if holds:
        return None if ref in current else [*others, ref]
    return None if len(others) == len(current) else others


def released_owner_references(
    config_map: Mapping[str, Any], profile_uid: str, mounting: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """A table's ownerReferences once its profile lets it go (the finalizer): the profile's
    reference dropped, each Deployment of its namespace in `mounting` holding it (a table
    rolled out before Deployments held tables gets its holders here), others kept."""
    meta = dict(config_map.get("metadata") or {})
    meta["ownerReferences"] = [r for r in _references(config_map) if r.get("uid") != profile_uid]
    for deployment in mounting:
        held = held_owner_references({"metadata": meta}, deployment, True)
        if held is not None:
            meta["ownerReferences"] = held
    return list(meta["ownerReferences"])


def _references(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [dict(r) for r in refs if isinstance(r, Mapping)]


# --------------------------------------------------------------------------- adoption
#
# An object the operator creates under a derived name may exist already: its own, created
# by a pass that crashed before status recorded it, or one someone else created first
# under that name (names are derived from the profile's UID, which is no secret). Its
# ownerReference and labels are strings anyone who may create it can write, so a Job is
# adopted only when it also is the Job the operator would create, field by field
# (`job_adoption.job_refusal`): a Job created ahead of the operator's runs what its author
# wrote, ahead of others in the GPU pool. Other objects need their controller
# ownerReference to be the profile (a table ConfigMap's bytes are then checked against its
# hash by publish.py).


def adoption_refusal(existing: Mapping[str, Any], built: Mapping[str, Any], uid: str) -> str | None:
    """Why `existing` (found under the name of `built`, which the operator was creating
    for the profile with `uid`) is not the operator's own (None: adopt it)."""
    meta = existing.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    if not isinstance(refs, list) or not any(
        isinstance(r, Mapping) and r.get("uid") == uid and r.get("controller") for r in refs
    ):
        return "its controller ownerReference is not the profile"
    if built.get("kind") != "Job":
        return None  # (a table ConfigMap's bytes are checked by their hash: publish.py)
    return job_refusal(existing, built)
