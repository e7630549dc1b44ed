"""Profiling where GPUs are scarce (issue 12): why a run waits, BorrowReplica, giving
back whatever happens."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from api_snapshot import api_snapshot
from capacity_harness import (
    BORROW,
    NO_GPU,
    harness,
    job_owner,
    job_pod,
    local_queue,
    start_waiting,
)
from controller_harness import H100, NODES, NS, Harness, deployment, profile_body
from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.api.spec import CapacitySpec
from sps_operator.controller.finalizer import release
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.borrow import (
    BorrowTag,
    PoolClaim,
    borrow_patch,
    borrow_refusal,
    kueue_managed_refusal,
    pool_lease,
)
from sps_operator.controller.policies.job_policy import JobPolicy, NameRule
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.reconcile.reconciler import Reconciler


def test_a_run_that_cannot_get_gpus_says_so_and_gives_up_after_its_timeout() -> None:
    h = harness(capacity={"waitTimeoutSeconds": 600})
    start_waiting(h)
    run = h.status()["currentRun"]
    assert run["waiting"]["reason"] == "WaitingForGPUs" and NO_GPU in run["waiting"]["message"]
    assert h.condition("Profiling")[:2] == ("False", "WaitingForGPUs")
    assert h.condition("Ready")[:2] == ("False", "WaitingForGPUs")
    h.tick(300)
    assert h.run_pass()["currentRun"]["waiting"]["since"] == run["waiting"]["since"]
    h.tick(301)
    status = h.run_pass()
    assert status.get("currentRun") is None
    assert status["lastFailure"]["reason"] == "WaitingForGPUs"
    assert "waited 601 s" in status["lastFailure"]["message"]


def test_a_named_kueue_queue_creates_the_job_suspended_and_says_it_is_queued() -> None:
    h = harness(job={"labels": {L.LABEL_KUEUE_QUEUE: "gpu-profiling"}, "priorityClassName": "low"})
    local_queue(h)
    h.tick()
    h.run_pass()
    (job,) = h.kube.kinds("Job")
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][L.LABEL_KUEUE_QUEUE] == "gpu-profiling"
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"][L.LABEL_KUEUE_QUEUE] == "gpu-profiling"
    assert pod["spec"]["priorityClassName"] == "low"
    h.tick()
    waiting = h.run_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "QueuedInKueue" and "gpu-profiling" in waiting["message"]


def test_the_operators_own_labels_cannot_be_overridden() -> None:
    labels = {L.LABEL_RUN: "evil", "team": "a"}
    refused = harness(job={"labels": labels})
    refused.tick()
    failure = refused.run_pass()["lastFailure"]
    assert failure["reason"] == "JobPolicy" and "jobPolicy.labelKeys" in failure["message"]
    # Even where the admin lifts the reservation, the operator's own labels win.
    lifted = JobPolicy(label_keys=NameRule(("*", "sps.dev/*")))
    h = Harness.one_target(Settings(gpu_debounce_seconds=0, isolate_fits=False, policy=lifted))
    h.add(profile_body(job={"labels": labels}))
    h.tick()
    h.run_pass()
    (job,) = h.kube.kinds("Job")
    labels = job["metadata"]["labels"]
    assert labels["team"] == "a" and labels[L.LABEL_RUN] == h.status()["currentRun"]["name"]


def test_borrow_replica_scales_down_profiles_and_gives_the_replica_back() -> None:
    h = harness(**BORROW)
    start_waiting(h)
    assert not h.kube.scales  # the grace period first
    h.tick(30)
    status = h.run_pass()
    assert h.kube.scales == [("server", 1)]
    tag = json.loads(h.kube.obj("Deployment", "server")["metadata"]["annotations"][
        L.ANNOTATION_BORROWED])  # fmt: skip
    assert tag["replicas"] == 2 and tag["run"] == status["currentRun"]["name"]
    assert status["currentRun"]["borrow"]["replicas"] == 2
    assert "ReplicaBorrowed" in [e[0] for e in h.kube.events]
    job_pod(h, unschedulable=None)  # the freed GPU takes it
    h.finish()
    status = h.settle(passes=5)
    assert status["tables"] and h.kube.scales[-1] == ("server", 2)
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 2
    assert L.ANNOTATION_BORROWED not in dep["metadata"]["annotations"]
    assert h.condition("Ready")[0] == "True"


def test_a_failed_run_gives_the_replica_back_too() -> None:
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    h.finish(result={"data": {"status": "failed", "message": "boom"}}, ok=False)
    h.tick()
    h.run_pass()
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2


def blocked_by(h: Harness) -> str:
    start_waiting(h)
    h.tick(30)
    waiting = h.run_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "BorrowBlocked" and not h.kube.scales, waiting
    return str(waiting["message"])


def test_borrowing_refuses_a_pdb_an_hpa_a_gitops_owner_a_single_replica_and_a_busy_pool() -> None:
    h = harness(**BORROW)
    h.add({"kind": "PodDisruptionBudget", "metadata": {"name": "keep-two"},
           "spec": {"selector": {"matchLabels": {"deploy": "server"}}, "minAvailable": 2},
           "status": {"disruptionsAllowed": 0}})  # fmt: skip
    assert "PodDisruptionBudget keep-two allows no disruption" in blocked_by(h)

    h = harness(**BORROW)
    h.add({"kind": "HorizontalPodAutoscaler", "metadata": {"name": "auto"},
           "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "server"}}})  # fmt: skip
    assert "HorizontalPodAutoscaler auto manages the replicas" in blocked_by(h)

    h = harness(**BORROW)
    h.kube.obj("Deployment", "server")["metadata"]["managedFields"] = [
        {"manager": "argocd-controller", "operation": "Apply",
         "fieldsV1": {"f:spec": {"f:replicas": {}}}}
    ]  # fmt: skip
    assert "owned by argocd-controller (server-side apply)" in blocked_by(h)

    h = harness(replicas=1, **BORROW)
    assert "single replica" in blocked_by(h)

    h = harness(capacity={**BORROW["capacity"], "minAvailable": 2})
    assert "fewer than minAvailable 2" in blocked_by(h)

    # Another profile (another namespace) borrows on the same GPU product: its pool Lease.
    h = harness(**BORROW)
    someone = h.add(profile_body("someone") | {"metadata": {"name": "someone", "namespace": "b"}})
    claim = PoolClaim("b", "someone", someone["metadata"]["uid"], "someone-run", "lender",
                      H100, "2026-03-01T11:59:00Z")  # fmt: skip
    h.add(pool_lease(claim, h.settings.pool_namespace))
    someone["status"] = {"currentRun": {"name": "someone-run"}}
    # ... named only as "another namespace": a namespace is a tenant boundary.
    message = blocked_by(h)
    assert "a profile in another namespace is borrowing a replica on GPU product" in message
    assert "someone" not in message and "lender" not in message and "b/" not in message


def test_borrowing_refuses_a_deployment_kueue_manages_at_once_with_its_own_reason() -> None:
    # Kueue's pod/Deployment integration: the queue label on the Deployment ...
    h = harness(**BORROW)
    h.kube.obj("Deployment", "server")["metadata"]["labels"][L.LABEL_KUEUE_QUEUE] = "serving"
    start_waiting(h)  # said at the first wait, not only once borrowAfterSeconds is over
    waiting = h.status()["currentRun"]["waiting"]
    assert waiting["reason"] == "KueueManagedTarget"
    message = waiting["message"]
    assert "managed by Kueue (label kueue.x-k8s.io/queue-name: serving)" in message
    assert "use capacity.mode Wait and give the profiling Job quota in Kueue" in message
    assert NO_GPU in message  # and the scheduler's own words
    assert h.condition("Profiling")[:2] == ("False", "KueueManagedTarget")
    h.tick(30)
    assert h.run_pass()["currentRun"]["waiting"]["reason"] == "KueueManagedTarget"
    assert not h.kube.scales and h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    # The run waits for a free GPU as under Wait, and gives up with that reason.
    h.tick(3600)
    failure = h.run_pass()["lastFailure"]
    assert failure["reason"] == "KueueManagedTarget" and "managed by Kueue" in failure["message"]
    assert not h.kube.scales
    # ... or only on its pod template.
    dep = deployment()
    dep["spec"]["replicas"] = 2
    dep["spec"]["template"]["metadata"]["labels"][L.LABEL_KUEUE_QUEUE] = "serving"
    refusal = borrow_refusal(dep, CapacitySpec(mode="BorrowReplica"), [], [])
    assert refusal is not None and "managed by Kueue" in refusal
    assert kueue_managed_refusal(dep) == refusal
    del dep["spec"]["template"]["metadata"]["labels"][L.LABEL_KUEUE_QUEUE]
    assert kueue_managed_refusal(dep) is None


def test_a_single_replica_is_borrowed_only_with_allow_downtime() -> None:
    h = harness(replicas=1, capacity={**BORROW["capacity"], "allowDowntime": True})
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    assert h.kube.scales == [("server", 0)]
    job_pod(h, unschedulable=None)
    h.finish()
    h.tick(90)
    h.settle(passes=4)
    assert h.kube.scales[-1] == ("server", 1)
    (note,) = [m for r, m in h.kube.events if r == "ReplicaReturned"]
    down = re.search(r"the server was down (\d+) s \(allowDowntime\)", note)
    assert down is not None and 90 <= int(down.group(1)) <= 95, note
    # Scaled back only once the template runs the new table: the server restarts once.
    assert h.kube.applied and h.kube.metadata_patches[-1][2]["spec"] == {"replicas": 1}
    assert h.running_hash() == h.status()["tables"][0]["hash"]


def test_a_restart_after_the_record_but_before_the_status_still_gives_back() -> None:
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    # The operator dies before status records the borrow: only the Deployment knows.
    run = h.kube.obj("SpsProfile", "p")["status"]["currentRun"]
    run.pop("borrow")
    h.reconciler = type(h.reconciler)(h.kube, h.settings, clock=lambda: h.now)  # type: ignore[misc]
    h.tick()
    assert h.run_pass()["currentRun"]["borrow"]["replicas"] == 2  # re-attached
    job_pod(h, unschedulable=None)
    h.finish()
    h.settle()
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 2 and L.ANNOTATION_BORROWED not in dep["metadata"][
        "annotations"]  # fmt: skip
    # A record whose run is gone (ended while the operator was down) is given back too.
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    h.kube.obj("SpsProfile", "p")["status"]["currentRun"] = None
    h.kube.obj("SpsProfile", "p")["spec"]["suspend"] = True  # no new run starts
    h.reconciler = type(h.reconciler)(h.kube, h.settings, clock=lambda: h.now)  # type: ignore[misc]
    h.tick()
    h.run_pass()
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2


def test_a_deleted_profile_gives_back_and_someone_elses_scale_wins() -> None:
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    assert h.kube.kinds("Lease")
    release(h.kube, NS, "p", uid, pool_namespace=h.settings.pool_namespace)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.kube.kinds("Lease")  # the pool is free at once

    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    h.kube.obj("Deployment", "server")["spec"]["replicas"] = 5  # scaled by a human meanwhile
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    release(h.kube, NS, "p", uid, pool_namespace=h.settings.pool_namespace)
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 5 and L.ANNOTATION_BORROWED not in dep["metadata"][
        "annotations"]  # fmt: skip


def test_the_wait_ends_when_the_job_runs_and_status_no_longer_says_it_waits() -> None:
    # The status is written as a JSON merge patch: a field of currentRun that is dropped
    # must be sent as null, or the API keeps it (and the run "waits" forever).
    h = harness(**BORROW)
    start_waiting(h)
    assert h.status()["currentRun"]["waiting"]["reason"] == "WaitingForGPUs"
    job_pod(h, unschedulable=None)  # scheduled
    for _ in range(3):
        h.tick()
        run = h.run_pass()["currentRun"]
        assert "waiting" not in run, run
        assert h.condition("Profiling")[:2] == ("True", "NoTable")
    assert h.reconciler is not None
    registry = h.reconciler.metrics.registry
    assert (
        registry.get_sample_value("sps_gpu_wait_seconds_count", {"namespace": NS}) == 1.0
    )  # one wait, observed once


def test_a_pass_that_reads_the_status_from_before_the_wait_ended_counts_it_once() -> None:
    # Another writer's change can reach the cache before this pass's status write does: the
    # next pass then reads the old status (still waiting) under a newer resourceVersion,
    # and ends the same wait again (e2e capacity saw the count at 2).
    h = harness(**BORROW)
    start_waiting(h)
    waiting_status = copy.deepcopy(h.kube.obj("SpsProfile", "p")["status"])
    job_pod(h, unschedulable=None)  # scheduled
    h.tick()
    h.run_pass()
    profile = h.kube.obj("SpsProfile", "p")
    profile["status"] = waiting_status
    meta = profile["metadata"]
    meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 100)
    h.tick()
    h.run_pass()
    assert h.reconciler is not None
    registry = h.reconciler.metrics.registry
    assert registry.get_sample_value("sps_gpu_wait_seconds_count", {"namespace": NS}) == 1.0


def test_a_deployment_no_longer_selected_mid_borrow_still_gets_its_replica_back() -> None:
    # The lender is found by its borrow record, not among the profile's current targets: a
    # relabelled (or otherwise dropped) Deployment is not left scaled down.
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 1
    h.kube.obj("Deployment", "server")["metadata"]["labels"] = {"app": "something-else"}
    job_pod(h, unschedulable=None)
    h.finish()
    h.settle()
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 2
    assert L.ANNOTATION_BORROWED not in (dep["metadata"].get("annotations") or {})
    assert [m for r, m in h.kube.events if r == "ReplicaReturned"]


def test_a_suspended_job_with_the_job_controllers_condition_is_queued_not_finished() -> None:
    # The Job controller marks a suspended Job with the condition Suspended=True: that is
    # not an end of the Job (the run once ignored the Job and never said it was queued).
    h = harness(job={"labels": {L.LABEL_KUEUE_QUEUE: "gpu-profiling"}})
    local_queue(h)
    h.tick()
    h.run_pass()
    (job,) = h.kube.kinds("Job")
    job["status"] = {
        "conditions": [
            {"type": "Suspended", "status": "True", "reason": "JobSuspended",
             "message": "Job suspended"}
        ]
    }  # fmt: skip
    h.tick()
    run = h.run_pass()["currentRun"]
    assert run["waiting"]["reason"] == "QueuedInKueue", run
    assert h.condition("Profiling")[:2] == ("False", "QueuedInKueue")


# ----------------------------------------------------------------------------- crashes


class Crash(BaseException):
    """The operator killed (SIGKILL) at a write: nothing after it happens in that pass,
    not even the status write (a pass turns every Exception into status; not this)."""


WRITES = ("create", "delete", "apply", "patch_metadata", "patch_lender", "scale",
          "patch_status")  # fmt: skip


def kill_at(h: Harness, write: int | None, after: bool) -> list[str]:
    """Make the `write`-th write (0-based) of the fake API crash, before or after it takes
    effect; returns the log of writes made."""
    made: list[str] = []
    for name in WRITES:
        original = getattr(h.kube, name, None)
        if original is None:
            continue

        def wrapper(*args: Any, _call: Any = original, _name: str = name, **kwargs: Any) -> Any:
            index = len(made)
            made.append(_name)
            if index == write and not after:
                raise Crash(_name)
            result = _call(*args, **kwargs)
            if index == write and after:
                raise Crash(_name)
            return result

        setattr(h.kube, name, wrapper)
    return made


def borrow_lifecycle(replicas: int, capacity: dict[str, Any], write: int | None,
                     after: bool) -> tuple[Harness, list[str], list[int]]:  # fmt: skip
    """A whole borrow (lend, profile, publish, roll, give back) with the operator killed at
    one write and restarted from what the API holds; returns the Deployment's replicas as
    they changed."""
    h = harness(replicas=replicas, capacity={**BORROW["capacity"], **capacity})
    start_waiting(h)
    h.tick(30)
    made = kill_at(h, write, after)
    history = [replicas]

    def step(action: Any) -> None:
        try:
            action()
        except Crash:
            for name in WRITES:  # the restarted operator: the API as it was left
                h.kube.__dict__.pop(name, None)
            h.reconciler = Reconciler(h.kube, h.settings, clock=lambda: h.now)
            kill_at(h, None, after)  # (keeps counting nothing)
            h.tick()
            action()
        now = h.kube.obj("Deployment", "server")["spec"]["replicas"]
        if now != history[-1]:
            history.append(now)

    def one_pass() -> None:
        h.tick()
        h.run_pass()

    step(one_pass)  # borrows
    job_pod(h, unschedulable=None)
    step(one_pass)
    h.finish()
    for _ in range(6):
        step(one_pass)
    return h, made, history


def test_an_operator_killed_at_any_write_of_a_borrow_lends_one_replica_once() -> None:
    """A restart after the scale-down but before the status write once borrowed a second
    replica (3 → 1 → 2; with allowDowntime 2 → 0 → 1). Killed before or after each write
    of a whole borrow, the restarted operator continues from the Deployment's record: one
    replica lent, once, and given back."""
    for replicas, capacity in ((3, {}), (2, {"allowDowntime": True})):
        _, writes, _ = borrow_lifecycle(replicas, capacity, None, False)
        assert "patch_status" in writes
        for write in range(len(writes)):
            for after in (False, True):
                where = f"{replicas} replicas, killed {'after' if after else 'before'} write "
                where += f"{write} ({writes[write]})"
                h, _, history = borrow_lifecycle(replicas, capacity, write, after)
                assert history == [replicas, replicas - 1, replicas], where
                dep = h.kube.obj("Deployment", "server")
                assert L.ANNOTATION_BORROWED not in dep["metadata"]["annotations"], where
                assert not h.kube.kinds("Lease"), where
                status = h.status()
                assert status["tables"] and not status.get("currentRun"), where
                assert not status.get("rolloutBorrow"), where
                assert h.condition("Ready")[:2] == ("True", "TableLive"), where


# ----------------------------------------------------------------------------- records


def forged(profile_uid: str, run: str, replicas: int) -> str:
    record = {"profile_uid": profile_uid, "profile": "p", "run": run, "replicas": replicas}
    return json.dumps({**record, "product": H100, "at": "2026-03-01T00:00:00Z"})


def test_a_forged_borrow_record_blocks_nothing_and_is_never_acted_on() -> None:
    """Anyone who may annotate a Deployment could once block BorrowReplica on a GPU
    product for the whole cluster, or make the operator scale a Deployment up: a record
    the operator's own field manager did not write is ignored."""
    h = harness(**BORROW)
    other = deployment("other", labels={"app": "other"})
    other["metadata"]["annotations"] = {L.ANNOTATION_BORROWED: forged("x", "r", 3)}
    h.add(other)
    # On the target itself: "lent to an old run of this profile", one replica more.
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    server = h.kube.obj("Deployment", "server")
    server["metadata"]["annotations"] = {L.ANNOTATION_BORROWED: forged(uid, "old-run", 3)}
    start_waiting(h)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2  # not scaled up
    h.tick(30)
    status = h.run_pass()
    assert status["currentRun"]["borrow"]["replicas"] == 2, status["currentRun"]
    assert h.kube.scales == [("server", 1)]


