"""A run's GPUs: why it waits, borrowing a replica, giving it back (the capacity service).

The decisions are in `borrow.py`; this module reads the snapshot, writes through
`KubeApi`, and keeps `status.currentRun.waiting` / `.borrow` and `status.rolloutBorrow`
current. Every write to a lender is one conditional merge patch (record and replicas
together); the record on the Deployment is the truth a restarted operator continues from.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.reasons import (
    BORROW_BLOCKED,
    BORROW_UNDONE,
    KUEUE_DEACTIVATED,
    KUEUE_MANAGED_TARGET,
    KUEUE_NOT_INSTALLED,
    QUEUED_IN_KUEUE,
    REPLICA_BORROWED,
    REPLICA_HELD_FOR_ROLLOUT,
    REPLICA_RETURNED,
    WAITING_FOR_GPUS,
)
from sps_operator.api.result import clean_text
from sps_operator.api.spec import CapacityMode, RolloutMode
from sps_operator.api.status import (
    BorrowRecord,
    RunStatus,
    RunWaiting,
    TableRef,
    TargetState,
    TargetStatus,
)
from sps_operator.controller.capacity.gpupool import (
    claim_pool,
    hold_pool,
    lent_by,
    older_than,
    pool_claim,
    release_pool,
    sweep_pools,
)
from sps_operator.controller.capacity.memory import CapacityMemory
from sps_operator.controller.kube.client import Obj, api_error_detail
from sps_operator.controller.kube.kueue_cache import KueueCache
from sps_operator.controller.passes.state import Pass
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.policies import workloads as kinds
from sps_operator.controller.policies.borrow import (
    BorrowTag,
    PoolClaim,
    ahead_of,
    borrow_patch,
    borrow_refusal,
    give_back,
    holder_seen_from,
    kueue_managed_refusal,
    pool_bid,
    read_tag,
    replicas_changed_by,
)
from sps_operator.controller.policies.clocks import elapsed
from sps_operator.controller.policies.cost import add_cost, bounded_seconds, job_gpus
from sps_operator.controller.policies.deployments import max_unavailable, progress_deadline_seconds
from sps_operator.controller.policies.kueue import (
    POSITION_LIMIT,
    KueueState,
    kueue_deactivated,
    kueue_words,
    owned_workload,
    queue_position,
    queued_message,
    run_limit,
)
from sps_operator.controller.policies.run_job import job_pods
from sps_operator.controller.process.memories import PoolLines

log = logging.getLogger(__name__)

# A replica kept lent for a rollout goes back at the latest this long after the
# Deployment's own progress deadline.
HOLD_MARGIN = timedelta(seconds=60)
# A run waiting for its turn on a GPU pool looks again this often (a pool freed, or a run
# ahead that stopped waiting, wakes no one).
POOL_RECHECK_SECONDS = 15.0
# A pass reads at most this many pool Leases for copies of borrow records naming its
# profile (one per GPU product: a run borrows on one; the orphan sweep covers the rest).
MAX_POOLS_READ = 2
# A bound further than this is no bound (and a date that far away cannot be written).
MAX_BOUND_SECONDS = 365 * 24 * 3600.0


# ----------------------------------------------------------------------------- the wait


def _run_job(p: Pass, run: RunStatus) -> Mapping[str, Any] | None:
    """The run's Job: the one of the profile's Jobs whose UID the status records."""
    job = p.snapshot.jobs.get(run.job)
    uid = ((job or {}).get("metadata") or {}).get("uid")
    return job if uid and uid == run.job_uid else None


def _run_pods(p: Pass, run: RunStatus) -> list[Any]:
    """The pods of the run's Job (controller UID), not those carrying its labels."""
    return [pod for pod in job_pods(p.snapshot.pods, _run_job(p, run)) if not pod.deleting]


