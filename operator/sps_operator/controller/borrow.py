"""Profiling where GPUs are scarce: why a run waits, and BorrowReplica.

A Clone Job needs as many GPUs of the target's product as one server replica; on a busy
pool none is free. `waiting` says why a run does not run (the scheduler's words, or
Kueue's queue). With `capacity.mode: BorrowReplica`, after `borrowAfterSeconds` the
operator takes one replica out of the target Deployment through the scale subresource,
and gives it back when the run ends, whatever the outcome.

What was borrowed is recorded twice, so nothing is ever left scaled down: in
`status.currentRun.borrow`, and on the Deployment (annotation `sps.dev/borrowed`, written
before the scale). Every pass gives back what a Deployment says was lent to a run of this
profile that is no longer running; a deleted profile gives back before its finalizer goes.
A give-back never fights: replicas are restored only if nobody changed them meanwhile.

Refusals (each a reason the status shows): the Deployment is rolling out; a
HorizontalPodAutoscaler or another server-side-apply manager owns its replicas (a borrow
would be undone, or fought); too few ready replicas for `minAvailable`; a single replica
without `allowDowntime`; a PodDisruptionBudget that allows no disruption; another
borrow on the same GPU product.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.models import CapacitySpec
from sps_operator.constants import FIELD_MANAGER
from sps_operator.controller.deployments import deployment_rolled_out
from sps_operator.controller.selectors import matches_selector

WAITING_FOR_GPUS = "WaitingForGPUs"
QUEUED_IN_KUEUE = "QueuedInKueue"
BORROW_BLOCKED = "BorrowBlocked"


@dataclass(frozen=True)
class BorrowTag:
    """The record on a Deployment of a replica lent to a run."""

    profile_uid: str
    profile: str
    run: str
    replicas: int  # before the borrow
    product: str
    at: str

    def to_annotation(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))


def read_tag(deployment: Mapping[str, Any]) -> BorrowTag | None:
    """The borrow recorded on a Deployment (None: none, or not readable as one)."""
    text = ((deployment.get("metadata") or {}).get("annotations") or {}).get(L.ANNOTATION_BORROWED)
    if not text:
        return None
    try:
        data = json.loads(text)
        return BorrowTag(
            profile_uid=str(data["profile_uid"]),
            profile=str(data["profile"]),
            run=str(data["run"]),
            replicas=int(data["replicas"]),
            product=str(data["product"]),
            at=str(data["at"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


def replicas_owners(deployment: Mapping[str, Any]) -> list[str]:
    """Server-side-apply managers other than the operator that own spec.replicas: a GitOps
    tool applying the Deployment would undo a borrow at its next sync."""
    owners = []
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        spec = (entry.get("fieldsV1") or {}).get("f:spec") or {}
        if (
            "f:replicas" in spec
            and entry.get("operation") == "Apply"
            and entry.get("manager") != FIELD_MANAGER
        ):
            owners.append(str(entry.get("manager")))
    return owners


def _pod_labels(deployment: Mapping[str, Any]) -> Mapping[str, str]:
    template = (deployment.get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("labels") or {}


def borrow_refusal(
    deployment: Mapping[str, Any],
    capacity: CapacitySpec,
    pdbs: Iterable[Mapping[str, Any]],
    hpas: Iterable[Mapping[str, Any]],
    pool_borrows: Iterable[BorrowTag],
    run: str,
) -> str | None:
    """Why one replica may not be borrowed from `deployment` now (None: it may)."""
    name = (deployment.get("metadata") or {}).get("name")
    if not deployment_rolled_out(deployment):
        return f"Deployment {name} is rolling out; borrowing waits until it is done"
    for hpa in hpas:
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if target.get("kind") == "Deployment" and target.get("name") == name:
            return (
                f"HorizontalPodAutoscaler {hpa['metadata']['name']} manages the replicas of "
                f"{name}; a borrow would fight it: use capacity.mode Wait, or free a GPU"
            )
    owners = replicas_owners(deployment)
    if owners:
        return (
            f"the replicas of {name} are owned by {', '.join(owners)} (server-side apply): its "
            "next sync would undo a borrow; use capacity.mode Wait, or stop owning replicas in "
            "Git (e.g. leave spec.replicas out)"
        )
    replicas = int((deployment.get("spec") or {}).get("replicas", 1))
    ready = int((deployment.get("status") or {}).get("readyReplicas", 0))
    if replicas <= 1 and not capacity.allow_downtime:
        return (
            f"{name} has a single replica: borrowing it stops the server; set "
            "capacity.allowDowntime: true to allow that"
        )
    floor = capacity.min_available
    if floor is None:
        floor = max(replicas - 1, 1) if replicas > 1 else 0
    if ready - 1 < floor:
        return (
            f"{name} has {ready} ready replicas; borrowing one would leave fewer than "
            f"minAvailable {floor}"
        )
    labels = _pod_labels(deployment)
    for pdb in pdbs:
        selector = (pdb.get("spec") or {}).get("selector") or {}
        if (
            matches_selector(selector, labels)
            and int((pdb.get("status") or {}).get("disruptionsAllowed", 0)) < 1
        ):
            return (
                f"PodDisruptionBudget {pdb['metadata']['name']} allows no disruption of {name} now"
            )
    for tag in pool_borrows:
        if tag.run != run:
            return (
                f"{tag.profile} is borrowing a replica on GPU product {tag.product}; one "
                "borrow at a time per product"
            )
    return None


@dataclass(frozen=True)
class GiveBack:
    """What to do to return a borrowed replica."""

    replicas: int | None  # scale to this (None: leave replicas alone)
    note: str  # what happened, for the event


def give_back(deployment: Mapping[str, Any], tag: BorrowTag) -> GiveBack:
    """Restore the replicas only if they are what the borrow left: someone who changed
    them meanwhile wins."""
    current = int((deployment.get("spec") or {}).get("replicas", 1))
    name = (deployment.get("metadata") or {}).get("name")
    if current == tag.replicas - 1:
        return GiveBack(tag.replicas, f"gave the borrowed replica back to {name}")
    if current == tag.replicas:
        return GiveBack(None, f"{name} already has its {tag.replicas} replicas back")
    return GiveBack(
        None,
        f"{name} was scaled to {current} replicas meanwhile (not {tag.replicas - 1}); left as "
        "is, the borrow record removed",
    )


def pool_borrows(deployments: Sequence[Mapping[str, Any]], product: str) -> list[BorrowTag]:
    return [t for d in deployments if (t := read_tag(d)) is not None and t.product == product]


def seconds_between(start: str, now: datetime) -> float:
    return (now - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
