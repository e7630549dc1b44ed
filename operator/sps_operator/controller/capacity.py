"""A run's GPUs: why it waits, borrowing a replica, giving it back (steps of a pass).

The decisions are in `borrow.py`; this module reads the snapshot, writes through
`KubeApi`, and keeps `status.currentRun.waiting` / `.borrow` current.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.models import BorrowRecord, CapacityMode, RunStatus, RunWaiting
from sps_operator.controller import conditions as cond
from sps_operator.controller.borrow import (
    BORROW_BLOCKED,
    QUEUED_IN_KUEUE,
    WAITING_FOR_GPUS,
    BorrowTag,
    borrow_refusal,
    give_back,
    pool_borrows,
    read_tag,
    seconds_between,
)
from sps_operator.controller.state import Pass

EV_BORROWED = "ReplicaBorrowed"
EV_RETURNED = "ReplicaReturned"


def _waiting_now(p: Pass, run: RunStatus, job: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when the run's Job cannot run yet; None when it runs."""
    if (job.get("spec") or {}).get("suspend"):
        queue = ((job.get("metadata") or {}).get("labels") or {}).get(L.LABEL_KUEUE_QUEUE)
        where = f"Kueue queue {queue}" if queue else "its suspension"
        return QUEUED_IN_KUEUE, f"Job {run.job} is suspended until {where} admits it"
    pods = [
        pod
        for pod in p.snapshot.pods
        if pod.labels.get(L.LABEL_RUN) == run.name
        and pod.labels.get(L.LABEL_COMPONENT) == L.COMPONENT_POD
        and not pod.deleting
    ]
    if pods and all(pod.unschedulable for pod in pods):
        return WAITING_FOR_GPUS, f"no node can take it now: {pods[0].unschedulable}"
    return None


def follow_wait(p: Pass, run: RunStatus, job: Mapping[str, Any]) -> str | None:
    """Keep `run.waiting` current, borrow a replica when allowed; returns why the run
    must fail (it waited too long), else None."""
    now = p.now
    capacity = p.spec.capacity
    waiting = _waiting_now(p, run, job)
    if waiting is None:
        if run.waiting is not None:
            p.metrics.gpu_wait(p.ref, seconds_between(run.waiting.since, now))
            run.waiting = None
        return None
    reason, message = waiting
    since = run.waiting.since if run.waiting is not None else cond.rfc3339(now)
    waited = seconds_between(since, now)
    if waited >= capacity.wait_timeout_seconds:
        p.metrics.gpu_wait(p.ref, waited)
        return (
            f"the Job waited {waited:.0f} s for GPUs of {run.gpu_product} "
            f"(capacity.waitTimeoutSeconds {capacity.wait_timeout_seconds}): {message}"
        )
    p.wake_within(capacity.wait_timeout_seconds - waited)
    if (
        reason == WAITING_FOR_GPUS
        and capacity.mode == CapacityMode.BORROW_REPLICA
        and run.borrow is None
    ):
        if waited < capacity.borrow_after_seconds:
            p.wake_within(capacity.borrow_after_seconds - waited)
        else:
            refusal = _borrow(p, run)
            if refusal is not None:
                reason, message = BORROW_BLOCKED, f"{refusal} ({message})"
    run.waiting = RunWaiting(reason=reason, message=message, since=since)
    return None


def _borrow(p: Pass, run: RunStatus) -> str | None:
    """Take one replica out of the run's target; None when done, else why not."""
    target = p.target(run.target)
    if target is None:
        return f"Deployment {run.target} is gone"
    dep = target.deployment
    refusal = borrow_refusal(
        dep,
        p.spec.capacity,
        p.snapshot.pdbs,
        p.snapshot.hpas,
        pool_borrows(p.snapshot.borrowed, run.gpu_product),
        run.name,
    )
    if refusal is not None:
        return refusal
    replicas = int((dep.get("spec") or {}).get("replicas", 1))
    tag = BorrowTag(p.ref.uid, p.ref.name, run.name, replicas, run.gpu_product, cond.rfc3339(p.now))
    meta = dep.get("metadata") or {}
    patch = {
        "metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {L.ANNOTATION_BORROWED: tag.to_annotation()},
        }
    }
    try:
        # The record first: a restart between the two writes finds it and gives back.
        p.kube.patch_metadata("Deployment", p.namespace, run.target, patch)
    except ApiException as exc:
        if exc.status == 409:
            return f"Deployment {run.target} changed while borrowing; trying again"
        raise
    p.kube.scale(p.namespace, run.target, replicas - 1)
    run.borrow = BorrowRecord(deployment=run.target, replicas=replicas, at=tag.at)
    p.event(
        "Normal",
        EV_BORROWED,
        f"borrowed one of {replicas} replicas of {run.target} for run {run.name} "
        f"({run.gpu_product} had no free GPUs)",
    )
    return None


def _return(p: Pass, deployment: Mapping[str, Any], tag: BorrowTag) -> None:
    name = str((deployment.get("metadata") or {}).get("name"))
    if name in p.returned:
        return  # the snapshot still shows the record this pass removed
    p.returned.add(name)
    action = give_back(deployment, tag)
    if action.replicas is not None:
        p.kube.scale(p.namespace, name, action.replicas)
    p.kube.patch_metadata(
        "Deployment",
        p.namespace,
        name,
        {"metadata": {"annotations": {L.ANNOTATION_BORROWED: None}}},
    )
    note = action.note
    if tag.replicas == 1:
        note += f"; the server was down {seconds_between(tag.at, p.now):.0f} s (allowDowntime)"
    p.event("Normal", EV_RETURNED, note)


def _lenders(p: Pass) -> dict[str, Mapping[str, Any]]:
    """Deployments of the profile's namespace that carry a borrow record, by name, whether
    or not the profile still selects them (a relabelled lender must get its replica back),
    plus the current targets."""
    lenders: dict[str, Mapping[str, Any]] = {t.name: t.deployment for t in p.targets}
    for dep in p.snapshot.borrowed:
        meta = dep.get("metadata") or {}
        if meta.get("namespace") in (None, p.namespace) and meta.get("name"):
            lenders[str(meta["name"])] = dep
    return lenders


def return_for_run(p: Pass, run: RunStatus) -> None:
    """The run ends (whatever the outcome): give back what it borrowed."""
    if run.borrow is None:
        return
    dep = _lenders(p).get(run.borrow.deployment)
    tag = read_tag(dep) if dep is not None else None
    if dep is not None and tag is not None and tag.run == run.name:
        _return(p, dep, tag)
    elif dep is not None:
        # The record did not make it onto the Deployment (or was removed): trust status.
        fallback = BorrowTag(
            p.ref.uid, p.ref.name, run.name, run.borrow.replicas, run.gpu_product, run.borrow.at
        )
        _return(p, dep, fallback)
    run.borrow = None


def return_orphans(p: Pass) -> None:
    """Give back what a Deployment says was lent to a run of this profile that no longer
    runs; re-attach a borrow of the current run that status lost (a restart between the
    record and the status write)."""
    run = p.status.current_run
    for name, dep in sorted(_lenders(p).items()):
        tag = read_tag(dep)
        if tag is None or tag.profile_uid != p.ref.uid:
            continue
        if run is not None and tag.run == run.name:
            if run.borrow is None:
                run.borrow = BorrowRecord(deployment=name, replicas=tag.replicas, at=tag.at)
            continue
        _return(p, dep, tag)