def _read_kueue(p: Pass, reads: KueueCache, job: Mapping[str, Any], queue: str) -> KueueState:
    """What the API says about `job`'s queue and Workload, in the profile's namespace
    only, read at most once per KUEUE_READ_SECONDS per Job. A failed read is said, never
    the pass's failure."""
    uid = str((job.get("metadata") or {}).get("uid") or "")
    key = (p.namespace, uid, queue)
    state = reads.get(key, p.now)
    if state is not None:
        return state
    try:
        workloads = p.kube.list_workloads(p.namespace, f"{L.LABEL_KUEUE_JOB_UID}={uid}")
        if workloads is None:
            state = KueueState(installed=False)
        else:
            workload = owned_workload(workloads, p.namespace, uid)
            exists = p.kube.get("LocalQueue", p.namespace, queue) is not None
            position, note = (
                _read_position(p, queue, workload) if exists and workload else (None, None)
            )
            state = KueueState(
                queue_exists=exists,
                words=kueue_words(workload),
                deactivated=kueue_deactivated(workload),
                position=position,
                position_note=note,
            )
    except Exception as exc:  # RBAC not granted (an older chart), the API unavailable
        state = KueueState(unreadable=clean_text(api_error_detail(exc), 200))
    reads.put(key, p.now, state)
    return state


def _read_position(
    p: Pass, queue: str, workload: Mapping[str, Any]
) -> tuple[tuple[int, int] | None, str | None]:
    """Where Kueue's visibility API places `workload` in LocalQueue `queue` (and why that
    is not known, when it is not simply "not pending"). That API is an aggregated API
    server in Kueue's manager: it may be absent, unavailable or not granted; none of that
    is the pass's failure."""
    name = str((workload.get("metadata") or {}).get("name") or "")
    try:
        summary = p.kube.pending_workloads(p.namespace, queue, POSITION_LIMIT)
    except Exception as exc:
        return None, f"Kueue's visibility API: {clean_text(api_error_detail(exc), 200)}"
    if summary is None:
        return None, "Kueue's visibility API (pendingworkloads) is not served"
    position = queue_position(summary, name)
    items = summary.get("items")
    if position is None and isinstance(items, list) and len(items) >= POSITION_LIMIT:
        return None, f"not among the first {POSITION_LIMIT} pending in LocalQueue {queue}"
    return position, None


def _queue_position(p: Pass, reads: KueueCache, job: Mapping[str, Any]) -> int | None:
    """The suspended Job's position in its ClusterQueue, as last read (1 first)."""
    queue = ((job.get("metadata") or {}).get("labels") or {}).get(L.LABEL_KUEUE_QUEUE)
    if not queue or not (job.get("spec") or {}).get("suspend"):
        return None
    position = _read_kueue(p, reads, job, str(queue)).position
    return position[0] if position is not None else None


def _waiting_now(
    p: Pass, reads: KueueCache, run: RunStatus, job: Mapping[str, Any]
) -> tuple[str, str] | None:
    """(reason, message) when the run's Job cannot run yet; None when it runs."""
    if (job.get("spec") or {}).get("suspend"):
        queue = ((job.get("metadata") or {}).get("labels") or {}).get(L.LABEL_KUEUE_QUEUE)
        if not queue:
            return QUEUED_IN_KUEUE, f"Job {run.job} is suspended until its suspension admits it"
        p.wake_within(p.settings.kueue_recheck_seconds)
        return queued_message(run.job, str(queue), _read_kueue(p, reads, job, str(queue)))
    pods = _run_pods(p, run)
    # A group clone runs when every one of its pods does: one unplaced pod holds it back.
    unplaced = next((pod for pod in pods if pod.unschedulable), None)
    if unplaced is not None:
        message = f"no node can take it now: {unplaced.unschedulable}"
        if len(pods) > 1:
            message = f"pod {unplaced.name} of the group: {message}"
        # The Job's own note when the target's ReadWriteOnce claims pin it to one node.
        pin = ((job.get("metadata") or {}).get("annotations") or {}).get(L.ANNOTATION_VOLUME_PIN)
        return WAITING_FOR_GPUS, message + (f"; {str(pin)[:300]}" if pin else "")
    return None


def close_segment(p: Pass, run: RunStatus) -> None:
    """The run's Job stopped running (preempted, phase done, run over): its GPUs times the
    seconds it ran go to the run's and the profile's cost, and the run's clock stops."""
    if run.running_since is not None and run.gpus:
        bound = p.spec.job.active_deadline_seconds + p.spec.capacity.wait_timeout_seconds
        seconds = run.gpus * bounded_seconds(run.running_since, p.now, bound)
        run.gpu_seconds = round((run.gpu_seconds or 0.0) + seconds, 3)
        p.status.cost = add_cost(p.status.cost, run.gpu_product, gpu_seconds=seconds)
    run.running_since = run.gpus = None


