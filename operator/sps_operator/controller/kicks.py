"""Which SpsProfiles an event concerns, and waking them (the event-driven core).

Each profile's daemon sleeps on its own `asyncio.Event`; a watch event on anything a pass
reads (a selected Deployment, the profile's Jobs and ConfigMaps, pods, node labels,
another profile of the namespace) sets the events of the profiles it concerns. Setting an
event that is already set costs nothing, so a storm of events coalesces into one pass.
All of this runs on the event loop: no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from sps_operator.controller.ownership import ProfileSummary, recorded_owner


class Kicks:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._node_labels: dict[str, Mapping[str, str]] = {}

    def event(self, uid: str) -> asyncio.Event:
        return self._events.setdefault(uid, asyncio.Event())

    def forget(self, uid: str) -> None:
        self._events.pop(uid, None)

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
