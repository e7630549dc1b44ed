"""Several profiles waiting to borrow on one GPU product (issue 21 §2): served in the
priority of their pending pods, then oldest first, wherever the operator decides."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from capacity_harness import BORROW, NO_GPU, harness, job_owner
from controller_harness import H100, NS, Harness, deployment, indexes_of, profile_body

from sps_operator.api import labels as L
from sps_operator.controller.indexes import pool_bids
from sps_operator.controller.policies.borrow import (
    PoolBid,
    PoolClaim,
    ahead_of,
    borrowing_seen_from,
    holder_seen_from,
    pool_bid,
    pool_lease,
)
from sps_operator.controller.policies.placement import PodInfo


def second_pool(h: Harness, name: str) -> None:
    """Another BorrowReplica profile of the namespace, on its own full Deployment."""
    dep = deployment(f"{name}-server", labels={"app": name})
    dep["spec"]["replicas"] = 2
    h.add(dep)
    h.kube.roll(h.kube.obj("Deployment", f"{name}-server"))
    h.place(f"{name}-server", count=2)
    body = profile_body(name, **BORROW)
    body["spec"]["selector"] = {"matchLabels": {"app": name}}
    h.add(body)


def pending_pod(h: Harness, profile: str, priority: int, created: str) -> None:
    """The profile's run's pod, pending on a full pool (as the pod index has it)."""
    run = h.status(profile)["currentRun"]["name"]
    h.pods = [p for p in h.pods if p.labels.get(L.LABEL_RUN) != run]
    uid = h.kube.obj("SpsProfile", profile)["metadata"]["uid"]
    labels = {L.LABEL_RUN: run, L.LABEL_COMPONENT: L.COMPONENT_POD, L.LABEL_PROFILE_UID: uid}
    owner = job_owner(h, profile) | {"created": created}
    h.pods.append(PodInfo(f"{run}-x", labels, None, unschedulable=NO_GPU, priority=priority,
                          **owner))  # fmt: skip


def hold_pool(h: Harness) -> dict[str, Any]:
    """A profile of another namespace borrows on H100 now (its pool Lease, its live run)."""
    someone = h.add(profile_body("x") | {"metadata": {"name": "x", "namespace": "b"}})
    claim = PoolClaim("b", "x", someone["metadata"]["uid"], "x-run", "lender", H100,
                      "2026-03-01T11:59:00Z")  # fmt: skip
    h.add(pool_lease(claim, h.settings.pool_namespace))
    someone["status"] = {"currentRun": {"name": "x-run"}}
    return someone


def free_pool(h: Harness) -> None:
    h.kube.objects = {k: o for k, o in h.kube.objects.items() if k[0] != "Lease"}
    h.kube.obj("SpsProfile", "x", "b")["status"] = {}


def passes(h: Harness, *names: str) -> dict[str, dict[str, Any]]:
    return {n: h.run_cached_pass(n) for n in names}


def waiting_both(h: Harness, p: tuple[int, str], q: tuple[int, str]) -> None:
    """p and q wait to borrow (past their grace) while x holds the pool."""
    hold_pool(h)
    h.tick()
    passes(h, "p", "q")
    pending_pod(h, "p", *p)
    pending_pod(h, "q", *q)
    h.tick()
    passes(h, "p", "q")
    h.tick(31)
    got = passes(h, "p", "q")
    for name in ("p", "q"):
        waiting = got[name]["currentRun"]["waiting"]
        assert waiting["reason"] == "BorrowBlocked" and waiting["poolTurn"] is True, waiting
        assert "a profile in another namespace is borrowing a replica" in waiting["message"]
        assert "b/x" not in waiting["message"] and "lender" not in waiting["message"]


def p_first_after_the_pool_frees(p: tuple[int, str], q: tuple[int, str]) -> tuple[Harness, Any]:
    """p and q wait for the pool x holds; x gives it back; p's pass comes first but p does
    not borrow. Returns the harness and p's waiting status."""
    h = harness(**BORROW)
    second_pool(h, "q")
    waiting_both(h, p, q)
    free_pool(h)
    h.tick()
    status = h.run_cached_pass("p")
    assert not h.kube.scales
    return h, status["currentRun"]["waiting"]