def follow_wait(
    p: Pass, memory: CapacityMemory, run: RunStatus, job: Mapping[str, Any]
) -> str | None:
    """Keep `run.waiting` current, borrow a replica when allowed, give it back as soon as
    the Job stops running on it; returns why the run must fail (it waited too long), else
    None."""
    now = p.now
    capacity = p.spec.capacity
    if run.borrow is not None:
        _check_undone(p, run)
    waiting = _waiting_now(p, memory.kueue_reads, run, job)
    if waiting is None:
        if any(pod.node for pod in _run_pods(p, run)):
            if run.running_since is None:
                run.running_since, run.gpus = cond.rfc3339(now), job_gpus(job)
            if run.borrow is not None:
                run.borrow.used = True
        if run.waiting is not None:
            since = run.waiting.since
            p.metrics.gpu_wait(p.ref, elapsed(since, now), wait=f"{run.name}@{since}")
            run.waiting = None
        return None
    reason, message = waiting
    close_segment(p, run)  # the run's own deadline counts from when it runs again
    suspended = reason != WAITING_FOR_GPUS  # QueuedInKueue, or a Kueue reason
    if run.borrow is not None and (suspended or run.borrow.used):
        # Kueue suspended (preempted) the Job, or its pod lost the lent GPUs: the lender
        # gets its replica back now, not when the run ends.
        what = "Kueue suspended the Job" if suspended else "its pod is pending again"
        return_for_run(p, run, why=f"{what} after it ran on the lent GPUs")
        message += "; the lent replica was given back"
    if reason == WAITING_FOR_GPUS and capacity.mode == CapacityMode.BORROW_REPLICA:
        managed = _kueue_managed(p, run) if run.borrow is None else None
        if managed is not None:
            # Not a matter of time, unlike BorrowBlocked: said from the first wait (and in
            # the failure when the wait runs out); the run waits as under Wait.
            reason, message = KUEUE_MANAGED_TARGET, f"{managed} ({message})"
    since = run.waiting.since if run.waiting is not None else cond.rfc3339(now)
    waited = elapsed(since, now)
    if reason in (KUEUE_NOT_INSTALLED, KUEUE_DEACTIVATED):
        # Nothing will ever unsuspend the Job: the run ends now, not after the timeout.
        run.waiting = RunWaiting(reason=reason, message=message, since=since)
        return message
    if waited >= capacity.wait_timeout_seconds:
        p.metrics.gpu_wait(p.ref, waited, wait=f"{run.name}@{since}")
        return (
            f"the Job waited {waited:.0f} s for GPUs of {run.gpu_product} "
            f"(capacity.waitTimeoutSeconds {capacity.wait_timeout_seconds}): {message}"
        )
    p.wake_within(capacity.wait_timeout_seconds - waited)
    pool_turn = False
    if (
        reason == WAITING_FOR_GPUS
        and capacity.mode == CapacityMode.BORROW_REPLICA
        and run.borrow is None
    ):
        if run.borrow_undone:
            reason, message = BORROW_BLOCKED, f"{run.borrow_undone} ({message})"
        elif waited < capacity.borrow_after_seconds:
            p.wake_within(capacity.borrow_after_seconds - waited)
        else:
            refusal = _borrow(p, memory.pool_lines, run)
            if refusal is not None:
                reason, message = BORROW_BLOCKED, f"{refusal} ({message})"
                pool_turn = isinstance(refusal, PoolTurn)
                if pool_turn:
                    # The pool frees without an event this profile watches.
                    p.wake_within(POOL_RECHECK_SECONDS)
    position = _queue_position(p, memory.kueue_reads, job) if reason == QUEUED_IN_KUEUE else None
    run.waiting = RunWaiting(
        reason=reason,
        message=message,
        since=since,
        queue_position=position,
        pool_turn=pool_turn or None,
    )
    return None


# ----------------------------------------------------------------------------- borrowing


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