def test_a_borrow_left_by_a_deleted_profile_is_given_back_by_its_pool_lease() -> None:
    """A profile whose finalizer was removed by hand left its lender one replica short
    forever: the operator's sweep of pool Leases gives it back. A record on a Deployment
    that no pool Lease names is no borrow: nothing acts on it (issue 33 §1)."""
    for leased in (False, True):
        h = harness(**BORROW)
        lender = deployment("lender", labels={"app": "other"})
        lender["spec"]["replicas"] = 1
        h.add(lender)
        tag = BorrowTag("uid-gone", "gone", "gone-1", 2, H100, "2026-03-01T12:00:00Z")
        record = {"metadata": {"annotations": {L.ANNOTATION_BORROWED: tag.to_annotation()}}}
        h.kube.patch_metadata("Deployment", NS, "lender", record)  # the operator wrote it
        if leased:
            claim = PoolClaim(NS, "gone", "uid-gone", "gone-1", "lender", H100, tag.at, 2)
            h.add(pool_lease(claim, h.settings.pool_namespace))
        h.tick(600)
        h.run_pass()
        lender = h.kube.obj("Deployment", "lender")
        assert lender["spec"]["replicas"] == (2 if leased else 1)
        assert (L.ANNOTATION_BORROWED in lender["metadata"]["annotations"]) is not leased
        notes = [m for r, m in h.kube.events if r == "ReplicaReturned"]
        assert len(notes) == leased and all("uid-gone) no longer exists" in n for n in notes)


