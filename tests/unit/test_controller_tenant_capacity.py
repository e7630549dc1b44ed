"""Issue 33: what a tenant can write on the shared GPU pool, and why the operator never
believes it (the borrow record, the queue, the holds, the messages, the cost of a pass)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any

import pytest
from api_snapshot import api_snapshot
from capacity_harness import BORROW, harness, job_pod, start_waiting
from controller_harness import H100, NODES, NS, Harness, deployment, indexes_of, profile_body

from sps_operator.api import labels as L
from sps_operator.api.spec import CapacitySpec
from sps_operator.controller import indexes as ix
from sps_operator.controller.finalizer import release
from sps_operator.controller.indexes import deployments_covered
from sps_operator.controller.main import parse_args
from sps_operator.controller.policies.borrow import (
    ANNOTATION_CLAIM,
    BorrowTag,
    PoolBid,
    PoolClaim,
    ahead_of,
    borrow_refusal,
    pdb_covers,
    pool_lease,
    read_claim,
    written_by_operator,
)
from sps_operator.controller.policies.job_policy import BORROW_BOUNDS


def blocked_by(h: Harness) -> str:
    start_waiting(h)
    h.tick(30)
    waiting = h.run_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "BorrowBlocked" and not h.kube.scales, waiting
    return str(waiting["message"])


# ----------------------------------------------------------------------------- PDBs


def pdb(selector: Any, allowed: int = 0) -> dict[str, Any]:
    spec = {"minAvailable": 2} | ({"selector": selector} if selector is not None else {})
    return {"kind": "PodDisruptionBudget", "metadata": {"name": "all-pods", "namespace": "serving"},
            "spec": spec, "status": {"disruptionsAllowed": allowed}}  # fmt: skip


def test_an_empty_pdb_selector_covers_every_pod_of_its_namespace() -> None:
    """policy/v1: `selector: {}` selects every pod of the namespace. The borrow once read
    it as matching nothing and scaled down a replica the PDB protects."""
    h = harness(**BORROW)
    h.add(pdb({}))
    assert "PodDisruptionBudget all-pods allows no disruption" in blocked_by(h)
    # A null selector covers nothing; an empty one with room for a disruption lets it go.
    dep = deployment()
    dep["spec"]["replicas"] = 3
    dep["status"].update(replicas=3, updatedReplicas=3, availableReplicas=3, readyReplicas=3)
    labels = dep["spec"]["template"]["metadata"]["labels"]
    capacity = CapacitySpec(mode="BorrowReplica")
    assert pdb_covers(pdb({}), labels) and not pdb_covers(pdb(None), labels)
    assert borrow_refusal(dep, capacity, [pdb(None)], []) is None
    assert borrow_refusal(dep, capacity, [pdb({}, allowed=1)], []) is None
    assert borrow_refusal(dep, capacity, [pdb({"matchLabels": {"x": "y"}})], []) is None
    # ... and its status changes wake the profiles of every Deployment there.
    idx = indexes_of([dep])
    assert [d["metadata"]["name"] for d in deployments_covered(idx.deployments, "serving", {})] == [
        "server"
    ]
    assert deployments_covered(idx.deployments, "serving", None) == []


# ----------------------------------------------------------------------------- the queue


def other_namespace_run(
    priority: int, since: str, *, job_uid: str = "uj-b"
) -> list[dict[str, Any]]:
    """A BorrowReplica run of namespace team-b waiting for its turn on H100: its profile
    (status as the operator wrote it), its Job and its Job's pending pod."""
    waiting = {"reason": "BorrowBlocked", "message": "m", "since": since, "poolTurn": True}
    q = profile_body("q") | {"metadata": {"name": "q", "namespace": "team-b", "uid": "uq"}}
    q["status"] = {"currentRun": {"name": "q-run", "job": "q-run", "gpuProduct": H100,
                                  "waiting": waiting, "jobUid": job_uid}}  # fmt: skip
    job = {"kind": "Job", "metadata": {
        "name": "q-run", "namespace": "team-b", "uid": "uj-b",
        "labels": {L.LABEL_MANAGED_BY: L.MANAGED_BY},
        "ownerReferences": [{"apiVersion": "sps.dev/v1alpha1", "kind": "SpsProfile",
                             "uid": "uq", "controller": True}]},
        "spec": {"template": {"spec": {}}}}  # fmt: skip
    return [q, job, team_b_pod("q-run-x", priority, since, owner="uj-b")]


def team_b_pod(name: str, priority: int, since: str, owner: str | None) -> dict[str, Any]:
    ref = {"kind": "Job", "controller": True} | ({"uid": owner} if owner else {})
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-b", "creationTimestamp": since,
                     "labels": {L.LABEL_RUN: "q-run", L.LABEL_COMPONENT: L.COMPONENT_POD},
                     "ownerReferences": [ref]},
        "spec": {"priority": priority},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "message": "no GPU"}]},
    }  # fmt: skip