def _own_tag(p: Pass, dep: Mapping[str, Any] | None, run: str) -> BorrowTag | None:
    """The borrow of a replica of `dep` by `run` of this profile, as its pool Lease records
    it (the copy on `dep` only says which Lease to read)."""
    hint = read_tag(dep) if dep is not None else None
    if hint is None or hint.profile_uid != p.ref.uid or hint.run != run:
        return None  # (no Lease read for a copy that names another run)
    tag = lent_by(p, dep)
    return tag if tag is not None and tag.profile_uid == p.ref.uid and tag.run == run else None


def job_labels(p: Pass) -> dict[str, str]:
    """The labels a run's Job carries beside the operator's own: the admin's defaults,
    then the profile's (as `profiling_job` merges them)."""
    return {**p.settings.job_defaults.labels, **(p.spec.job.labels or {})}


def _lent(p: Pass, deployment: str, replicas: int, at: str) -> BorrowRecord:
    """The status record of a replica lent to the current run, with how long it may stay
    lent (the run's limit, counted from when its Job runs) and what sets that."""
    limit, source = run_limit(p.spec.job.active_deadline_seconds, job_labels(p))
    return BorrowRecord(
        deployment=deployment, replicas=replicas, at=at, limit_seconds=limit, limit=source
    )


def reattach_borrow(p: Pass, run: RunStatus) -> None:
    """The record on the Deployment is the truth: a borrow written just before a crash
    (status never said so) is this run's borrow, never a reason to borrow again."""
    if run.borrow is not None or run.target in p.returned:
        return  # (a record this pass removed is still in its snapshot)
    tag = _own_tag(p, _lenders(p).get(run.target), run.name)
    if tag is not None and not tag.hold:
        run.borrow = _lent(p, run.target, tag.replicas, tag.at)


def _kueue_managed(p: Pass, run: RunStatus) -> str | None:
    """Why the run's target is never borrowed from: Kueue manages it (None: it does not)."""
    target = p.target(run.target)
    return kueue_managed_refusal(target.deployment) if target is not None else None


class PoolTurn(str):
    """A refusal to borrow that is only a matter of turn on the GPU product's pool."""


def _turn(p: Pass, lines: PoolLines, run: RunStatus) -> PoolTurn | None:
    """Why this run must let others borrow on its GPU product first (None: its turn):
    waiting runs are served by their pending pod's priority, then the oldest pod; a head
    of line that let the free pool go unused for the admin's bound goes after the others."""
    mine = pool_bid(f"{p.namespace}/{p.ref.name}", p.ref.uid, run.gpu_product, p.snapshot.pods,
                    _run_job(p, run))  # fmt: skip
    if mine is None:
        return None
    bound = min(p.settings.max_pool_turn_seconds, MAX_BOUND_SECONDS)
    expired = cond.rfc3339(p.now - timedelta(seconds=bound))
    bids = [b for b in p.snapshot.pool_bids if b.product == mine.product and b.uid != mine.uid]
    free = pool_claim(p, run.gpu_product) is None
    stalled = lines.look(mine.product, [*bids, mine], free, cond.rfc3339(p.now), expired)
    first = ahead_of(mine, bids, stalled)
    if not first:
        return None
    more = f", and {len(first) - 1} more" if len(first) > 1 else ""
    ahead = holder_seen_from(first[0].holder, p.namespace)
    if ahead == first[0].holder:
        # Its priority and its pod's age are details of its namespace: said only there.
        ahead += f" (priority {first[0].priority}, waiting since {first[0].since})"
    if mine.uid in stalled:
        more += (
            f"; this run was first in line with the pool free for {bound:.0f} s (the admin's "
            "bound, chart borrowPolicy.maxPoolTurnSeconds) and did not borrow: runs that "
            "did not stall go first"
        )
    return PoolTurn(
        f"its turn to borrow on GPU product {run.gpu_product} comes after {ahead}{more}: "
        f"waiting runs are served by their pod's priority, then oldest first (this run: "
        f"priority {mine.priority}, since {mine.since})"
    )