def test_an_orphaned_pool_lease_in_another_namespace_is_swept_and_its_replica_returned() -> None:
    h = harness(**BORROW)
    lender = deployment("lender")
    lender["metadata"]["namespace"] = "tenant-b"
    lender["spec"]["replicas"] = 1
    h.add(lender)
    tag = BorrowTag("uid-gone", "gone", "gone-1", 2, H100, "2026-03-01T12:00:00Z")
    dep = h.kube.obj("Deployment", "lender", "tenant-b")
    h.kube.patch_lender("tenant-b", "lender", borrow_patch(dep, tag, None))
    claim = PoolClaim("tenant-b", "gone", "uid-gone", "gone-1", "lender", H100, tag.at, 2)
    h.add(pool_lease(claim, h.settings.pool_namespace))
    h.tick()
    h.run_pass()  # the first pass of the process sweeps: the profile is gone
    lender = h.kube.obj("Deployment", "lender", "tenant-b")
    assert lender["spec"]["replicas"] == 2
    assert L.ANNOTATION_BORROWED not in lender["metadata"]["annotations"]
    assert not h.kube.kinds("Lease")


# ----------------------------------------------------------------------------- races


def waiting_profile(h: Harness, namespace: str, name: str) -> dict[str, Any]:
    """A second full pool in `namespace`: a Deployment and a BorrowReplica profile."""
    dep = deployment(f"{name}-server")
    dep["metadata"]["namespace"] = namespace
    dep["spec"]["replicas"] = 2
    h.add(dep)
    h.kube.roll(h.kube.obj("Deployment", f"{name}-server", namespace))
    h.place(f"{name}-server", count=2)
    body = profile_body(name, **BORROW)
    body["metadata"]["namespace"] = namespace
    return h.add(body)