def cached_pass(h: Harness, extra: list[dict[str, Any]]) -> dict[str, Any]:
    """p's pass on the operator's caches, with `extra` objects of other namespaces."""
    assert h.reconciler is not None
    body = copy.deepcopy(h.kube.obj("SpsProfile", "p"))
    world = ix.world_for(body, indexes_of(h.cluster_objects() + extra))
    h.reconciler.reconcile(body, world)
    return h.status()


def waiting_to_borrow(
    extra: list[dict[str, Any]], wait: int = 3600
) -> tuple[Harness, dict[str, Any]]:
    """p's run waits to borrow on H100 (its Job's pod pending since 12:00:00, priority 0),
    past its grace, with `extra` in the caches; returns p's waiting status."""
    h = harness(capacity={**BORROW["capacity"], "waitTimeoutSeconds": wait})
    h.tick()
    cached_pass(h, extra)
    job_pod(h)
    h.tick()
    cached_pass(h, extra)
    h.tick(31)
    return h, cached_pass(h, extra)["currentRun"].get("waiting") or {}


def test_a_waiting_message_names_no_detail_of_another_namespace() -> None:
    """team-a's waiting message once showed the priority and the pending-since time of
    team-b's profiling pod."""
    h, waiting = waiting_to_borrow(other_namespace_run(1000, "2026-03-01T11:58:07Z"))
    assert waiting["reason"] == "BorrowBlocked" and waiting["poolTurn"] is True, waiting
    message = waiting["message"]
    assert "comes after a profile in another namespace" in message
    assert "1000" not in message and "11:58:07" not in message and "team-b" not in message
    assert not h.kube.scales


def test_a_bare_pod_with_the_run_label_and_kind_job_does_not_take_a_turn() -> None:
    """team-b's bare pod with its run's label, an ownerReference of kind "Job" and priority
    2e9 put team-b ahead of team-a's older run; only pods of the Job the status records
    count, so team-a borrows."""
    forged = [team_b_pod("bare", 2_000_000_000, "2026-03-01T11:00:00Z", owner=None)]
    run = other_namespace_run(0, "2026-03-01T12:30:00Z")
    h, waiting = waiting_to_borrow(run[:2] + forged)
    assert "poolTurn" not in (waiting or {}), waiting
    assert h.kube.scales == [("server", 1)]
    # Its real Job's pod, younger and at the same priority, comes after team-a's.
    h, waiting = waiting_to_borrow(run + forged)
    assert h.kube.scales == [("server", 1)]


# ----------------------------------------------------------------------------- cost


def test_a_pass_reads_only_its_own_namespaces_borrow_records() -> None:
    """20,000 annotated Deployments in team-b made each team-a pass 11x slower: the index
    of Deployments carrying a record is by namespace (bench/borrow_index_scale.py)."""
    h = harness(**BORROW)
    theirs = deployment("theirs")
    theirs["metadata"] |= {"namespace": "team-b", "annotations": {L.ANNOTATION_BORROWED: "{}"}}
    mine = deployment("mine")
    mine["metadata"]["annotations"] = {L.ANNOTATION_BORROWED: "{}"}
    idx = indexes_of([*h.cluster_objects(), theirs, mine])
    world = ix.world_for(h.kube.obj("SpsProfile", "p"), idx)
    assert [d["metadata"]["name"] for d in world.borrowed] == ["mine"]


# ----------------------------------------------------------------------------- the GPU label


def test_a_profile_that_sees_no_gpu_label_says_why() -> None:
    """Without read access to Nodes (chart rbac.nodeAccess: false), or on nodes without the
    GPU label, a profile said "waiting for the pods to settle"."""

    def target_message(node_labels: dict[str, dict[str, str]]) -> str:
        h = Harness.one_target()
        body = copy.deepcopy(h.kube.obj("SpsProfile", "p"))
        objects = [o for o in h.cluster_objects() if o["kind"] != "Node"]
        objects += [{"kind": "Node", "metadata": {"name": n, "labels": labels}}
                    for n, labels in node_labels.items()]  # fmt: skip
        assert h.reconciler is not None
        h.tick()
        h.reconciler.reconcile(body, ix.world_for(body, indexes_of(objects)))
        (target,) = h.status()["targets"]
        assert target["state"] == "Waiting", target
        return str(target["message"])

    unread = target_message({})  # the node index is empty: the operator may not read Nodes
    assert "cannot read the nodes" in unread and "rbac.nodeAccess: true" in unread
    unlabelled = target_message({"n1": {"kubernetes.io/hostname": "n1"}})
    assert "without the label nvidia.com/gpu.product" in unlabelled
    assert "spec.gpuProductLabel" in unlabelled and "nodeAccess" not in unlabelled