def _borrow(p: Pass, lines: PoolLines, run: RunStatus) -> str | None:
    """Take one replica out of the run's target; None when done, else why not."""
    target = p.target(run.target)
    if target is None:
        return f"target {run.target} is gone"
    dep = target.deployment
    refusal = borrow_refusal(dep, p.spec.capacity, p.snapshot.pdbs, p.snapshot.hpas)
    if refusal is not None:
        return refusal
    recorded = lent_by(p, dep)
    if recorded is not None:
        # Never a record over a record: the one there is given back first.
        return (
            f"{kinds.kind_of(dep).kind} {run.target} still records a replica lent to run "
            f"{recorded.run} of {recorded.profile}; it is given back first"
        )
    turn = _turn(p, lines, run)
    if turn is not None:
        return turn
    replicas = kinds.replicas(dep)
    kind = kinds.kind_of(dep).kind
    claim = PoolClaim(
        p.namespace, p.ref.name, p.ref.uid, run.name, run.target, run.gpu_product,
        cond.rfc3339(p.now), replicas, kind=kind,
    )  # fmt: skip
    busy = claim_pool(p, claim)
    if busy is not None:
        return PoolTurn(busy)
    tag = BorrowTag(p.ref.uid, p.ref.name, run.name, replicas, run.gpu_product, claim.at)
    try:
        # The record and the scale in one write, on the workload as it was read (a
        # StatefulSet's controller then removes its highest ordinal, a LeaderWorkerSet's
        # its last group).
        p.kube.patch_lender(p.namespace, run.target, borrow_patch(dep, tag, replicas - 1),
                            kind=kind)  # fmt: skip
    except ApiException as exc:
        release_pool(p, run.gpu_product, p.ref.uid, run.name)
        if exc.status == 409:
            return f"{kind} {run.target} changed while borrowing; trying again"
        raise
    run.borrow = _lent(p, run.target, replicas, tag.at)
    p.event(
        "Normal",
        REPLICA_BORROWED,
        f"borrowed one of {replicas} replicas of {run.target} for run {run.name} "
        f"({run.gpu_product} had no free GPUs)",
    )
    return None


def _check_undone(p: Pass, run: RunStatus) -> None:
    """Someone else scaled the lender while its replica was lent (a GitOps self-heal, a
    person, an autoscaler): say so, leave their count alone, borrow no more this run."""
    assert run.borrow is not None
    dep = _lenders(p).get(run.borrow.deployment)
    tag = _own_tag(p, dep, run.name)
    if dep is None or tag is None:
        return  # not (yet) seen with our record: nothing to judge on
    current = int((dep.get("spec") or {}).get("replicas", 1))
    if current == tag.replicas - 1:
        return
    who = ", ".join(replicas_changed_by(dep)) or "someone else"
    message = (
        f"{kinds.kind_of(dep).kind} {run.borrow.deployment} was scaled to {current} replicas "
        f"by {who} while "
        f"one of its {tag.replicas} was lent to run {run.name}: something undoes the borrow (a "
        "GitOps self-heal, an autoscaler, a person), so this run borrows no more. Use "
        "capacity.mode Wait, or stop managing spec.replicas there (docs/capacity.md)"
    )
    p.event("Warning", BORROW_UNDONE, message)
    return_for_run(p, run, why="the borrow was undone")
    run.borrow_undone = message


def _return(
    p: Pass,
    deployment: Mapping[str, Any],
    tag: BorrowTag,
    why: str = "",
    record: bool = True,
) -> bool:
    """Give the replica back (replicas restored only if nobody changed them) and remove
    the record (`record`: it is ours to remove); False when the Deployment changed since it
    was read (the next pass tries again)."""
    name = str((deployment.get("metadata") or {}).get("name"))
    if name in p.returned:
        return True  # the snapshot still shows the record this pass removed
    action = give_back(deployment, tag)
    if record:
        patch: Obj | None = borrow_patch(deployment, None, action.replicas)
    elif action.replicas is not None:
        version = (deployment.get("metadata") or {}).get("resourceVersion")
        patch = {"metadata": {"resourceVersion": version}, "spec": {"replicas": action.replicas}}
    else:
        patch = None
    if patch is not None:
        try:
            p.kube.patch_lender(p.namespace, name, patch,
                                kind=kinds.kind_of(deployment).kind)  # fmt: skip
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status != 404:
                raise
    p.returned.add(name)
    if tag.profile_uid == p.ref.uid:
        # Lent from the borrow until now, at most as long as a borrow can last: the wait,
        # the run, the rollout hold.
        bound = (
            p.spec.capacity.wait_timeout_seconds
            + p.spec.job.active_deadline_seconds
            + min(
                progress_deadline_seconds(deployment, p.settings.workload_progress_seconds)
                + HOLD_MARGIN.total_seconds(),
                p.settings.max_rollout_hold_seconds,
            )
        )
        lent = bounded_seconds(tag.at, p.now, bound)
        p.status.cost = add_cost(p.status.cost, tag.product, lent_seconds=lent)
    note = action.note + (f" ({why})" if why else "")
    if tag.replicas == 1:
        note += f"; the server was down {elapsed(tag.at, p.now):.0f} s (allowDowntime)"
    p.event("Normal", REPLICA_RETURNED, note)
    return True


