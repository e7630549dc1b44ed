"""Which SpsProfiles an event concerns, and waking them (the event-driven core).

Each profile's daemon sleeps on its own `asyncio.Event`; a watch event on anything a pass
reads (a selected Deployment, the profile's Jobs and ConfigMaps, pods, node labels,
another profile of the namespace) sets the events of the profiles it concerns. Setting an
event that is already set costs nothing, so a storm of events coalesces into one pass.
An event wakes only profiles of its own object's namespace, found through the caches'
keys (`indexes.py`) in O(what it concerns), never by scanning the namespace.
All of this runs on the event loop: no locks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sps_operator.api import labels as L
from sps_operator.controller.indexes import (
    NAMESPACE,
    QUEUE_MISSING,
    RECORDED,
    STABLE,
    Index,
    controller_profile,
    deployments_covered,
    deployments_for_pod,
    deployments_selected,
    profiles_for,
    values,
)
from sps_operator.controller.policies.ownership import recorded_owner, stable_config_map


class Kicks:
    def __init__(self) -> None:
        self._events: dict[str, tuple[str, asyncio.Event]] = {}  # uid → (namespace, event)
        self._node_labels: dict[str, Mapping[str, str]] = {}
        self._profiles: dict[str, tuple[Any, ...]] = {}
        self._seen: dict[str, tuple[Any, str | None]] = {}  # uid → (selector, stable)

    def event(self, uid: str, namespace: str) -> asyncio.Event:
        return self._events.setdefault(uid, (namespace, asyncio.Event()))[1]

    def forget(self, uid: str) -> None:
        self._events.pop(uid, None)
        self._profiles.pop(uid, None)
        self._seen.pop(uid, None)

    def seen(self, uid: str) -> tuple[Any, str | None]:
        """The profile's (selector, stable ConfigMap) at its previous event ((None, None)
        before its first)."""
        return self._seen.get(uid, (None, None))

    def profile_changed(self, body: Mapping[str, Any]) -> tuple[bool, bool]:
        """(this profile's own inputs changed, its neighbours' may have). A status write is
        neither: without this filter every status write would wake every profile of the
        namespace, and a namespace of n profiles would converge in n² passes."""
        meta = body.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        own = (
            meta.get("generation"),
            tuple(sorted((meta.get("annotations") or {}).items())),
            bool(meta.get("deletionTimestamp")),
        )
        spec = body.get("spec") or {}
        stable = stable_config_map(spec) if isinstance(spec, Mapping) else None
        selector = json.dumps(spec.get("selector"), sort_keys=True)
        shared = (selector, stable, meta.get("creationTimestamp"), own[2])
        previous = self._profiles.get(uid)
        self._profiles[uid] = (*own, *shared)
        self._seen[uid] = (spec.get("selector"), stable)
        if previous is None:
            return True, True
        return previous[: len(own)] != own, previous[len(own) :] != shared

    def kick(self, namespace: str, uids: Iterable[str | None]) -> int:
        """Wake the profiles `uids` of `namespace` (a UID of another namespace, copied onto
        an object here from a label, wakes nobody)."""
        count = 0
        for uid in uids:
            found = self._events.get(uid or "")
            if found is None or found[0] != namespace or found[1].is_set():
                continue
            found[1].set()
            count += 1
        return count

    def node_labels_changed(self, node: str, labels: Mapping[str, str] | None) -> bool:
        """True when a node's labels differ from the last ones seen (GPU product labels
        change rarely; node status updates, which are frequent, do not count)."""
        previous = self._node_labels.get(node)
        if labels is None:
            self._node_labels.pop(node, None)
        else:
            self._node_labels[node] = dict(labels)
        return previous != (dict(labels) if labels is not None else None)


def profiles_selecting(deployment: Mapping[str, Any], profiles: Index, namespace: str) -> list[str]:
    """UIDs of the profiles a Deployment event concerns: those selecting it, and the one
    recorded as its owner (it may have stopped selecting it)."""
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    owner = recorded_owner(deployment)
    return [
        p.uid
        for p in profiles_for(profiles, namespace, deployment)
        if p.selects(labels) or p.name == owner
    ]


def profiles_for_pod(
    labels: Mapping[str, str], namespace: str, deployments: Index, profiles: Index
) -> list[str]:
    """A pod of one of our Jobs wakes its profile; any other pod, the profiles of the
    Deployments whose selector matches it (what placement reads), not the whole namespace."""
    uid = labels.get(L.LABEL_PROFILE_UID)
    if uid:
        return [uid]
    return [
        p
        for dep in deployments_for_pod(deployments, namespace, labels)
        for p in profiles_selecting(dep, profiles, namespace)
    ]


def profiles_for_pdb(
    pdb: Mapping[str, Any], namespace: str, deployments: Index, profiles: Index
) -> list[str]:
    """A PodDisruptionBudget (its status changes with every pod) wakes the profiles of the
    Deployments whose pods it covers."""
    selector = (pdb.get("spec") or {}).get("selector")
    return [
        p
        for dep in deployments_covered(deployments, namespace, selector)
        for p in profiles_selecting(dep, profiles, namespace)
    ]


def profiles_for_config_map(config_map: Mapping[str, Any], profiles: Index) -> list[str]:
    """A ConfigMap wakes the profile that owns it; a stable ConfigMap (no owner), the
    profiles naming it (its writer may have changed)."""
    owner = controller_profile(config_map)
    if owner:
        return [owner]
    meta = config_map.get("metadata") or {}
    key = (STABLE, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
    return [p.uid for p in values(profiles, key)]


def profile_neighbours(
    body: Mapping[str, Any],
    seen_before: tuple[Any, str | None],
    namespace: str,
    deployments: Index,
    profiles: Index,
) -> list[str]:
    """When a profile appears, goes, or changes its selector or stable ConfigMap, who owns
    a Deployment (or writes a stable ConfigMap) may change: the profiles selecting a
    Deployment it selects, selected, or owns, and those naming a stable ConfigMap it
    names or named, look again. Profiles with nothing in common are not woken (deleting
    n profiles of a namespace would otherwise cost n² passes)."""
    name = str((body.get("metadata") or {}).get("name", ""))
    spec = body.get("spec") or {}
    selector_before, stable_before = seen_before
    concerned = values(deployments, (RECORDED, namespace, name))
    for selector in (spec.get("selector"), selector_before):
        concerned += deployments_selected(deployments, namespace, selector)
    uids = [p for dep in concerned for p in profiles_selecting(dep, profiles, namespace)]
    for stable in {stable_config_map(spec), stable_before} - {None}:
        uids += [p.uid for p in values(profiles, (STABLE, namespace, stable))]
    return list(dict.fromkeys(uids))


def profiles_waiting_for_a_local_queue(namespace: str, profiles: Index) -> list[str]:
    """The profiles of `namespace` whose run waits for a Kueue LocalQueue to exist
    (LocalQueueMissing): a LocalQueue created there wakes them, and nobody else."""
    return [p.uid for p in values(profiles, (QUEUE_MISSING, namespace))]


def profiles_in(namespaces: Iterable[str], profiles: Index) -> dict[str, list[str]]:
    """Every profile of each namespace, by namespace (a node's labels changed)."""
    return {ns: [p.uid for p in values(profiles, (NAMESPACE, ns))] for ns in namespaces}