def test_the_higher_priority_run_borrows_first_when_the_pool_frees() -> None:
    # p waited longer, q's pod has the higher priority.
    h, waiting = p_first_after_the_pool_frees(
        (0, "2026-03-01T12:00:00Z"), (1000, "2026-03-01T12:00:01Z")
    )
    assert waiting["poolTurn"] is True
    assert "its turn to borrow on GPU product" in waiting["message"]
    assert f"comes after {NS}/q (priority 1000" in waiting["message"]
    q = h.run_cached_pass("q")
    assert q["currentRun"]["borrow"]["deployment"] == "q-server"
    assert h.kube.scales == [("q-server", 1)]
    assert "poolTurn" not in (q["currentRun"].get("waiting") or {})
    # p now waits for the pool q holds, and borrows once q's run is over.
    p = h.run_cached_pass("p")
    assert f"{NS}/q is borrowing a replica of q-server" in p["currentRun"]["waiting"]["message"]


def test_equal_priorities_are_served_oldest_first() -> None:
    h, waiting = p_first_after_the_pool_frees(
        (500, "2026-03-01T12:00:05Z"), (500, "2026-03-01T12:00:01Z")
    )
    assert (
        f"comes after {NS}/q (priority 500, waiting since 2026-03-01T12:00:01Z)"
        in (waiting["message"])
    )
    h.run_cached_pass("q")
    assert h.kube.scales == [("q-server", 1)]


def test_a_place_in_line_comes_from_a_pending_pod_of_a_job_never_from_status() -> None:
    def objects(*pods: dict[str, Any], job_uid: str = "uj") -> list[dict[str, Any]]:
        waiting = {"reason": "BorrowBlocked", "message": "m", "since": "2020-01-01T00:00:00Z",
                   "poolTurn": True, "queuePosition": 1}  # fmt: skip
        q = profile_body("q") | {"metadata": {"name": "q", "namespace": "b", "uid": "uq"}}
        q["status"] = {"currentRun": {"name": "q-run", "gpuProduct": H100, "waiting": waiting,
                                      "jobUid": job_uid}}  # fmt: skip
        job = {"kind": "Job", "metadata": {
            "name": "q-run", "namespace": "b", "uid": "uj", "labels": {
                L.LABEL_MANAGED_BY: L.MANAGED_BY},
            "ownerReferences": [{"apiVersion": "sps.dev/v1alpha1", "kind": "SpsProfile",
                                 "uid": "uq", "controller": True}]},
            "spec": {"template": {"spec": {"priorityClassName": "low"}}}}  # fmt: skip
        return [q, job, *pods]

    pod = {
        "kind": "Pod",
        "metadata": {"name": "q-run-x", "namespace": "b", "labels": {L.LABEL_RUN: "q-run"},
                     "creationTimestamp": "2026-03-01T12:00:00Z",
                     "ownerReferences": [{"kind": "Job", "controller": True, "uid": "uj"}]},
        "spec": {"priority": 7, "priorityClassName": "low"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "message": "no"}]},
    }  # fmt: skip
    me = {"status": {"currentRun": {"gpuProduct": H100}}}
    (bid,) = pool_bids(indexes_of(objects(pod)), me)
    # The pod's priority and creation time, not status's "since 2020".
    assert bid == PoolBid("b/q", "uq", H100, 7, "2026-03-01T12:00:00Z")
    assert pool_bids(indexes_of(objects()), me) == []  # status alone: no place
    not_a_job = copy.deepcopy(pod)
    not_a_job["metadata"]["ownerReferences"] = []
    assert pool_bids(indexes_of(objects(not_a_job)), me) == []
    # Issue 33 §1: the kind string "Job" is no proof; nor is the run's label. Only a pod
    # whose controller is the UID the profile's status records counts, at the class the
    # operator gave the Job's pods.
    bare = copy.deepcopy(pod)
    bare["metadata"] |= {"name": "bare", "creationTimestamp": "2020-01-01T00:00:00Z"}
    bare["metadata"]["ownerReferences"] = [{"kind": "Job", "controller": True, "uid": "forged"}]
    bare["spec"] = {"priority": 2_000_000_000, "priorityClassName": "low"}
    assert pool_bids(indexes_of(objects(bare)), me) == []
    assert pool_bids(indexes_of(objects(pod, bare)), me) == [bid]
    higher = copy.deepcopy(bare)
    higher["metadata"]["ownerReferences"][0]["uid"] = "uj"  # under the Job's own UID ...
    higher["spec"]["priorityClassName"] = "system-node-critical"  # ... at another class
    assert pool_bids(indexes_of(objects(pod, higher)), me) == [bid]
    assert pool_bids(indexes_of(objects(pod, job_uid="other")), me) == []
    running = copy.deepcopy(pod)
    running["spec"]["nodeName"] = "n1"
    running["status"] = {}
    assert pool_bids(indexes_of(objects(running)), me) == []
    other_product = {"status": {"currentRun": {"gpuProduct": "B200"}}}
    assert pool_bids(indexes_of(objects(pod)), other_product) == []


