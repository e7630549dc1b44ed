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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sps_operator.api.labels import ANNOTATION_OWNER
from sps_operator.api.reasons import LOCAL_QUEUE_MISSING
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
