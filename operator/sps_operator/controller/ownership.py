"""Which SpsProfile serves a Deployment (pure).

Two profiles whose selectors match one Deployment would otherwise take turns rolling
their own tables onto it, restarting every GPU server each time. A Deployment belongs to
at most one profile, decided without any negotiation:

1. the profile recorded on the Deployment (annotation `sps.dev/owner`, written by the
   operator) keeps it while that profile exists, is not being deleted and still selects it
   (or has a spec the operator cannot read: an edit in progress must not hand it over);
2. otherwise the oldest profile that selects it (creation time, then name) takes it.

Every other profile reports `Conflict` naming the owner and never writes to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sps_operator.api.labels import ANNOTATION_OWNER
from sps_operator.controller.selectors import matches_selector


@dataclass(frozen=True)
class ProfileSummary:
    """What ownership needs to know of every SpsProfile in the namespace."""

    name: str
    uid: str
    created: str  # RFC 3339; sorts chronologically
    selector: Mapping[str, Any] | None  # None: the spec cannot be read
    deleting: bool = False

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
    )


def recorded_owner(deployment: Mapping[str, Any]) -> str | None:
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
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
