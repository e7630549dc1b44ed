"""Profiling where GPUs are scarce: why a run waits, and BorrowReplica (pure decisions).

A Clone Job needs as many GPUs of the target's product as one server replica; on a busy
pool none is free. `waiting` says why a run does not run (the scheduler's words, or
Kueue's queue). With `capacity.mode: BorrowReplica`, after `borrowAfterSeconds` the
operator takes one replica out of the target Deployment and gives it back when the run
ends, whatever the outcome (or, when the new table's rollout needs the slot as its surge
slot on a full pool, once that rollout completes).

What was borrowed is recorded where only the operator writes: the GPU product's pool Lease
in the operator's namespace (`PoolClaim`: the profile, the run, the lender's namespace and
name, its replicas before, the table a rollout keeps the slot for), created only if absent
before anything is scaled; one borrow per GPU product at a time is that same Lease. The
Deployment gets a copy (annotation `sps.dev/borrowed`) in the same write that scales it,
conditional on the resourceVersion the decision read, so there is no moment with a scale
and no copy, and a pass deciding on a stale copy writes nothing. The copy is for people,
and says which Lease to read: anyone who may edit a Deployment may write it (a field
manager's name is no proof), so a borrow is acted on only when the pool Lease names that
very Deployment and run (`confirmed_tag`), and its numbers come from the Lease. Status
(`currentRun.borrow`) mirrors it. A give-back never fights: replicas are restored only if
nobody changed them meanwhile.

Refusals (each a reason the status shows): Kueue manages the Deployment (a borrow would
hand quota from one Kueue workload to whichever Kueue admits next); the Deployment is
rolling out; a
HorizontalPodAutoscaler or another server-side-apply manager owns its replicas (a borrow
would be undone, or fought); too few ready replicas for `minAvailable`; a single replica
without `allowDowntime`; a PodDisruptionBudget that allows no disruption; another
borrow on the same GPU product.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.hashing import digest
from sps_operator.api.spec import CapacitySpec
from sps_operator.api.untrusted_json import read_json_object, readable
from sps_operator.constants import FIELD_MANAGER, LABEL_PREFIX
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.deployments import deployment_rolled_out
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.policies.run_job import job_pods
from sps_operator.controller.policies.selectors import matches_selector

Obj = dict[str, Any]

MAX_TAG_BYTES = 4096  # a borrow record is ~250 bytes; anything much larger is not ours
MAX_HOLDER = 253
MAX_REPLICAS = 100_000


@dataclass(frozen=True)
class BorrowTag:
    """The record on a Deployment of a replica lent to a run."""

    profile_uid: str
    profile: str
    run: str
    replicas: int  # before the borrow
    product: str
    at: str
    hold: str = ""  # after the run: the table whose rollout keeps the slot (its hash)

    def to_annotation(self) -> str:
        data = asdict(self)
        if not self.hold:
            data.pop("hold")
        return json.dumps(data, sort_keys=True, separators=(",", ":"))


def read_tag(deployment: Mapping[str, Any]) -> BorrowTag | None:
    """The borrow recorded on a Deployment (None: none, or not readable as one)."""
    text = ((deployment.get("metadata") or {}).get("annotations") or {}).get(L.ANNOTATION_BORROWED)
    data = read_json_object(text, max_bytes=MAX_TAG_BYTES, max_depth=1)
    if not readable(data):
        return None
    try:
        replicas = data["replicas"]
        if type(replicas) is not int or not 0 < replicas <= MAX_REPLICAS:
            return None  # a count the operator never wrote (Infinity, 1e30, "3", true)
        return BorrowTag(
            profile_uid=str(data["profile_uid"]),
            profile=str(data["profile"]),
            run=str(data["run"]),
            replicas=replicas,
            product=str(data["product"]),
            at=str(data["at"]),
            hold=str(data.get("hold") or ""),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def written_by_operator(deployment: Mapping[str, Any]) -> bool:
    """The borrow record was written by the operator's own field manager (managedFields:
    the annotation key owned by `sps-operator`). Anyone may annotate a Deployment they can
    edit; a record the operator did not write is never acted on."""
    key = f"f:{L.ANNOTATION_BORROWED}"
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        annotations = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations")
        if entry.get("manager") == FIELD_MANAGER and key in (annotations or {}):
            return True
    return False


def confirmed_tag(
    claim: PoolClaim | None, deployment: Mapping[str, Any] | None
) -> BorrowTag | None:
    """The borrow of a replica of `deployment`, as the pool Lease's `claim` records it (None:
    the Lease records no borrow from it). The copy on the Deployment must name the Lease's
    run: it is written in the same write as the scale, so it says the scale happened (a
    claim alone may be one whose scale was never written); everything else comes from the
    Lease. A claim of a version that kept the numbers on the Deployment (no `replicas`) is
    honoured with the copy its field manager wrote, as that version did: only the Lease,
    which no tenant writes, says which Deployment and run it is."""
    if claim is None or deployment is None:
        return None
    meta = deployment.get("metadata") or {}
    copy = read_tag(deployment)
    if (
        copy is None
        or (meta.get("namespace"), meta.get("name")) != (claim.namespace, claim.deployment)
        or workloads.kind_of(deployment).kind != claim.kind
        or (copy.profile_uid, copy.run) != (claim.profile_uid, claim.run)
    ):
        return None
    if claim.replicas is None:  # recorded by a previous version
        if not written_by_operator(deployment):
            return None
        return BorrowTag(claim.profile_uid, claim.profile, claim.run, copy.replicas,
                         claim.product, claim.at, copy.hold)  # fmt: skip
    return BorrowTag(claim.profile_uid, claim.profile, claim.run, claim.replicas,
                     claim.product, claim.at, claim.hold)  # fmt: skip


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


def _pod_labels(deployment: Mapping[str, Any]) -> list[Mapping[str, str]]:
    """The labels of each kind of pod of the workload (a LeaderWorkerSet's leaders and
    workers, each with the name label LWS puts on every pod of every group); the server's
    first."""
    extra: Mapping[str, str] = {}
    if workloads.kind_of(deployment).kind == workloads.LEADER_WORKER_SET:
        extra = (workloads.pod_selector(deployment) or {}).get("matchLabels") or {}
    found: list[Mapping[str, str]] = []
    for _, template in workloads.templates(deployment):
        found.append({**_meta(template).get("labels", {}), **extra})
    return found or [dict(extra)]


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object's name and labels, as far as they are what they should be (an object
    read here is a tenant's: an odd field reads as absent)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    return {"name": meta.get("name"), "labels": labels if isinstance(labels, Mapping) else {}}


def replicas_changed_by(deployment: Mapping[str, Any]) -> list[str]:
    """Managers other than the operator that own spec.replicas (who scaled it last)."""
    return sorted(
        {
            str(entry.get("manager"))
            for entry in (deployment.get("metadata") or {}).get("managedFields") or []
            if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
            and entry.get("manager") != FIELD_MANAGER
        }
    )


def kueue_queue_of(deployment: Mapping[str, Any]) -> str | None:
    """The Kueue queue a workload is managed under, None when it names none: the queue
    label on the workload itself (Kueue's Deployment, StatefulSet and LeaderWorkerSet
    integrations) or on any of its pod templates (its pod integration: a LeaderWorkerSet's
    leader and worker templates both)."""
    for labels in (_meta(deployment)["labels"], *_pod_labels(deployment)):
        queue = labels.get(L.LABEL_KUEUE_QUEUE)
        if isinstance(queue, str) and queue:
            return queue
    return None


def kueue_managed_refusal(deployment: Mapping[str, Any]) -> str | None:
    """Why no replica is ever borrowed from a workload Kueue manages (None: it names no
    Kueue queue). Not a matter of time, unlike the other refusals: what to do instead."""
    queue = kueue_queue_of(deployment)
    if queue is None:
        return None
    name = _meta(deployment)["name"]
    kind = workloads.kind_of(deployment).kind
    return (
        f"{kind} {name} is managed by Kueue (label {L.LABEL_KUEUE_QUEUE}: {queue}): "
        "its pods hold Kueue quota, so a borrowed replica's quota goes back to Kueue, "
        "which may give it to any workload, and the replica given back waits in queue "
        f"{queue} for its quota again; use capacity.mode Wait and give the profiling Job "
        "quota in Kueue (its own LocalQueue, or a ClusterQueue that can borrow in a cohort)"
    )


def pdb_covers(pdb: Mapping[str, Any], pod_labels: Mapping[str, str]) -> bool:
    """A PodDisruptionBudget covers pods with `pod_labels` (policy/v1): an empty selector
    (`selector: {}`) covers every pod of its namespace, an absent (null) one none."""
    selector = (pdb.get("spec") or {}).get("selector")
    if not isinstance(selector, Mapping):
        return False
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return True
    return matches_selector(selector, pod_labels)


def _unit(kind: str) -> str:
    """What one lent replica is, in words."""
    return "group" if kind == workloads.LEADER_WORKER_SET else "replica"


def borrow_refusal(
    deployment: Mapping[str, Any],
    capacity: CapacitySpec,
    pdbs: Iterable[Mapping[str, Any]],
    hpas: Iterable[Mapping[str, Any]],
) -> str | None:
    """Why one replica may not be borrowed from `deployment` now (None: it may). A
    StatefulSet lends its highest ordinal (its controller removes that pod on a scale
    down, whatever the update strategy); a LeaderWorkerSet lends one whole group (its
    size × GPUs, what a group clone of the same size needs)."""
    name = (deployment.get("metadata") or {}).get("name")
    kind = workloads.kind_of(deployment).kind
    unit = _unit(kind)
    managed = kueue_managed_refusal(deployment)
    if managed is not None:
        return managed
    if not deployment_rolled_out(deployment):
        return f"{kind} {name} is rolling out; borrowing waits until it is done"
    for hpa in hpas:
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if target.get("kind") == kind and target.get("name") == name:
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
    replicas = workloads.replicas(deployment)
    ready = workloads.ready_replicas(deployment)
    if replicas <= 1 and not capacity.allow_downtime:
        return (
            f"{name} has a single {unit}: borrowing it stops the server; set "
            "capacity.allowDowntime: true to allow that"
        )
    floor = capacity.min_available
    if floor is None:
        floor = max(replicas - 1, 1) if replicas > 1 else 0
    if ready - 1 < floor:
        return (
            f"{name} has {ready} ready {unit}s; borrowing one would leave fewer than "
            f"minAvailable {floor}"
        )
    pods = _pod_labels(deployment)
    for pdb in pdbs:
        if (
            any(pdb_covers(pdb, labels) for labels in pods)
            and int((pdb.get("status") or {}).get("disruptionsAllowed", 0)) < 1
        ):
            return (
                f"PodDisruptionBudget {pdb['metadata']['name']} allows no disruption of {name} now"
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
    current = workloads.replicas(deployment)
    name = (deployment.get("metadata") or {}).get("name")
    if current == tag.replicas - 1:
        unit = _unit(workloads.kind_of(deployment).kind)
        return GiveBack(tag.replicas, f"gave the borrowed {unit} back to {name}")
    if current == tag.replicas:
        return GiveBack(None, f"{name} already has its {tag.replicas} replicas back")
    return GiveBack(
        None,
        f"{name} was scaled to {current} replicas meanwhile (not {tag.replicas - 1}); left as "
        "is, the borrow record removed",
    )


def borrow_patch(deployment: Mapping[str, Any], tag: BorrowTag | None, replicas: int | None) -> Obj:
    """One JSON merge patch that writes (or removes, `tag` None) the record and sets the
    replicas together, conditional on the resourceVersion it was decided on: a crash can
    never leave a scale without its record, and a Deployment that changed since it was
    read is not written (409)."""
    meta = deployment.get("metadata") or {}
    patch: Obj = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {L.ANNOTATION_BORROWED: tag.to_annotation() if tag else None},
        }
    }
    if replicas is not None:
        patch["spec"] = {"replicas": replicas}
    return patch


# ----------------------------------------------------------------------------- the pool
# One borrow per GPU product at a time, cluster-wide: a Lease per product in the operator's
# own namespace, created only if absent (the API server decides between two passes, two
# workers or two operator replicas), and which no tenant can write.

POOL_LEASE_PREFIX = "sps-borrow-"
COMPONENT_POOL = "borrow-pool"
ANNOTATION_CLAIM = f"{LABEL_PREFIX}/borrow-claim"


@dataclass(frozen=True)
class PoolClaim:
    """Who borrows on a GPU product now, from which Deployment (the pool Lease's record:
    the truth of a borrow, in a namespace only the operator writes)."""

    namespace: str
    profile: str
    profile_uid: str
    run: str
    deployment: str
    product: str
    at: str
    # The lender's replicas before the borrow (None: a claim of a previous version, which
    # kept them on the Deployment), and the table hash whose rollout keeps the slot.
    replicas: int | None = None
    hold: str = ""
    kind: str = workloads.DEPLOYMENT  # the lender's (a claim without one: a Deployment)

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.profile}"


def pool_lease_name(product: str) -> str:
    return POOL_LEASE_PREFIX + digest(product, length=16)


def pool_lease(claim: PoolClaim, namespace: str) -> Obj:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": pool_lease_name(claim.product),
            "namespace": namespace,
            "labels": {L.LABEL_MANAGED_BY: L.MANAGED_BY, L.LABEL_COMPONENT: COMPONENT_POOL},
            "annotations": {ANNOTATION_CLAIM: claim_annotation(claim)},
        },
        "spec": {"holderIdentity": claim.holder[:MAX_HOLDER]},
    }


_CLAIM_TEXT = ("namespace", "profile", "profile_uid", "run", "deployment", "product", "at")


def claim_annotation(claim: PoolClaim) -> str:
    data = asdict(claim)
    if not claim.hold:
        data.pop("hold")
    if claim.kind == workloads.DEPLOYMENT:
        data.pop("kind")  # the same bytes as before kinds: a previous version reads them
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def read_claim(lease: Mapping[str, Any] | None) -> PoolClaim | None:
    text = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_CLAIM)
    data = read_json_object(text, max_bytes=MAX_TAG_BYTES, max_depth=1)
    if not readable(data):
        return None
    try:
        replicas = data.get("replicas")
        if replicas is not None and (type(replicas) is not int or not 0 < replicas <= MAX_REPLICAS):
            return None
        kind = str(data.get("kind") or workloads.DEPLOYMENT)
        if kind not in workloads.KINDS:
            return None  # a kind the operator never lends from
        return PoolClaim(**{k: str(data[k]) for k in _CLAIM_TEXT}, replicas=replicas,
                         hold=str(data.get("hold") or "")[:64], kind=kind)  # fmt: skip
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def same_run(claim: PoolClaim, uid: str, run: str) -> bool:
    return claim.profile_uid == uid and claim.run == run


# A namespace is a tenant boundary: a profile's status (which its namespace reads) names
# another run on the same GPU pool only when that run is in the same namespace.
ANOTHER_NAMESPACE = "a profile in another namespace"


def holder_seen_from(holder: str, viewer_namespace: str) -> str:
    """`holder` ("namespace/name") as a profile in `viewer_namespace` may read it."""
    return holder if holder.split("/", 1)[0] == viewer_namespace else ANOTHER_NAMESPACE


def borrowing_seen_from(claim: PoolClaim, viewer_namespace: str) -> str:
    """Who borrows on the pool now, as a profile in `viewer_namespace` may read it."""
    if claim.namespace != viewer_namespace:
        return f"{ANOTHER_NAMESPACE} is borrowing a replica on GPU product {claim.product}"
    return (
        f"{claim.holder} is borrowing a replica of {claim.deployment} on GPU product "
        f"{claim.product} (run {claim.run}, since {claim.at})"
    )


# ----------------------------------------------------------------------------- turns
# Several profiles waiting to borrow on one GPU product are served in priority order, then
# oldest first: the place of each is its run's pending pod, as the API server and the
# scheduler see it (spec.priority, resolved by admission from its PriorityClass, which the
# admin's jobPolicy bounds; the pod's creationTimestamp, the API server's clock). Status
# only says that a run waits for its turn; it never gives a place, so a profile's status
# (which its namespace may write) cannot jump the queue. This is the scheduler's own
# order, so no tenant gets more from it than its pods already get from the scheduler. One
# exception, the admin's bound (`PoolLine`): a first in line that leaves the free pool
# unused that long goes after the others; waiting while others hold the pool costs nothing.


@dataclass(frozen=True)
class PoolBid:
    """A run waiting for its turn to borrow on `product`."""

    holder: str  # namespace/name of the profile
    uid: str
    product: str
    priority: int
    since: str  # its pending pod's creationTimestamp

    @property
    def place(self) -> tuple[int, str, str]:
        return (-self.priority, self.since, self.uid)


def pool_bid(
    holder: str, uid: str, product: str, pods: Iterable[PodInfo], job: Mapping[str, Any] | None
) -> PoolBid | None:
    """The bid of a run whose Job is `job`: its oldest pending pod (None: no such pod, so
    no place in line). Only the Job's own pods count (`job_pods`), and only at the
    PriorityClass the operator gave the Job's pod template: a pod a tenant adds under the
    Job's UID gains nothing by a higher class."""
    template = (((job or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    klass = template.get("priorityClassName") or None
    pending = [
        pod
        for pod in job_pods(pods, job)
        if pod.unschedulable and not pod.deleting and not pod.node and pod.created
        and pod.priority_class == klass
    ]  # fmt: skip
    if not pending:
        return None
    first = min(pending, key=lambda pod: str(pod.created))
    return PoolBid(holder, uid, product, first.priority or 0, str(first.created))


def ahead_of(
    mine: PoolBid, bids: Iterable[PoolBid], stalled: Mapping[str, str] | None = None
) -> list[PoolBid]:
    """The bids served before `mine` on its GPU product, first first. A bid in `stalled`
    (a head of line that was offered the free pool and did not take it within the admin's
    bound, `PoolLine`) holds no one back any more: it goes after every bid that has not
    stalled, and stalled bids go in the order they stalled. Every pass orders the same bids
    the same way, so no two runs ever wait for each other."""
    marks = stalled or {}

    def place(bid: PoolBid) -> tuple[str, int, str, str]:
        return (marks.get(bid.uid, ""), *bid.place)

    return sorted(
        (
            b
            for b in bids
            if b.product == mine.product and b.uid != mine.uid and place(b) < place(mine)
        ),
        key=place,
    )


# A stall mark of a bid that left the line is kept for one bound after it left (a bid
# whose status stops saying poolTurn for one look and says it again, with the same pending
# pod, is not first again), at most this many per product: the oldest-left forgotten first.
# A mark takes the whole bound of an unused free pool to make, so this is never reached but
# by a line longer than any real one; memory stays bounded whatever bids come and go.
MAX_LEFT_MARKS = 1000


@dataclass(frozen=True)
class PoolLine:
    """What the operator remembers of the line on one GPU product between passes: which
    bid, first in line, has been offered the free pool since when, and which bids stalled
    (their profile's UID: when they were sent back). A bid that waits because another run
    holds the pool is never offered, so it keeps its place however long it waits; only a
    head of line that lets a free pool go unused for the whole bound (its pass no longer
    runs, or fails before it borrows) goes after the others. A stalled bid that leaves the
    line keeps its mark for one bound (`left`: since when it is gone): leaving for a look
    and coming back does not make it first again."""

    offered: str = ""  # the head's profile UID
    offered_at: str = ""  # RFC 3339
    stalled: Mapping[str, str] = field(default_factory=dict)
    left: Mapping[str, str] = field(default_factory=dict)  # stalled UID -> gone since

    def marks(self) -> dict[str, str]:
        """The stall marks of the bids in the line (`ahead_of`)."""
        return {uid: at for uid, at in self.stalled.items() if uid not in self.left}


def observe_line(
    line: PoolLine, bids: Iterable[PoolBid], pool_free: bool, now: str, expired_before: str
) -> PoolLine:
    """The line after a look at it at `now` (`bids`: the bids on its product; `pool_free`:
    no run holds the product's pool Lease; a head offered before `expired_before` stalled).
    A mark of a bid that left the line is forgotten once it has been gone for the bound
    (since `expired_before`)."""
    bids = list(bids)
    present = {b.uid for b in bids}
    left = {
        uid: line.left.get(uid, now)
        for uid in line.stalled
        if uid not in present and line.left.get(uid, now) > expired_before
    }
    if len(left) > MAX_LEFT_MARKS:
        left = dict(sorted(left.items(), key=lambda kv: (kv[1], kv[0]))[-MAX_LEFT_MARKS:])
    stalled = {uid: at for uid, at in line.stalled.items() if uid in present or uid in left}
    if not pool_free or not bids:
        return PoolLine(stalled=stalled, left=left)  # nobody is offered a pool that is held
    head = min(bids, key=lambda b: (stalled.get(b.uid, ""), *b.place))
    if line.offered != head.uid or not line.offered_at:
        return PoolLine(head.uid, now, stalled, left)
    if line.offered_at <= expired_before:
        return PoolLine(stalled={**stalled, head.uid: now}, left=left)
    return PoolLine(line.offered, line.offered_at, stalled, left)
