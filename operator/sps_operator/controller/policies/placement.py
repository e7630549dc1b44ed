"""The GPU product a Deployment runs on, from the pod→node and node→labels indexes (pure).

A Deployment whose rollout is complete and whose pods all run on one GPU product is
settled at once. Only while its pods are moving (a rollout spanning two pools, a label
that flaps: GPU feature discovery does that on some nodes) must an observation stay the
same for the debounce period before it counts. What was observed, and since when, lives in
status (`status.targets[].observedGpu`, `.observedSince`): a restarted operator continues
where it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sps_operator.api import labels as L
from sps_operator.controller.policies.claims import pod_claims
from sps_operator.controller.policies.selectors import matches_selector

# What the pod index keeps of the scheduler's and the kubelet's words, per pod (bounded:
# the index holds every pod of the watched namespaces).
MAX_POD_TEXT = 300
MAX_HASH = 64
# Container states that stop a pod from ever becoming ready without a change: the
# kubelet's own reasons.
STUCK_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
# A container's termination message is at most 4 KiB (the kubelet's bound); its tail
# carries the error.
MAX_EXIT_MESSAGE = 2048


@dataclass(frozen=True)
class PodInfo:
    """What the pod index keeps per pod."""

    name: str
    labels: Mapping[str, str]
    node: str | None
    deleting: bool = False
    phase: str | None = None
    unschedulable: str | None = None  # the scheduler's message while it cannot place the pod
    controller: str | None = None  # the kind of its controlling owner (ReplicaSet, Job, ...)
    # The UID of its controlling owner: a profiling run's pods are those of its Job's UID
    # (recorded in status), never those that carry its labels or the kind string "Job".
    controller_uid: str | None = None
    ready: bool = False  # condition Ready=True
    table_hash: str | None = None  # its annotation sps.dev/table-hash (the template's)
    stuck: str | None = None  # the kubelet's words for a container that cannot run
    # (container, its last words) for each container that exited with an error: its
    # termination message (the log's tail under FallbackToLogsOnError), bounded.
    exits: tuple[tuple[str, str], ...] = ()
    # Its priority as admission resolved it from its PriorityClass (spec.priority), and
    # when the API server created it: the order of profiles waiting on one GPU pool.
    priority: int | None = None
    created: str | None = None
    priority_class: str | None = None  # spec.priorityClassName (bounded)
    claims: tuple[str, ...] = ()  # the PersistentVolumeClaims it mounts (bounded)
    # Where its server answers (status.podIP, the kubelet's) and whose it is (its UID, the
    # key a server's /server_info report is cached under); hostNetwork: the pod's IP is
    # its node's, which the operator never calls (policies/confirm.py).
    uid: str | None = None
    ip: str | None = None
    host_network: bool = False
    # A profiling pod that failed or is being disrupted: the kubelet's or the evictor's
    # words (status reason and message, or the DisruptionTarget condition's).
    lost: str | None = None

    @property
    def profiling(self) -> bool:
        """A profiling Job's pod (never a Deployment's replica, whatever its labels say)."""
        ours = self.labels.get(L.LABEL_MANAGED_BY) == L.MANAGED_BY
        return self.controller == "Job" or (
            ours and self.labels.get(L.LABEL_COMPONENT) == L.COMPONENT_POD
        )


def _bounded(text: str, limit: int = MAX_POD_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stuck(status: Mapping[str, Any]) -> str | None:
    """A container the kubelet cannot start or keep running: its name, reason and words."""
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason")
        if reason not in STUCK_REASONS:
            continue
        text = f"container {cs.get('name')}: {reason}"
        if waiting.get("message"):
            text += f": {waiting['message']}"
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if last:
            text += (
                f" (last exit {last.get('exitCode')}"
                + (f" {last['reason']}" if last.get("reason") else "")
                + f", {cs.get('restartCount', 0)} restarts)"
            )
        return _bounded(text)
    return None


def _lost(status: Mapping[str, Any]) -> str | None:
    """Why a pod failed or is being taken away, in the words of whoever did it."""
    disruption = next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        ),
        None,
    )
    if disruption is not None:
        said = (
            f"{disruption.get('reason') or 'DisruptionTarget'}: {disruption.get('message') or ''}"
        )
        return _bounded(said.strip(": "))
    if status.get("phase") == "Failed" and (status.get("reason") or status.get("message")):
        return _bounded(f"{status.get('reason') or 'Failed'}: {status.get('message') or ''}")
    return None


def pod_info(name: str, labels: Mapping[str, str], spec: Mapping[str, Any],
             status: Mapping[str, Any], meta: Mapping[str, Any]) -> PodInfo:  # fmt: skip
    """What the operator keeps of a pod (the pod index's value)."""
    conditions = status.get("conditions") or []
    unschedulable = next(
        (
            _bounded(str(c.get("message") or c.get("reason") or "unschedulable"))
            for c in conditions
            if c.get("type") == "PodScheduled" and c.get("status") == "False"
        ),
        None,
    )
    refs = meta.get("ownerReferences") or []
    owner = next((o for o in refs if isinstance(o, Mapping) and o.get("controller")), None)
    controller = str(owner.get("kind")) if owner else None
    controller_uid = str(owner.get("uid"))[:MAX_HASH] if owner and owner.get("uid") else None
    priority_class = spec.get("priorityClassName")
    table_hash = (meta.get("annotations") or {}).get(L.ANNOTATION_TABLE_HASH)
    exits = []
    # Only a profiling pod's last words are read (a clone's refusal to start); the index
    # keeps no more of other pods.
    profiling_run = L.LABEL_RUN in labels
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        if not profiling_run:
            break
        state = (cs.get("state") or {}).get("terminated") or {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        ended = state if state.get("exitCode") else last
        if ended.get("exitCode"):
            words = str(ended.get("message") or ended.get("reason") or "")
            exits.append((str(cs.get("name")), words[-MAX_EXIT_MESSAGE:]))
    return PodInfo(
        name=name,
        labels=dict(labels),
        node=spec.get("nodeName"),
        deleting=bool(meta.get("deletionTimestamp")),
        phase=status.get("phase"),
        unschedulable=unschedulable,
        controller=controller,
        controller_uid=controller_uid,
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        table_hash=str(table_hash)[:MAX_HASH] if table_hash else None,
        stuck=_stuck(status),
        exits=tuple(exits),
        priority=_priority(spec.get("priority")),
        created=str(meta["creationTimestamp"])[:40] if meta.get("creationTimestamp") else None,
        claims=pod_claims(spec),
        priority_class=str(priority_class)[: MAX_HASH * 4] if priority_class else None,
        uid=str(meta["uid"])[:MAX_HASH] if meta.get("uid") else None,
        ip=str(status["podIP"])[:MAX_HASH] if status.get("podIP") else None,
        host_network=spec.get("hostNetwork") is True,
        lost=_lost(status) if profiling_run else None,
    )


def _priority(value: Any) -> int | None:
    """A pod's spec.priority (a 32-bit integer), None when absent or not one."""
    return value if type(value) is int and -(2**31) <= value < 2**31 else None


@dataclass(frozen=True)
class Placement:
    products: frozenset[str]
    pods: int  # pods on nodes counted
    unlabelled: int  # pods on nodes without the GPU label
    unseen: int = 0  # of those, pods on nodes the operator cannot read (no node in its cache)

    @property
    def product(self) -> str | None:
        return next(iter(self.products)) if len(self.products) == 1 else None

    @property
    def mixed(self) -> bool:
        return len(self.products) > 1


def placement(
    pod_selector: Mapping[str, Any],
    pods: Iterable[PodInfo],
    node_labels: Mapping[str, Mapping[str, str]],
    gpu_label: str,
) -> Placement:
    products: set[str] = set()
    counted = unlabelled = unseen = 0
    for pod in pods:
        if pod.deleting or not pod.node or pod.phase in ("Succeeded", "Failed"):
            continue
        if pod.profiling:  # a clone runs where it is pinned, not where the server runs
            continue
        if not matches_selector(pod_selector, pod.labels):
            continue
        counted += 1
        node = node_labels.get(pod.node)
        product = (node or {}).get(gpu_label)
        if product:
            products.add(product)
        else:
            unlabelled += 1
            unseen += node is None
    return Placement(frozenset(products), counted, unlabelled, unseen)


def unplaced_note(where: Placement, gpu_label: str) -> str | None:
    """Why pods that run tell no GPU product, when none of them does (None: some do, or
    none runs yet): the operator cannot read their nodes, or the nodes lack the label."""
    if where.products or not where.pods:
        return None
    if where.unseen:
        return (
            f"the operator cannot read the nodes its running pods ({where.pods}) are on, so "
            "it cannot tell their GPU product: grant it read access to Nodes (chart value "
            "rbac.nodeAccess: true)"
        )
    return (
        f"its running pods ({where.pods}) are on nodes without the label {gpu_label}: label "
        "the GPU nodes (NVIDIA GPU feature discovery does), or set spec.gpuProductLabel to "
        "the label they carry"
    )


MIXED = "<mixed>"


@dataclass(frozen=True)
class Settled:
    """What a Deployment's placement counts as now."""

    observed: str | None  # product, MIXED, or None (no pod on a labelled node)
    since: datetime  # when `observed` last changed
    product: str | None  # the settled product (None: moving, mixed or not placed)
    mixed: bool  # settled on several products


def settle(
    observed: str | None,
    previous: str | None,
    previous_since: datetime | None,
    now: datetime,
    debounce: timedelta,
    rollout_complete: bool,
) -> Settled:
    """Settle an observation: at once when the rollout is complete, else after it has
    stayed the same for `debounce`."""
    since = previous_since if observed == previous and previous_since is not None else now
    stable = rollout_complete or now - since >= debounce
    if observed is None or not stable:
        return Settled(observed, since, None, False)
    if observed == MIXED:
        return Settled(observed, since, None, True)
    return Settled(observed, since, observed, False)