def test_two_profiles_borrowing_on_one_gpu_product_at_the_same_moment_take_turns() -> None:
    h = harness(**BORROW)
    other = waiting_profile(h, "tenant-b", "q")
    assert h.reconciler is not None
    h.tick()
    h.run_pass()
    h.reconciler.reconcile(copy.deepcopy(other), api_snapshot(h.kube, other, h.pods_now(), NODES))
    for profile, namespace in (("p", NS), ("q", "tenant-b")):
        run = h.kube.obj("SpsProfile", profile, namespace)["status"]["currentRun"]["name"]
        labels = {L.LABEL_RUN: run, L.LABEL_COMPONENT: L.COMPONENT_POD}
        h.pods.append(PodInfo(f"{run}-x", labels, None, unschedulable=NO_GPU,
                              **job_owner(h, profile, namespace)))  # fmt: skip
    h.tick()
    h.run_pass()
    h.reconciler.reconcile(copy.deepcopy(other), api_snapshot(h.kube, other, h.pods_now(), NODES))
    h.tick(31)
    other = h.kube.obj("SpsProfile", "q", "tenant-b")
    seen_before = api_snapshot(h.kube, other, h.pods_now(), NODES)  # q's caches, before p borrows
    h.run_pass()
    h.reconciler.reconcile(copy.deepcopy(other), seen_before)
    assert h.kube.scales == [("server", 1)]  # p borrowed; q did not
    waiting = h.kube.obj("SpsProfile", "q", "tenant-b")["status"]["currentRun"]["waiting"]
    assert waiting["reason"] == "BorrowBlocked"
    assert "a profile in another namespace is borrowing a replica on GPU" in waiting["message"]
    assert "serving/" not in waiting["message"] and "server " not in waiting["message"]