def return_for_run(p: Pass, run: RunStatus, table: TableRef | None = None, why: str = "") -> None:
    """Give back what `run` borrowed (the run ends, or the Job stopped running on it). With
    the table the run just published, the replica stays lent for that table's rollout
    when the rollout needs the slot (`_hold_for_rollout`)."""
    if run.borrow is None:
        return
    borrow = run.borrow
    dep = _lenders(p).get(borrow.deployment)
    tag = _own_tag(p, dep, run.name)
    if (
        table is not None
        and dep is not None
        and tag is not None
        and _hold_for_rollout(p, run, dep, tag, table)
    ):
        run.borrow = None
        return
    returned = True
    if dep is not None:
        # Without our record on it (removed by hand, or never seen): trust status, and
        # touch no record that is not ours.
        fallback = BorrowTag(p.ref.uid, p.ref.name, run.name, borrow.replicas,
                             run.gpu_product, borrow.at)  # fmt: skip
        returned = _return(p, dep, tag or fallback, why=why, record=tag is not None)
    if returned:
        release_pool(p, run.gpu_product, p.ref.uid, run.name)
    run.borrow = None


def _hold_for_rollout(
    p: Pass, run: RunStatus, dep: Mapping[str, Any], tag: BorrowTag, table: TableRef
) -> bool:
    """Keep the replica lent after the run when the new table is about to be rolled onto
    the lender and that rollout can start no new pod before an old one is gone
    (maxUnavailable 0): on a full pool the slot the run used is the only surge slot. The
    rollout then runs one replica short, exactly what the borrow allowed (minAvailable),
    and the replica comes back once the table runs on every pod."""
    target = p.target(str((dep.get("metadata") or {}).get("name")))
    if (
        p.spec.rollout.mode == RolloutMode.DISABLED
        or p.status.rollout_borrow is not None
        or target is None
        or not target.usable
        or (target.gpu, target.fingerprint) != (table.gpu_product, table.fingerprint)
        or target.running_hash == table.hash
        or max_unavailable(dep, tag.replicas) != 0
    ):
        return False
    # The Lease first (the truth), then the copy people read.
    if not hold_pool(p, run.gpu_product, p.ref.uid, run.name, table.hash):
        return False
    try:
        p.kube.patch_lender(p.namespace, target.name,
                            borrow_patch(dep, replace(tag, hold=table.hash), None),
                            kind=kinds.kind_of(dep).kind)  # fmt: skip
    except ApiException as exc:
        if exc.status in (404, 409):
            return False
        raise
    assert run.borrow is not None
    p.status.rollout_borrow = run.borrow.model_copy(
        update={
            "run": run.name,
            "table": table.hash,
            "held_since": cond.rfc3339(p.now),
            "gpu_product": run.gpu_product,
        }
    )
    p.event(
        "Normal",
        REPLICA_HELD_FOR_ROLLOUT,
        f"one of {tag.replicas} replicas of {target.name} stays lent to the rollout of table "
        f"{table.config_map}: it starts no new pod before an old one is gone (maxUnavailable "
        "0), so the slot run "
        f"{run.name} used is its surge slot; the replica comes back when the table runs on "
        "every pod",
    )
    return True


