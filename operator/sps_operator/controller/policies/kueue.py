"""What Kueue says about a run's suspended Job (pure: the reads are in `capacity.py`).

Kueue keeps a Workload per Job it queues, in the Job's namespace, labelled with the Job's
UID (`kueue.x-k8s.io/job-uid`) and owned by it; its conditions say in Kueue's words why
the Job is not admitted ("couldn't assign flavors to pod set main: insufficient quota
for nvidia.com/gpu in flavor h100, ..."). That text comes from another controller and
from whoever can write Workloads in the namespace: it is only shown, bounded and without
control characters, and only from a Workload of the profile's namespace that the run's
Job owns (the label finds it; it never proves anything).

Why read on demand and not watch: Workloads carry none of the operator's labels, so a kopf
index would hold (and handle every status change of) every Workload of the cluster, each
batch job's, to learn about the few Jobs this operator queued; and whether Kueue is served
at all would hang on kopf noticing CRDs come and go (with every handler held while a newly
found resource is indexed). A LIST of one Job's Workloads by label, only while that Job is
suspended under a queue label, at most once per `KUEUE_READ_SECONDS` per Job
(`kube.kueue_cache.KueueCache`), costs O(queued runs), answers "is Kueue served" (a 404 on
the LIST) and "what does it say", and never depends on the CRD at start-up. The price:
Kueue's words may be up to `KUEUE_RECHECK_SECONDS` old (the Job's unsuspension, which the
Job watch sees, still wakes the profile at once). The one watch on Kueue is an event
handler for LocalQueue creations (no cache: nothing waits for it; kopf serves it once the
CRD exists), which wakes the runs of that namespace waiting in LocalQueueMissing at once.
The queue position comes from Kueue's visibility API (`pendingworkloads` of the LocalQueue,
an aggregated API server in Kueue's manager), read with the Workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.labels import KUEUE_GROUP, max_exec_seconds
from sps_operator.api.reasons import (
    KUEUE_DEACTIVATED,
    KUEUE_NOT_INSTALLED,
    LOCAL_QUEUE_MISSING,
    QUEUED_IN_KUEUE,
)
from sps_operator.api.result import clean_text

WORDS_LIMIT = 512  # characters of Kueue's message kept in status
# A queued run's profile is looked at again this often: Kueue's words change without an
# event the operator watches (a Job's unsuspension is one: that wakes it at once).
KUEUE_RECHECK_SECONDS = 30.0


@dataclass(frozen=True)
class KueueState:
    """What the API says about a suspended Job's queue: the API group not served
    (`installed` False), the LocalQueue missing (`queue_exists` False), and Kueue's own
    words on the Job's Workload (None: no Workload yet, or nothing to say). `unreadable`:
    why it could not be read (then nothing else is known)."""

    installed: bool = True
    queue_exists: bool = True
    words: str | None = None
    unreadable: str | None = None
    # Kueue deactivated the Workload (maximum execution time, requeuing limit, a rejected
    # admission check): it never admits it again. Kueue's words.
    deactivated: str | None = None
    # Where Kueue's visibility API places the Workload: (in its ClusterQueue, in the
    # LocalQueue), 1 first; None when not known (`position_note` says why, if it is not
    # simply that the Workload is not pending).
    position: tuple[int, int] | None = None
    position_note: str | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def owned_workload(
    workloads: Iterable[Any], namespace: str, job_uid: str
) -> Mapping[str, Any] | None:
    """The Workload of the Job with UID `job_uid` in `namespace`: in that namespace, with a
    controller ownerReference to the Job; the newest if several (Kueue replaces a Workload
    it finished with)."""
    if not namespace or not job_uid:
        return None
    owned = []
    for workload in workloads:
        if not isinstance(workload, Mapping):
            continue
        meta = _meta(workload)
        refs = meta.get("ownerReferences")
        if meta.get("namespace") != namespace or not isinstance(refs, list):
            continue
        if any(
            isinstance(ref, Mapping)
            and ref.get("controller") is True
            and ref.get("kind") == "Job"
            and ref.get("apiVersion") == "batch/v1"
            and ref.get("uid") == job_uid
            for ref in refs
        ):
            owned.append(workload)
    return max(owned, key=lambda w: str(_meta(w).get("creationTimestamp") or ""), default=None)


def _condition(workload: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    status = workload.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == type_:
            return c
    return None


def _one_line(value: Any, limit: int) -> str:
    """`value` as one printable line (a newline in status could pass for another line of
    `kubectl sps explain`) of at most `limit` characters; "" for no text."""
    return clean_text(" ".join(value.split()), limit) if isinstance(value, str) else ""


def kueue_words(workload: Mapping[str, Any] | None) -> str | None:
    """Why Kueue does not let the Job run, in its words: an eviction (preempted, not
    ready in time), else the QuotaReserved or Admitted condition that is not True; None
    when it says nothing. Bounded, without control characters."""
    if workload is None:
        return None
    evicted = _condition(workload, "Evicted")
    found: list[tuple[str, Mapping[str, Any]]] = []
    if evicted is not None and evicted.get("status") == "True":
        found.append(("evicted", evicted))
    for type_ in ("QuotaReserved", "Admitted"):
        c = _condition(workload, type_)
        if c is not None and c.get("status") != "True":
            found.append((type_, c))
    for what, c in found:
        text = _one_line(c.get("message"), WORDS_LIMIT) or _one_line(c.get("reason"), 64)
        if text:
            return f"{what}: {text}"
    return None


def kueue_deactivated(workload: Mapping[str, Any] | None) -> str | None:
    """Kueue's words when it deactivated the Workload (`spec.active: false`, or the
    DeactivationTarget condition it sets first), else None. Bounded, one line."""
    if workload is None:
        return None
    spec = workload.get("spec")
    target = _condition(workload, "DeactivationTarget")
    targeted = target is not None and target.get("status") == "True"
    if not targeted and not (isinstance(spec, Mapping) and spec.get("active") is False):
        return None
    for c in (target, _condition(workload, "Evicted")):
        if c is None or c.get("status") != "True":
            continue
        reason = _one_line(c.get("reason"), 64)
        message = _one_line(c.get("message"), WORDS_LIMIT)
        text = f"{reason}: {message}" if reason and message else reason or message
        if text:
            return text
    return "the Workload is inactive (spec.active false)"


POSITION_LIMIT = 200  # pending workloads read from the visibility API per LocalQueue
_MAX_POSITION = 10_000_000


def queue_position(summary: Any, workload: str) -> tuple[int, int] | None:
    """The Workload `workload`'s (ClusterQueue, LocalQueue) position, 1 first, in a
    LocalQueue's pending workloads as Kueue's visibility API lists them; None when it is
    not among them or the answer is not one."""
    items = summary.get("items") if isinstance(summary, Mapping) else None
    if not workload or not isinstance(items, list):
        return None
    for item in items[: POSITION_LIMIT * 2]:
        if not isinstance(item, Mapping) or _meta(item).get("name") != workload:
            continue
        cluster, local = item.get("positionInClusterQueue"), item.get("positionInLocalQueue")
        if (
            type(cluster) is int
            and type(local) is int
            and 0 <= cluster < _MAX_POSITION
            and 0 <= local < _MAX_POSITION
        ):
            return cluster + 1, local + 1
        return None
    return None


def run_limit(deadline: int, labels: Mapping[str, Any]) -> tuple[int, str]:
    """How long a run may run, counted from when its Job runs (and so how long a replica
    lent to it stays lent), and what sets it: spec.job.activeDeadlineSeconds, or Kueue's
    maximum execution time on the Job when that is shorter."""
    kueue = max_exec_seconds(labels)
    if kueue is not None and kueue < deadline:
        return kueue, f"the Job's label {L.LABEL_KUEUE_MAX_EXEC}"
    return deadline, "spec.job.activeDeadlineSeconds"


def queued_message(job: str, queue: str, state: KueueState) -> tuple[str, str]:
    """(reason, message) for a Job suspended under Kueue queue `queue`."""
    if not state.installed:
        return KUEUE_NOT_INSTALLED, (
            f"Job {job} names Kueue queue {queue} (label kueue.x-k8s.io/queue-name), but the "
            f"API group {KUEUE_GROUP} is not served in this cluster, so nothing will ever "
            "admit it: install Kueue, or remove the queue label (the operator's "
            "jobDefaults.labels, or this profile's spec.job.labels)"
        )
    if state.deactivated:
        return KUEUE_DEACTIVATED, (
            f"Kueue deactivated the Workload of Job {job} (queue {queue}), so it will not "
            f"admit it again; Kueue says {state.deactivated}"
        )
    said = f"; Kueue says {state.words}" if state.words else ""
    if not state.queue_exists:
        return LOCAL_QUEUE_MISSING, (
            f"Job {job} names Kueue queue {queue}, but this namespace has no LocalQueue "
            f"{queue}, so Kueue admits nothing from it: create the LocalQueue (pointing at a "
            f"ClusterQueue with quota for the GPU product), or name an existing one{said}"
        )
    if state.unreadable:
        said = f" (Kueue's Workload could not be read: {state.unreadable})"
    elif not said:
        said = " (Kueue has not reported on its Workload yet)"
    if state.position is not None:
        cluster, local = state.position
        said += f"; position {cluster} in its ClusterQueue ({local} in LocalQueue {queue})"
    elif state.position_note:
        said += f"; position unknown: {state.position_note}"
    return QUEUED_IN_KUEUE, f"Job {job} is suspended until Kueue queue {queue} admits it{said}"