def test_a_give_back_decided_on_a_stale_copy_never_overwrites_a_newer_scale() -> None:
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    job_pod(h, unschedulable=None)
    h.finish(result={"data": {"status": "failed", "message": "boom"}}, ok=False)
    h.tick()
    stale = api_snapshot(h.kube, h.kube.obj("SpsProfile", "p"), h.pods_now(), NODES)  # read once
    h.kube.obj("Deployment", "server")["spec"]["replicas"] = 7  # a human scales meanwhile
    h.kube.obj("Deployment", "server")["metadata"]["resourceVersion"] = "999"
    assert h.reconciler is not None
    h.reconciler.reconcile(copy.deepcopy(h.kube.obj("SpsProfile", "p")), stale)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 7
    h.settle()
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 7 and L.ANNOTATION_BORROWED not in dep["metadata"][
        "annotations"]  # fmt: skip


# ----------------------------------------------------------------------------- the run


def test_kueue_suspending_the_job_again_gives_the_replica_back_at_once() -> None:
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    job_pod(h, unschedulable=None)
    h.tick()
    h.run_pass()  # the Job runs on the lent GPUs
    # Kueue preempts the workload: the Job is suspended, its pod goes.
    job = h.kube.obj("Job", h.status()["currentRun"]["job"])
    job["spec"]["suspend"] = True
    h.pods = [p for p in h.pods if L.LABEL_RUN not in p.labels]
    h.tick()
    run = h.run_pass()["currentRun"]
    assert "borrow" not in run
    assert run["waiting"]["reason"] == "QueuedInKueue"
    assert "the lent replica was given back" in run["waiting"]["message"]
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.kube.kinds("Lease")