def follow_rollout_borrow(p: Pass, statuses: Sequence[TargetStatus]) -> None:
    """The rollout step's part: give a replica kept lent for a rollout back once that
    rollout is done (or no longer ours, or past the Deployment's progress deadline); say
    so on the target meanwhile."""
    held = p.status.rollout_borrow
    if held is None:
        return
    dep = _lenders(p).get(held.deployment)
    ts = next((t for t in statuses if t.deployment == held.deployment), None)
    product = held.gpu_product or ""
    if dep is None:
        release_pool(p, product, p.ref.uid, held.run or "")
        p.status.rollout_borrow = None
        return
    limit = min(
        timedelta(seconds=progress_deadline_seconds(dep, p.settings.workload_progress_seconds))
        + HOLD_MARGIN,
        timedelta(seconds=p.settings.max_rollout_hold_seconds),
    )
    why = None
    if ts is None:
        why = "it is no longer a target of this profile"
    elif ts.hash != held.table:
        why = f"it no longer rolls table hash {held.table}"
    elif ts.state == TargetState.LIVE:
        why = "the new table runs on every ready pod"
    elif older_than(held.held_since, p.now, limit):
        why = (
            f"its rollout did not complete within {limit.total_seconds():.0f} s (the "
            "Deployment's progressDeadlineSeconds, or the admin's --workload-progress-seconds "
            "for the other kinds, and a margin, at most the admin's bound, "
            "chart borrowPolicy.maxRolloutHoldSeconds)"
        )
    if why is None:
        assert ts is not None
        note = (
            f"one of its {held.replicas} replicas stays lent to this rollout (since "
            f"{held.held_since}): on a full pool its slot is the surge slot"
        )
        ts.message = f"{ts.message}; {note}" if ts.message else note
        waited = elapsed(held.held_since, p.now)
        p.wake_within(max(limit.total_seconds() - waited, 1.0))
        return
    tag = _own_tag(p, dep, held.run or "")
    fallback = BorrowTag(p.ref.uid, p.ref.name, held.run or "", held.replicas, product, held.at)
    if not _return(p, dep, tag or fallback, why=why, record=tag is not None):
        return
    release_pool(p, product, p.ref.uid, held.run or "")
    p.status.rollout_borrow = None
    if ts is not None and ts.state == TargetState.LIVE:
        # Live on every ready pod; the returned replica's pod is still to start.
        ts.state, ts.rolled_out = TargetState.ROLLING, False
        ts.message = f"the table runs on every ready pod; the lent replica is coming back ({why})"


def return_orphans(p: Pass, memory: CapacityMemory) -> None:
    """Give back what the pool Lease says was lent to a run of this profile that no longer
    runs (nor holds the slot for its rollout), found through the copies on the namespace's
    Deployments; re-attach a borrow whose status was lost; then, at most once a minute for
    the whole operator, look for orphaned pool Leases (a profile gone, a copy removed)."""
    run = p.status.current_run
    held = p.status.rollout_borrow
    products: set[str] = set()
    for name, dep in sorted(_lenders(p).items()):
        hint = read_tag(dep)
        if hint is None or hint.profile_uid != p.ref.uid or name in p.returned:
            continue  # (a record this pass removed is still in its snapshot)
        products.add(hint.product)
        if len(products) > MAX_POOLS_READ:
            break  # copies anyone may write must not buy API reads: the sweep does the rest
        tag = lent_by(p, dep)
        if tag is None:
            continue  # no pool Lease records it: a copy is no borrow
        if tag.profile_uid == p.ref.uid:
            if run is not None and tag.run == run.name:
                reattach_borrow(p, run)
                continue
            if held is not None and tag.run == held.run:
                continue
            if tag.hold and held is None and run is None:
                # The slot was kept for a rollout and status lost it: keep following it.
                p.status.rollout_borrow = held = BorrowRecord(
                    deployment=name, replicas=tag.replicas, at=tag.at, used=True, run=tag.run,
                    table=tag.hold, held_since=cond.rfc3339(p.now), gpu_product=tag.product,
                )  # fmt: skip
                continue
            if _return(p, dep, tag, why=f"run {tag.run} is over"):
                release_pool(p, tag.product, tag.profile_uid, tag.run)
    sweep_pools(p, memory.pool_sweep)
