"""What deleting an SpsProfile leaves behind (the finalizer's work).

Everything the profile created goes with it (ownerReferences, garbage collection) except
the table ConfigMaps that a Deployment's pod template mounts, and a replica a run of it
borrowed goes back to its lender (of any kind): those tables are released (the profile's owner
reference dropped, each mounting Deployment an owner, labelled released) so the servers
keep running and can restart, and each goes with the last Deployment that holds it.
Exactly those: a table no template mounts goes with the profile. The profile's name is
removed from the Deployments it served, so another profile may take them over. The
Deployments a table is rolled onto hold it from the start (rollout/holders.py), so the
tables they mount survive even a finalizer removed by hand.

The profile's volume, mount and table flag stay in the Deployments (un-injecting them
would restart every server the profile served; the table they mount stays with them).

An AnnotateOnly stable ConfigMap has no owner (it must outlive a profile re-created by
GitOps). The profile recorded on it as its writer releases it the same way when a
Deployment mounts it or another profile names it (which then takes it over), and
otherwise deletes it if the operator alone wrote it (one Git created stays, released).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from sps_operator.api import labels as L
from sps_operator.constants import FIELD_MANAGER
from sps_operator.controller.kube.client import KubeApi, Obj, owned_by
from sps_operator.controller.kube.workload_apply import owner_patch
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.borrow import (
    COMPONENT_POOL,
    PoolClaim,
    borrow_patch,
    confirmed_tag,
    give_back,
    read_claim,
    read_tag,
)
from sps_operator.controller.policies.ownership import (
    mounted_config_maps,
    profile_summary,
    recorded_owner,
    released_owner_references,
)

log = logging.getLogger(__name__)


def tables_to_release(
    deployments: Iterable[Mapping[str, Any]], our_tables: Iterable[str]
) -> set[str]:
    tables = set(our_tables)
    mounted: set[str] = set()
    for dep in deployments:
        mounted |= mounted_config_maps(dep) & tables
    return mounted


def nothing_to_release(
    name: str,
    uid: str,
    status: Mapping[str, Any],
    deployments: Iterable[Mapping[str, Any]],
    config_maps: Iterable[Mapping[str, Any]],
    stable: str | None = None,
) -> bool:
    """True when neither the profile's status nor the caches know anything of it to
    release: no table it published, no target, no borrowed replica, no stable ConfigMap
    (AnnotateOnly), no ConfigMap it owns, no Deployment recording it as owner or lender.
    Deleting an idle profile then costs no API call (`release` lists Deployments and
    ConfigMaps otherwise). Both sources must be empty: the status misses what a crash cut
    short, the cache what is very new."""
    run = status.get("currentRun") or {}
    if (
        stable
        or status.get("tables")
        or status.get("targets")
        or run.get("borrow")
        or status.get("rolloutBorrow")
    ):
        return False
    if any(owned_by(cm, uid) for cm in config_maps):
        return False
    for dep in deployments:
        copy = read_tag(dep)  # (only a hint here: `release` reads the pool Leases)
        if recorded_owner(dep) == name or (copy is not None and copy.profile_uid == uid):
            return False
    return True


def release(
    kube: KubeApi,
    namespace: str,
    name: str,
    uid: str,
    stable: str | None = None,
    *,
    pool_namespace: str | None = None,
) -> list[str]:
    """Release the mounted tables, the stable ConfigMap (`stable`, AnnotateOnly) and the
    ownership records, give back a borrowed replica and its GPU pool (the Leases in
    `pool_namespace`); raises on any API error (the finalizer stays until this succeeds).
    Returns the released ConfigMaps."""
    deployments = kube.list_targets(namespace, "")
    ours = {
        cm["metadata"]["name"]: cm
        for cm in kube.list_config_maps(namespace, f"{L.LABEL_PROFILE_UID}={uid}")
        if (cm["metadata"].get("labels") or {}).get(L.LABEL_COMPONENT) == L.COMPONENT_TABLE
        and cm["metadata"].get("namespace") == namespace
        and owned_by(cm, uid)
    }
    released = []
    for cm_name in sorted(tables_to_release(deployments, ours)):
        cm = ours[cm_name]
        mounting = [d for d in deployments if cm_name in mounted_config_maps(d)]
        patch = {
            "metadata": {
                # Conditional: the list replaces the ConfigMap's whole ownerReferences.
                "resourceVersion": cm["metadata"].get("resourceVersion"),
                "ownerReferences": released_owner_references(cm, uid, mounting),
                "labels": {L.LABEL_RELEASED: "true"},
            }
        }
        if _unless_gone(kube.patch_metadata, "ConfigMap", namespace, cm_name, patch):
            released.append(cm_name)
    if stable:
        released += _release_stable(kube, namespace, name, stable, deployments)
    # The borrows of the profile's runs, as the pool Leases record them (no tenant writes
    # there); the copies on the Deployments only say which.
    leases = []
    if pool_namespace:
        for lease in kube.list_leases(pool_namespace, f"{L.LABEL_COMPONENT}={COMPONENT_POOL}"):
            claim = read_claim(lease)
            if claim is not None and claim.profile_uid == uid and claim.namespace == namespace:
                leases.append((lease, claim))
    claims = [claim for _, claim in leases]
    for dep in deployments:
        _unless_gone(_release_deployment, kube, namespace, name, uid, dep, claims)
    for lease, _ in leases:
        meta = lease["metadata"]
        _unless_gone(kube.delete, "Lease", pool_namespace, meta["name"], meta.get("uid"))
    return released


def _release_stable(
    kube: KubeApi, namespace: str, name: str, stable: str, deployments: Iterable[Obj]
) -> list[str]:
    """Release or delete the stable ConfigMap `stable` if this profile is its writer."""
    cm = kube.get("ConfigMap", namespace, stable)
    labels = ((cm or {}).get("metadata") or {}).get("labels") or {}
    if cm is None or labels.get(L.LABEL_COMPONENT) != L.COMPONENT_STABLE:
        return []  # the operator never wrote it
    others = [
        s
        for s in (profile_summary(b) for b in kube.list_profiles(namespace))
        if s.name != name and not s.deleting and s.stable == stable
    ]
    recorded = recorded_owner(cm)
    if recorded != name and (recorded is not None or others):
        return []  # another profile writes it
    meta = cm["metadata"]
    mounted = any(stable in mounted_config_maps(d) for d in deployments)
    if not mounted and not others and _only_ours(cm):
        kube.delete("ConfigMap", namespace, stable, uid=meta.get("uid"))
        log.info("deleted ConfigMap %s/%s: nothing mounts it any more", namespace, stable)
        return []
    patch = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "labels": {L.LABEL_RELEASED: "true"},
            "annotations": {L.ANNOTATION_OWNER: None},
        }
    }
    released = _unless_gone(kube.patch_metadata, "ConfigMap", namespace, stable, patch)
    return [stable] if released else []


def _only_ours(obj: Mapping[str, Any]) -> bool:
    """Every field of `obj` was written by the operator (none by Git, kubectl, ...)."""
    managers = {m.get("manager") for m in (obj.get("metadata") or {}).get("managedFields") or []}
    return managers <= {FIELD_MANAGER}


def _unless_gone(call: Callable[..., object], *args: Any) -> bool:
    """Run `call`; False when its object was deleted since the list (a gone Deployment
    mounts nothing and a gone ConfigMap needs no release: nothing to keep the finalizer for)."""
    try:
        call(*args)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def _release_deployment(
    kube: KubeApi,
    namespace: str,
    name: str,
    uid: str,
    dep: Mapping[str, Any],
    claims: Iterable[PoolClaim] = (),
) -> None:
    tag = next((t for c in claims if (t := confirmed_tag(c, dep)) is not None), None)
    if tag is not None and tag.profile_uid == uid:
        # A run of the deleted profile borrowed a replica: it goes back first (record and
        # replicas in one write; a 409 keeps the finalizer and kopf retries); then its pool
        # Lease goes.
        action = give_back(dep, tag)
        kube.patch_lender(namespace, dep["metadata"]["name"],
                          borrow_patch(dep, None, action.replicas),
                          kind=workloads.kind_of(dep).kind)  # fmt: skip
    if recorded_owner(dep) == name:
        # Conditional on the Deployment as read (re-read if the give-back above changed
        # it): a profile that claimed it meanwhile keeps its record (409: retried).
        lent = tag is not None and tag.profile_uid == uid
        kind = workloads.kind_of(dep).kind
        current = kube.get(kind, namespace, dep["metadata"]["name"]) if lent else dep
        if current is not None and recorded_owner(current) == name:
            removal = owner_patch(current, None)
            kube.patch_metadata(kind, namespace, dep["metadata"]["name"], removal)