def test_a_run_that_waited_too_long_deletes_its_pending_job_at_once() -> None:
    h = harness(capacity={"waitTimeoutSeconds": 600})
    start_waiting(h)
    h.tick(601)
    status = h.run_pass()
    assert status["lastFailure"]["reason"] == "WaitingForGPUs"
    assert not h.kube.kinds("Job")  # a late pod must not take the GPUs


def test_the_runs_deadline_counts_from_when_its_job_runs_not_from_its_wait() -> None:
    h = harness(job={"activeDeadlineSeconds": 600}, capacity={"waitTimeoutSeconds": 3600})
    start_waiting(h)
    (job,) = h.kube.kinds("Job")
    assert job["spec"]["activeDeadlineSeconds"] == 600 + 3600  # the Job's own bound
    h.tick(1800)  # half an hour waiting for a GPU
    h.run_pass()
    job_pod(h, unschedulable=None)
    h.tick()
    assert h.run_pass()["currentRun"]["runningSince"]
    h.tick(598)
    assert h.run_pass().get("currentRun"), "still within its 600 s"
    h.tick(2)
    status = h.run_pass()
    assert status["lastFailure"]["reason"] == "DeadlineExceeded"
    assert "ran 600 s, past spec.job.activeDeadlineSeconds 600" in status["lastFailure"]["message"]
    assert not h.kube.kinds("Job")


