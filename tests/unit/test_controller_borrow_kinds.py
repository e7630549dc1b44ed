"""BorrowReplica for a StatefulSet and a LeaderWorkerSet target (issue 34 §1): a
StatefulSet lends one replica (its controller removes the highest ordinal), a
LeaderWorkerSet one whole group (size × GPUs, what a group clone of the same size needs);
the record is written on the lender's own kind and on the pool Lease, and the replica comes
back when the run ends, when the profile is deleted, and through the orphan sweep."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from capacity_harness import BORROW, job_pod, start_waiting
from controller_harness import H100, NS, Harness, deployment, profile_body
from hypothesis import given
from hypothesis import strategies as st
from test_controller_rollout_kinds import group_pods, leader_worker_set, stateful_set, sts_pods

from sps_operator.api import labels as L
from sps_operator.controller.finalizer import release
from sps_operator.controller.policies.borrow import (
    BorrowTag,
    PoolClaim,
    claim_annotation,
    kueue_managed_refusal,
    kueue_queue_of,
    pool_lease,
    read_claim,
)
from sps_operator.controller.policies.placement import PodInfo


def sts() -> tuple[dict[str, Any], list[PodInfo]]:
    return stateful_set(), sts_pods()


def lws() -> tuple[dict[str, Any], list[PodInfo]]:
    obj = leader_worker_set()
    obj["spec"]["replicas"] = 2  # two groups of two pods
    pods = group_pods() + [
        PodInfo(p.name.replace("big-0", "big-1"), p.labels, p.node, ready=True)
        for p in group_pods()
    ]
    return obj, pods


KINDS = [sts, lws]


def lender(make: Any) -> tuple[Harness, str, str]:
    obj, pods = make()
    kind, name = obj["kind"], obj["metadata"]["name"]
    h = Harness()
    h.add(obj)
    h.kube.roll(h.kube.obj(kind, name))
    h.add(profile_body(capacity=BORROW["capacity"]))
    h.pods = pods
    return h, kind, name


def record(h: Harness, kind: str, name: str) -> dict[str, Any] | None:
    text = h.kube.obj(kind, name)["metadata"].get("annotations", {}).get(L.ANNOTATION_BORROWED)
    return json.loads(text) if text else None


def borrowed(h: Harness, kind: str, name: str) -> dict[str, Any]:
    start_waiting(h)
    assert not h.kube.scales  # the grace period first
    h.tick(30)
    status = h.run_pass()
    assert h.kube.scales == [(name, 1)], status["currentRun"].get("waiting")
    assert h.kube.obj(kind, name)["spec"]["replicas"] == 1
    tag = record(h, kind, name)
    assert tag is not None and tag["replicas"] == 2 and tag["run"] == status["currentRun"]["name"]
    (lease,) = h.kube.kinds("Lease")
    claim = read_claim(lease)
    assert claim is not None and (claim.kind, claim.deployment) == (kind, name)
    return status


@pytest.mark.parametrize("make", KINDS)
def test_a_replica_or_group_is_lent_the_clone_runs_and_it_comes_back(make: Any) -> None:
    h, kind, name = lender(make)
    status = borrowed(h, kind, name)
    assert status["currentRun"]["borrow"]["replicas"] == 2
    job_pod(h, unschedulable=None)  # the freed GPUs take the clone
    h.finish()
    status = h.settle(passes=5)
    assert status["tables"] and h.kube.scales[-1] == (name, 2)
    assert h.kube.obj(kind, name)["spec"]["replicas"] == 2
    assert record(h, kind, name) is None and not h.kube.kinds("Lease")
    notes = [m for r, m in h.kube.events if r == "ReplicaReturned"]
    unit = "group" if kind == "LeaderWorkerSet" else "replica"
    assert notes and f"gave the borrowed {unit} back to {name}" in notes[0]


@pytest.mark.parametrize("make", KINDS)
def test_a_failed_run_and_a_deleted_profile_give_back(make: Any) -> None:
    h, kind, name = lender(make)
    borrowed(h, kind, name)
    h.finish(result={"data": {"status": "failed", "message": "boom"}}, ok=False)
    h.tick()
    h.run_pass()
    assert h.kube.obj(kind, name)["spec"]["replicas"] == 2 and record(h, kind, name) is None

    h, kind, name = lender(make)
    borrowed(h, kind, name)
    uid = h.kube.obj("SpsProfile", "p")["metadata"]["uid"]
    release(h.kube, NS, "p", uid, pool_namespace=h.settings.pool_namespace)
    assert h.kube.obj(kind, name)["spec"]["replicas"] == 2 and record(h, kind, name) is None
    assert not h.kube.kinds("Lease")


@pytest.mark.parametrize("make", KINDS)
def test_an_orphaned_borrow_is_given_back_to_its_own_kind(make: Any) -> None:
    h, kind, name = lender(make)
    h.kube.obj(kind, name)["spec"]["replicas"] = 1
    tag = BorrowTag("uid-gone", "gone", "gone-1", 2, H100, "2026-03-01T12:00:00Z")
    h.kube.patch_metadata(kind, NS, name, {"metadata": {"annotations": {
        L.ANNOTATION_BORROWED: tag.to_annotation()}}})  # fmt: skip
    claim = PoolClaim(NS, "gone", "uid-gone", "gone-1", name, H100, tag.at, 2, kind=kind)
    h.add(pool_lease(claim, h.settings.pool_namespace))
    h.tick(600)
    h.run_pass()
    assert h.kube.obj(kind, name)["spec"]["replicas"] == 2 and record(h, kind, name) is None
    assert not h.kube.kinds("Lease")


def test_a_claim_names_its_lenders_kind_and_a_deployments_claim_reads_as_before() -> None:
    args = (NS, "p", "uid", "run", "server", H100, "2026-03-01T12:00:00Z", 2)
    deployment = PoolClaim(*args)
    assert "kind" not in json.loads(claim_annotation(deployment))  # a previous version's bytes
    for claim in (deployment, PoolClaim(*args, kind="StatefulSet")):
        lease = {"metadata": {"annotations": {"sps.dev/borrow-claim": claim_annotation(claim)}}}
        assert read_claim(lease) == claim
    odd = json.loads(claim_annotation(deployment)) | {"kind": "Pod"}
    assert (
        read_claim({"metadata": {"annotations": {"sps.dev/borrow-claim": json.dumps(odd)}}}) is None
    )


def test_a_record_on_another_kind_of_the_same_name_is_not_the_claims() -> None:
    from sps_operator.controller.policies.borrow import confirmed_tag

    obj, _ = sts()
    tag = BorrowTag("uid", "p", "run", 2, H100, "2026-03-01T12:00:00Z")
    obj["metadata"]["annotations"] = {L.ANNOTATION_BORROWED: tag.to_annotation()}
    name = obj["metadata"]["name"]
    claim = PoolClaim(NS, "p", "uid", "run", name, H100, tag.at, 2)  # a Deployment's
    assert confirmed_tag(claim, obj) is None
    assert confirmed_tag(PoolClaim(NS, "p", "uid", "run", name, H100, tag.at, 2,
                                   kind="StatefulSet"), obj) == tag  # fmt: skip


@pytest.mark.parametrize("make", KINDS)
def test_a_lender_no_longer_selected_mid_borrow_still_gets_its_replica_back(make: Any) -> None:
    # Found by its borrow record (the workload caches file a lending StatefulSet or
    # LeaderWorkerSet as such), not among the profile's current targets.
    h, kind, name = lender(make)
    borrowed(h, kind, name)
    h.kube.obj(kind, name)["metadata"]["labels"] = {"app": "something-else"}
    job_pod(h, unschedulable=None)
    h.finish()
    for _ in range(3):  # on what the operator's caches (kopf indexes) hold
        h.tick()
        h.run_cached_pass()
    assert h.kube.obj(kind, name)["spec"]["replicas"] == 2 and record(h, kind, name) is None
    assert [m for r, m in h.kube.events if r == "ReplicaReturned"]


def test_a_group_kept_lent_for_its_rollout_comes_back_by_the_admins_workload_bound() -> None:
    # A LeaderWorkerSet that starts no new group before an old one is gone (maxSurge 1,
    # maxUnavailable 0) keeps the lent group as its surge slot; it has no
    # progressDeadlineSeconds, so the hold ends by the admin's --workload-progress-seconds
    # (and the margin), not by a Deployment's default of 600 s.
    obj, pods = lws()
    obj["spec"]["rolloutStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
    }
    settings = Harness().settings
    h = Harness(settings=dataclasses.replace(settings, workload_progress_seconds=100))
    h.add(obj)
    h.kube.roll(h.kube.obj("LeaderWorkerSet", "big"))
    h.add(profile_body(capacity=BORROW["capacity"]))
    h.pods = pods
    borrowed(h, "LeaderWorkerSet", "big")
    job_pod(h, unschedulable=None)
    h.kube.instant_rollout = False  # the new table's roll does not complete
    h.finish()
    status = h.settle(passes=2)
    assert status.get("rolloutBorrow"), status  # the group stays lent for the rollout
    assert h.kube.obj("LeaderWorkerSet", "big")["spec"]["replicas"] == 1
    h.tick(100 + 60)
    h.run_pass()
    assert h.kube.obj("LeaderWorkerSet", "big")["spec"]["replicas"] == 2
    notes = [m for r, m in h.kube.events if r == "ReplicaReturned"]
    assert notes and "did not complete within 16" in notes[-1], notes


@pytest.mark.parametrize("make", KINDS)
def test_a_gitops_owner_or_an_hpa_of_the_kind_blocks_the_borrow_on_the_caches_too(
    make: Any,
) -> None:
    for blocker in ("gitops", "hpa"):
        h, kind, name = lender(make)
        if blocker == "gitops":
            h.kube.obj(kind, name)["metadata"]["managedFields"] = [
                {"manager": "argocd-controller", "operation": "Apply",
                 "fieldsV1": {"f:spec": {"f:replicas": {}}}}]  # fmt: skip
        else:
            h.add({"kind": "HorizontalPodAutoscaler", "metadata": {"name": "auto"},
                   "spec": {"scaleTargetRef": {"kind": kind, "name": name}}})  # fmt: skip
        start_waiting(h)
        h.tick(30)
        waiting = h.run_cached_pass()["currentRun"]["waiting"]
        assert waiting["reason"] == "BorrowBlocked" and not h.kube.scales, waiting
        words = "argocd-controller" if blocker == "gitops" else "HorizontalPodAutoscaler auto"
        assert words in waiting["message"]


# ----------------------------------------------------------------------------- Kueue


def lws_without_leader_template() -> dict[str, Any]:
    obj = leader_worker_set()
    del obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"]  # the worker template serves
    return obj


LWT = ("spec", "leaderWorkerTemplate")


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (deployment, ("metadata",)),
        (deployment, ("spec", "template", "metadata")),
        (stateful_set, ("metadata",)),
        (stateful_set, ("spec", "template", "metadata")),
        (leader_worker_set, ("metadata",)),
        (leader_worker_set, (*LWT, "leaderTemplate", "metadata")),
        (leader_worker_set, (*LWT, "workerTemplate", "metadata")),
        (lws_without_leader_template, (*LWT, "workerTemplate", "metadata")),
    ],
)
def test_the_kueue_queue_is_read_on_the_workload_and_every_pod_template(
    make: Any, where: tuple[str, ...]
) -> None:
    """Kueue's integrations read the queue label on a Deployment, a StatefulSet or a
    LeaderWorkerSet, its pod integration on any pod: a LeaderWorkerSet whose workers alone
    name a queue has pods Kueue admits all the same. The refusal names the kind (before:
    "Deployment" for every kind)."""
    obj = make()
    assert kueue_queue_of(obj) is None and kueue_managed_refusal(obj) is None
    node = obj
    for key in where:
        node = node.setdefault(key, {})
    node.setdefault("labels", {})[L.LABEL_KUEUE_QUEUE] = "serving"
    assert kueue_queue_of(obj) == "serving"
    refusal = str(kueue_managed_refusal(obj))
    assert refusal.startswith(f"{obj['kind']} {obj['metadata']['name']} is managed by Kueue")


def test_a_group_whose_workers_alone_name_a_kueue_queue_is_never_lent() -> None:
    h, kind, name = lender(lws)
    worker = h.kube.obj(kind, name)["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    worker["metadata"] = {"labels": {L.LABEL_KUEUE_QUEUE: "serving"}}
    start_waiting(h)
    h.tick(30)
    waiting = h.run_cached_pass()["currentRun"]["waiting"]
    assert waiting["reason"] == "KueueManagedTarget" and not h.kube.scales, waiting
    assert waiting["message"].startswith("LeaderWorkerSet big is managed by Kueue"), waiting


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
LABELS = st.dictionaries(st.sampled_from([L.LABEL_KUEUE_QUEUE, "app"]), JSON, max_size=2)
META = JSON | st.fixed_dictionaries({}, optional={"name": JSON, "labels": LABELS | JSON})
TEMPLATE = JSON | st.fixed_dictionaries({}, optional={"metadata": META})
SPEC = JSON | st.fixed_dictionaries(
    {},
    optional={
        "template": TEMPLATE,
        "leaderWorkerTemplate": JSON
        | st.fixed_dictionaries(
            {}, optional={"leaderTemplate": TEMPLATE, "workerTemplate": TEMPLATE}
        ),
    },
)


@given(
    st.sampled_from(["Deployment", "StatefulSet", "LeaderWorkerSet", None]),
    st.fixed_dictionaries({}, optional={"metadata": META, "spec": SPEC}),
)
def test_any_workload_reads_as_a_queue_or_none_and_never_raises(
    kind: str | None, body: dict[str, Any]
) -> None:
    """A tenant's object, however odd: a queue named by text, or none."""
    obj = {"kind": kind, **body}
    queue = kueue_queue_of(obj)
    assert queue is None or (isinstance(queue, str) and queue)
    assert (kueue_managed_refusal(obj) is None) == (queue is None)
