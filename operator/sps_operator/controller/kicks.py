"""Which SpsProfiles an event concerns, and waking them (the event-driven core).

Each profile's daemon sleeps on its own `asyncio.Event`; a watch event on anything a pass
reads (a selected Deployment, the profile's Jobs and ConfigMaps, pods, node labels,
another profile of the namespace) sets the events of the profiles it concerns. Setting an
event that is already set costs nothing, so a storm of events coalesces into one pass.
All of this runs on the event loop: no locks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any

from sps_operator.api import labels as L
from sps_operator.controller.ownership import ProfileSummary, recorded_owner
from sps_operator.controller.selectors import matches_selector


class Kicks:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._node_labels: dict[str, Mapping[str, str]] = {}
        self._profiles: dict[str, tuple[Any, ...]] = {}
        self._selectors: dict[str, Any] = {}

    def event(self, uid: str) -> asyncio.Event:
        return self._events.setdefault(uid, asyncio.Event())

    def forget(self, uid: str) -> None:
        self._events.pop(uid, None)
        self._profiles.pop(uid, None)
        self._selectors.pop(uid, None)

    def selector_seen(self, uid: str) -> Any:
        """The profile's selector at its previous event (None before its first)."""
        return self._selectors.get(uid)

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
        selector = json.dumps((body.get("spec") or {}).get("selector"), sort_keys=True)
        shared = (selector, meta.get("creationTimestamp"), own[2])
        previous = self._profiles.get(uid)
        self._profiles[uid] = (*own, *shared)
        self._selectors[uid] = (body.get("spec") or {}).get("selector")
        if previous is None:
            return True, True
        return previous[: len(own)] != own, previous[len(own) :] != shared

    def kick(self, uids: Iterable[str]) -> int:
        count = 0
        for uid in uids:
            event = self._events.get(uid)
            if event is not None and not event.is_set():
                event.set()
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


def profiles_selecting(
    deployment: Mapping[str, Any], profiles: Iterable[ProfileSummary]
) -> list[str]:
    """UIDs of the profiles a Deployment event concerns: those selecting it, and the one
    recorded as its owner (it may have stopped selecting it)."""
    labels = (deployment.get("metadata") or {}).get("labels") or {}
    owner = recorded_owner(deployment)
    return [p.uid for p in profiles if p.selects(labels) or p.name == owner]


def _template_labels(deployment: Mapping[str, Any]) -> Mapping[str, str]:
    template = (deployment.get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("labels") or {}


def _selects(selector: Any, labels: Mapping[str, str]) -> bool:
    return isinstance(selector, Mapping) and bool(selector) and matches_selector(selector, labels)


def profiles_for_pod(
    labels: Mapping[str, str],
    deployments: Iterable[Mapping[str, Any]],
    profiles: Iterable[ProfileSummary],
) -> list[str]:
    """A pod of one of our Jobs wakes its profile; any other pod, the profiles of the
    Deployments whose selector matches it (what placement reads), not the whole namespace."""
    uid = labels.get(L.LABEL_PROFILE_UID)
    if uid:
        return [uid]
    profiles = list(profiles)
    return [
        p
        for dep in deployments
        if _selects((dep.get("spec") or {}).get("selector"), labels)
        for p in profiles_selecting(dep, profiles)
    ]


def profiles_for_pdb(
    pdb: Mapping[str, Any],
    deployments: Iterable[Mapping[str, Any]],
    profiles: Iterable[ProfileSummary],
) -> list[str]:
    """A PodDisruptionBudget (its status changes with every pod) wakes the profiles of the
    Deployments whose pods it covers."""
    selector = (pdb.get("spec") or {}).get("selector")
    profiles = list(profiles)
    return [
        p
        for dep in deployments
        if _selects(selector, _template_labels(dep))
        for p in profiles_selecting(dep, profiles)
    ]


def profile_neighbours(
    body: Mapping[str, Any],
    selector_before: Any,
    deployments: Iterable[Mapping[str, Any]],
    profiles: Iterable[ProfileSummary],
) -> list[str]:
    """When a profile appears, goes, or changes its selector, who owns a Deployment may
    change: the profiles selecting a Deployment it selects, selected, or owns look again.
    Profiles with no Deployment in common are not woken (deleting n profiles of a namespace
    would otherwise cost n² passes)."""
    name = str((body.get("metadata") or {}).get("name", ""))
    selector_now = (body.get("spec") or {}).get("selector")
    profiles = list(profiles)
    concerned = [
        dep
        for dep in deployments
        if recorded_owner(dep) == name
        or _selects(selector_now, (dep.get("metadata") or {}).get("labels") or {})
        or _selects(selector_before, (dep.get("metadata") or {}).get("labels") or {})
    ]
    return [p for dep in concerned for p in profiles_selecting(dep, profiles)]