def test_ahead_of_orders_by_priority_then_age_then_uid() -> None:
    def bid(uid: str, priority: int, since: str, product: str = H100) -> PoolBid:
        return PoolBid(f"ns/{uid}", uid, product, priority, since)

    mine = bid("m", 10, "2026-03-01T12:00:05Z")
    others = [
        bid("a", 20, "2026-03-01T12:00:09Z"),  # higher priority
        bid("b", 10, "2026-03-01T12:00:01Z"),  # same priority, older
        bid("c", 10, "2026-03-01T12:00:09Z"),  # same priority, younger
        bid("d", 5, "2026-03-01T11:00:00Z"),  # lower priority, however old
        bid("e", 99, "2026-03-01T12:00:00Z", product="B200"),  # another pool
        mine,
    ]
    assert [b.uid for b in ahead_of(mine, others)] == ["a", "b"]
    pods = [PodInfo("x", {}, None, unschedulable="no", controller="Job", priority=None,
                    created="2026-03-01T12:00:00Z")]  # fmt: skip
    job = {"metadata": {"uid": "j"}}
    pods = [replace(pods[0], controller_uid="j")]
    assert pool_bid("ns/m", "m", H100, pods, job) == PoolBid("ns/m", "m", H100, 0, pods[0].created)


def test_another_namespace_is_never_named_to_a_waiting_profile() -> None:
    # A namespace is a tenant boundary: who borrows or goes first is named within the
    # namespace only ("tenant-a" is a prefix of "tenant-ab", so a prefix match would leak).
    claim = PoolClaim("tenant-ab", "secret", "u", "secret-run", "secret-server", H100, "t")
    assert "secret" not in borrowing_seen_from(claim, "tenant-a")
    assert "tenant-ab" not in borrowing_seen_from(claim, "tenant-a")
    assert "tenant-ab/secret is borrowing a replica of secret-server" in borrowing_seen_from(
        claim, "tenant-ab"
    )
    assert holder_seen_from("tenant-ab/secret", "tenant-a") == "a profile in another namespace"
    assert holder_seen_from("tenant-ab/secret", "tenant-ab") == "tenant-ab/secret"


def test_a_run_that_waits_while_another_holds_the_pool_keeps_its_place_past_the_bound() -> None:
    """Issue 33: `maxPoolTurnSeconds` once sent every run that had waited past it after
    every younger run, so a run waiting while others held the pool lost its place to each
    fresh one. The bound now expires only a first in line that leaves the free pool
    unused: p, waiting since 12:00 behind x's borrow for longer than the bound, still goes
    before q's pod created just now."""
    capacity = {**BORROW["capacity"], "waitTimeoutSeconds": 86400}
    h = harness(capacity=capacity)
    second_pool(h, "q")
    h.kube.obj("SpsProfile", "q")["spec"]["capacity"] = capacity
    hold_pool(h)
    h.tick()
    passes(h, "p", "q")
    pending_pod(h, "p", 0, "2026-03-01T12:00:00Z")
    pending_pod(h, "q", 0, "2026-03-01T12:00:01Z")
    h.tick()
    passes(h, "p", "q")
    h.tick(31)
    got = passes(h, "p", "q")
    assert all(got[n]["currentRun"]["waiting"]["poolTurn"] for n in ("p", "q")), got
    for _ in range(6):  # x holds the pool 1.5 h (the bound: 1 h); p and q look every 15 min
        h.tick(900)
        passes(h, "p", "q")
    assert not h.kube.scales
    pending_pod(h, "q", 0, "2026-03-01T13:30:00Z")  # q's pod created again: a fresh bid
    free_pool(h)
    h.tick()
    q = h.run_cached_pass("q")
    assert not h.kube.scales
    assert (
        f"comes after {NS}/p (priority 0, waiting since 2026-03-01T12:00:00Z)"
        in (q["currentRun"]["waiting"]["message"])
    )
    h.run_cached_pass("p")
    assert h.kube.scales == [("server", 1)]