def test_the_runs_own_deadline_alone_gives_a_lent_replica_back_counted_from_when_it_runs() -> None:
    # Issue 21 §2: without Kueue's max-exec-time label, spec.job.activeDeadlineSeconds is
    # the cap of a borrow: the run it was lent to ends there, and the replica with it.
    capacity = {**BORROW["capacity"], "waitTimeoutSeconds": 3600}
    h = harness(job={"activeDeadlineSeconds": 600}, capacity=capacity)
    start_waiting(h)
    h.tick(1800)  # a long wait for GPUs, lent from its 30th second, does not count
    borrow = h.run_pass()["currentRun"]["borrow"]
    assert (borrow["limitSeconds"], borrow["limit"]) == (600, "spec.job.activeDeadlineSeconds")
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 1
    job_pod(h, unschedulable=None)
    h.tick()
    assert h.run_pass()["currentRun"]["runningSince"]
    h.tick(599)
    assert h.run_pass()["currentRun"]["borrow"], "still within its 600 s"
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 1
    h.tick(1)
    status = h.run_pass()
    assert status.get("currentRun") is None and not h.kube.kinds("Job")
    failure = status["lastFailure"]
    assert failure["reason"] == "DeadlineExceeded"
    assert "past spec.job.activeDeadlineSeconds 600" in failure["message"]
    assert "the lent replica was given back" in failure["message"]
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.kube.kinds("Lease")  # the GPU pool is free for the next borrow