# ----------------------------------------------------------------------------- the record


def test_a_record_forged_with_the_operators_field_manager_frees_no_other_pool() -> None:
    """team-b annotated its own Deployment with `--field-manager=sps-operator`, naming
    team-a's profile UID and run: team-b's pass deleted team-a's pool Lease, and both
    borrowed on one GPU product at once. The pool Lease is the record now."""
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    run = h.run_pass()["currentRun"]
    assert h.kube.scales == [("server", 1)] and len(h.kube.kinds("Lease")) == 1
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    # team-b: its own full pool, a BorrowReplica profile, and the forged record.
    mine = deployment("q-server", labels={"app": "q"})
    mine["metadata"]["namespace"] = "team-b"
    mine["spec"]["replicas"] = 2
    h.add(mine)
    h.kube.roll(h.kube.obj("Deployment", "q-server", "team-b"))
    q = profile_body("q", **BORROW)
    q["metadata"]["namespace"] = "team-b"
    q["spec"]["selector"] = {"matchLabels": {"app": "q"}}
    h.add(q)
    forged = BorrowTag(uid, "p", run["name"], 3, H100, "2026-03-01T00:00:00Z")
    annotate = {"metadata": {"annotations": {L.ANNOTATION_BORROWED: forged.to_annotation()}}}
    h.kube.patch_metadata("Deployment", "team-b", "q-server", annotate)  # as sps-operator
    assert written_by_operator(h.kube.obj("Deployment", "q-server", "team-b"))
    assert h.reconciler is not None
    for _ in range(3):
        h.tick(600)
        body = copy.deepcopy(h.kube.obj("SpsProfile", "q", "team-b"))
        h.reconciler.reconcile(body, api_snapshot(h.kube, body, h.pods_now(), NODES))
    (lease,) = h.kube.kinds("Lease")
    assert read_claim(lease) is not None and read_claim(lease).namespace == NS  # type: ignore[union-attr]
    assert h.kube.scales == [("server", 1)]  # team-b's Deployment neither scaled up nor down
    assert h.kube.obj("Deployment", "q-server", "team-b")["spec"]["replicas"] == 2
    # team-a's borrow goes on, and is given back as the Lease says.
    job_pod(h, unschedulable=None)
    h.finish()
    h.settle(passes=5)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.kube.kinds("Lease")


def test_a_borrow_recorded_by_the_previous_version_is_given_back() -> None:
    """An upgrade: the previous version's pool Lease had no replicas (they were on the
    Deployment, trusted by field manager). Named by its Lease, that record is honoured."""
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    (lease,) = h.kube.kinds("Lease")
    claim = json.loads(lease["metadata"]["annotations"][ANNOTATION_CLAIM])
    del claim["replicas"]  # as the previous version wrote it
    lease["metadata"]["annotations"][ANNOTATION_CLAIM] = json.dumps(claim)
    h.kube.obj("SpsProfile", "p")["status"]["currentRun"].pop("borrow")  # and status lost
    h.tick()
    assert h.run_pass()["currentRun"]["borrow"]["replicas"] == 2  # re-attached
    job_pod(h, unschedulable=None)
    h.finish()
    h.settle(passes=5)
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 2 and L.ANNOTATION_BORROWED not in dep["metadata"][
        "annotations"]  # fmt: skip
    assert not h.kube.kinds("Lease")
    # ... and so is one whose profile is deleted across the upgrade (the finalizer).
    h = harness(**BORROW)
    start_waiting(h)
    h.tick(30)
    h.run_pass()
    (lease,) = h.kube.kinds("Lease")
    claim = json.loads(lease["metadata"]["annotations"][ANNOTATION_CLAIM])
    del claim["replicas"]
    lease["metadata"]["annotations"][ANNOTATION_CLAIM] = json.dumps(claim)
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    release(h.kube, NS, "p", uid, pool_namespace=h.settings.pool_namespace)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.kube.kinds("Lease")


# ----------------------------------------------------------------------------- the bounds


