"""Profiling where GPUs are scarce (issue 12): why a run waits, BorrowReplica, giving
back whatever happens."""

from __future__ import annotations

import json
from typing import Any

from controller_harness import NS, Harness, deployment, profile_body

from sps_operator.api import labels as L
from sps_operator.controller.placement import PodInfo
from sps_operator.controller.policy import JobPolicy, NameRule
from sps_operator.controller.release import release
from sps_operator.controller.state import Settings

NO_GPU = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
BORROW = {"capacity": {"mode": "BorrowReplica", "borrowAfterSeconds": 30}}


def harness(replicas: int = 2, **spec: Any) -> Harness:
    h = Harness()
    dep = deployment()
    dep["spec"]["replicas"] = replicas
    h.add(dep)
    h.kube.roll(h.kube.obj("Deployment", "server"))
    h.add(profile_body(**spec))
    h.place(count=replicas)
    return h


def job_pod(h: Harness, unschedulable: str | None = NO_GPU) -> None:
    """The profiling Job's pod, as the pod index has it."""
    run = h.status()["currentRun"]["name"]
    labels = {L.LABEL_RUN: run, L.LABEL_COMPONENT: L.COMPONENT_POD}
    h.pods = [p for p in h.pods if p.labels.get(L.LABEL_RUN) != run]
    node = None if unschedulable else "n1"
    h.pods.append(PodInfo(f"{run}-xyz", labels, node, unschedulable=unschedulable))


def start_waiting(h: Harness) -> None:
    h.tick()
    h.run_pass()
    job_pod(h)
    h.tick()
    h.run_pass()


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
    status = h.settle()
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

    h = harness(**BORROW)
    other = deployment("other")
    other["metadata"]["annotations"] = {L.ANNOTATION_BORROWED: json.dumps({
        "profile_uid": "x", "profile": "someone", "run": "r", "replicas": 3,
        "product": "NVIDIA-H100-80GB-HBM3", "at": "2026-03-01T00:00:00Z"})}  # fmt: skip
    h.add(other)
    assert "someone is borrowing a replica on GPU product" in blocked_by(h)


def test_a_single_replica_is_borrowed_only_with_allow_downtime() -> None:
    h = harness(replicas=1, capacity={**BORROW["capacity"], "allowDowntime": True})
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    assert h.kube.scales == [("server", 0)]
    job_pod(h, unschedulable=None)
    h.finish()
    h.tick(90)
    h.run_pass()
    assert h.kube.scales[-1] == ("server", 1)
    (note,) = [m for r, m in h.kube.events if r == "ReplicaReturned"]
    assert "down 90 s" in note


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
    release(h.kube, NS, "p", uid)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2

    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    h.kube.obj("Deployment", "server")["spec"]["replicas"] = 5  # scaled by a human meanwhile
    release(h.kube, NS, "p", h.kube.obj("SpsProfile", "p")["metadata"]["uid"])
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
        registry.get_sample_value("sps_gpu_wait_seconds_count", {"namespace": NS, "profile": "p"})
        == 1.0
    )  # one wait, observed once


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