def test_a_borrow_undone_by_someone_else_is_noticed_and_reported() -> None:
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    # A GitOps self-heal puts replicas back to what Git says.
    dep = h.kube.obj("Deployment", "server")
    dep["spec"]["replicas"] = 2
    git = {"manager": "argocd-controller", "operation": "Update"}
    dep["metadata"]["managedFields"].append({**git, "fieldsV1": {"f:spec": {"f:replicas": {}}}})
    h.tick()
    run = h.run_pass()["currentRun"]
    assert "borrow" not in run and "argocd-controller" in run["borrowUndone"]
    (undone,) = [m for r, m in h.kube.events if r == "BorrowUndone"]
    assert "scaled to 2 replicas by argocd-controller" in undone
    assert L.ANNOTATION_BORROWED not in dep["metadata"]["annotations"]
    assert not h.kube.kinds("Lease")
    h.tick(60)
    waiting = h.run_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "BorrowBlocked" and "borrows no more" in waiting["message"]
    assert h.kube.scales == [("server", 1)]  # never borrowed again this run


def test_a_pool_claim_from_a_namespace_this_operator_does_not_serve_is_not_honoured() -> None:
    """Namespaces mode: the operator may not read profiles elsewhere (403). A claim it
    cannot check is not one of its runs: the pool is taken over, nothing else touched."""
    h = harness(**BORROW)
    claim = PoolClaim("elsewhere", "q", "uid-q", "q-1", "lender", H100, "2026-03-01T12:00:00Z")
    h.add(pool_lease(claim, h.settings.pool_namespace))
    read = h.kube.get

    def get(kind: str, namespace: str, name: str) -> Any:
        if namespace == "elsewhere":
            raise ApiException(status=403, reason="Forbidden")
        return read(kind, namespace, name)

    h.kube.get = get  # type: ignore[method-assign]
    start_waiting(h)
    h.tick(30)
    assert h.run_pass()["currentRun"]["borrow"]["replicas"] == 2
    (lease,) = h.kube.kinds("Lease")
    assert lease["spec"]["holderIdentity"] == "serving/p"