def test_a_rollout_hold_ends_at_the_admins_bound_whatever_the_progress_deadline() -> None:
    """team-b set progressDeadlineSeconds 2147483647 with pods that never become ready:
    the pool Lease would have been held for 68 years (issue 33 §2)."""
    from test_controller_full_pool import BORROW_SOON, borrowed_then_finished, passes

    h = harness(replicas=2, **BORROW_SOON)
    h.kube.obj("Deployment", "server")["spec"]["progressDeadlineSeconds"] = 2147483647
    borrowed_then_finished(h)
    status = passes(h, 2)
    assert status["rolloutBorrow"] and h.kube.kinds("Lease")  # kept for the rollout
    (lease,) = h.kube.kinds("Lease")
    assert read_claim(lease).hold == status["tables"][0]["hash"]  # type: ignore[union-attr]
    bound = BORROW_BOUNDS.max_rollout_hold_seconds  # the documented default: 1800 s
    h.tick(bound - 10)
    assert passes(h, 1)["rolloutBorrow"]  # still within the admin's bound
    h.tick(10)
    status = passes(h, 1)
    assert status.get("rolloutBorrow") is None and not h.kube.kinds("Lease")
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    (note,) = [m for r, m in h.kube.events if r == "ReplicaReturned"]
    assert f"did not complete within {bound:.0f} s" in note
    assert "borrowPolicy.maxRolloutHoldSeconds" in note


def test_a_replica_lent_to_a_run_goes_back_at_the_admins_bound() -> None:
    """A run that borrowed but whose pod never starts waited as long as its own
    waitTimeoutSeconds (up to 7 days) with the replica lent."""
    h = harness(capacity={**BORROW["capacity"], "waitTimeoutSeconds": 7 * 24 * 3600})
    start_waiting(h)
    h.tick(30)
    assert h.run_pass()["currentRun"]["borrow"]
    h.tick(BORROW_BOUNDS.max_lent_seconds - 1)  # the documented default: 4 h
    assert h.run_pass()["currentRun"]["borrow"]
    h.tick(1)
    status = h.run_pass()
    assert status.get("currentRun") is None and not h.kube.kinds("Job")
    failure = status["lastFailure"]
    assert failure["reason"] == "DeadlineExceeded"
    assert "borrowPolicy.maxLentSeconds" in failure["message"]
    assert "the lent replica was given back" in failure["message"]
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.kube.kinds("Lease")


def test_a_place_in_line_holds_others_back_no_longer_than_the_admins_bound() -> None:
    """team-b's run first in line at a high priority, whose pass never borrows, held
    team-a back for as long as it waited: offered the free pool for the bound, it stalled."""
    h, waiting = waiting_to_borrow(other_namespace_run(1000, "2026-03-01T11:59:00Z"), 86400)
    assert waiting.get("poolTurn") is True and not h.kube.scales
    bound = BORROW_BOUNDS.max_pool_turn_seconds  # the documented default: 1 h
    h.tick(bound)  # team-b's pod has waited past the bound; team-a's has not (created later)
    h.pods = [replace(p, created="2026-03-01T12:59:00Z") if p.unschedulable else p
              for p in h.pods]  # fmt: skip
    cached_pass(h, other_namespace_run(1000, "2026-03-01T11:59:00Z"))
    assert h.kube.scales == [("server", 1)]
    # Both runs order the same bids the same way: a stalled bid goes after the others.
    mine = PoolBid("a/p", "ua", H100, 0, "2026-03-01T12:59:00Z")
    old = PoolBid("b/q", "uq", H100, 1000, "2026-03-01T11:59:00Z")
    stalled = {"uq": "2026-03-01T13:00:31Z"}
    assert ahead_of(mine, [old], stalled) == [] and ahead_of(old, [mine], stalled) == [mine]
    assert ahead_of(mine, [old]) == [old] and ahead_of(old, [mine]) == []


def test_a_claim_left_by_a_crash_before_the_scale_records_the_replicas_borrowed_later() -> None:
    """Killed between taking the pool and scaling: the next pass scales the Deployment as it
    is then, and the Lease (the record) must say so, or the give-back restores a stale
    count (here it would leave the lender at 1 of 2)."""
    h = harness(**BORROW)
    start_waiting(h)
    run = h.status()["currentRun"]
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    claim = PoolClaim(NS, "p", uid, run["name"], "server", H100, "2026-03-01T12:00:00Z", 5)
    h.add(pool_lease(claim, h.settings.pool_namespace))  # decided when it had 5 replicas
    h.tick(30)
    assert h.run_pass()["currentRun"]["borrow"]["replicas"] == 2
    (lease,) = h.kube.kinds("Lease")
    assert read_claim(lease).replicas == 2  # type: ignore[union-attr]
    job_pod(h, unschedulable=None)
    h.finish()
    h.settle(passes=5)
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 2
    assert not h.kube.kinds("Lease")


def test_the_admins_bounds_are_positive_and_at_most_a_year() -> None:
    assert parse_args([]).max_pool_turn_seconds == BORROW_BOUNDS.max_pool_turn_seconds
    for flag in ("--max-lent-seconds", "--max-rollout-hold-seconds", "--max-pool-turn-seconds"):
        assert getattr(parse_args([f"{flag}=600"]), flag[2:].replace("-", "_")) == 600
        for bad in ("0", "-5", "nan", "inf", "1e12"):
            with pytest.raises(SystemExit):
                parse_args([f"{flag}={bad}"])
