"""Pure parts of capacity and rollouts: what the pod index keeps, rollout facts, borrow
records and pool claims read from untrusted text, and times from another clock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from sps_operator.api.status import BorrowRecord, FailureRecord, RunStatus, SpsProfileStatus
from sps_operator.controller.kube.ratelimit import Periodic
from sps_operator.controller.policies import clocks
from sps_operator.controller.policies.borrow import (
    BorrowTag,
    PoolClaim,
    borrow_patch,
    confirmed_tag,
    pool_lease,
    read_claim,
    read_tag,
    written_by_operator,
)
from sps_operator.controller.policies.deployments import (
    every_ready_pod_runs,
    max_unavailable,
    rollout_blockers,
)
from sps_operator.controller.policies.placement import MAX_POD_TEXT, PodInfo, pod_info

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
LABELS = {"deploy": "server"}


def dep(replicas: int = 2, strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": LABELS}}
    if strategy is not None:
        spec["strategy"] = strategy
    return {"metadata": {"name": "server", "resourceVersion": "7"}, "spec": spec, "status": {}}


# ----------------------------------------------------------------------------- pods


def test_the_pod_index_keeps_the_schedulers_and_kubelets_words_bounded() -> None:
    status = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "message": "0/4 nodes: " + "x" * 5000},
            {"type": "Ready", "status": "False"},
        ],
        "containerStatuses": [
            {"name": "sidecar", "state": {"running": {}}},
            {
                "name": "sglang",
                "restartCount": 7,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 5m"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            },
        ],
    }
    meta = {"annotations": {"sps.dev/table-hash": "h" * 500}}
    info = pod_info("server-1", LABELS, {}, status, meta)
    assert info.unschedulable is not None and len(info.unschedulable) == MAX_POD_TEXT
    assert info.stuck == (
        "container sglang: CrashLoopBackOff: back-off 5m (last exit 1 Error, 7 restarts)"
    )
    assert info.table_hash == "h" * 64 and info.ready is False
    pulling = {"containerStatuses": [{"name": "sglang", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}}}],
        "conditions": [{"type": "Ready", "status": "True"}]}  # fmt: skip
    info = pod_info("server-2", LABELS, {"nodeName": "n1"}, pulling, {})
    assert info.stuck == 'container sglang: ImagePullBackOff: Back-off pulling image "nope:1"'
    assert info.ready is True and info.table_hash is None
    creating = {"containerStatuses": [{"name": "s", "state": {"waiting": {"reason":
                "ContainerCreating"}}}]}  # fmt: skip
    assert pod_info("server-3", LABELS, {}, creating, {}).stuck is None  # on its way


# ----------------------------------------------------------------------------- rollouts


def test_a_rollout_needs_a_surge_slot_exactly_when_it_may_take_no_pod_down_first() -> None:
    assert max_unavailable(dep(2), 2) == 0  # defaults 25 %/25 %: floor(0.5) = 0
    assert max_unavailable(dep(4), 4) == 1  # floor(1.0) = 1: rolls in place
    assert max_unavailable(dep(2, {"rollingUpdate": {"maxUnavailable": 1}}), 2) == 1
    assert max_unavailable(dep(8, {"rollingUpdate": {"maxUnavailable": "10%"}}), 8) == 0
    assert max_unavailable(dep(2, {"type": "Recreate"}), 2) is None
    # Both zero: the Deployment controller lets one go, or it could never progress.
    assert max_unavailable(dep(3, {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}), 3) == 1


def test_live_means_every_ready_pod_of_the_deployment_runs_the_table() -> None:
    new = PodInfo("a", LABELS, "n1", ready=True, table_hash="new")
    old_unready = PodInfo("b", LABELS, "n1", ready=False, table_hash="old")
    old_leaving = PodInfo("c", LABELS, "n1", deleting=True, ready=True, table_hash="old")
    other = PodInfo("d", {"deploy": "other"}, "n1", ready=True, table_hash="old")
    assert every_ready_pod_runs(dep(), [new, old_unready, old_leaving, other], "new")
    old = PodInfo("e", LABELS, "n1", ready=True, table_hash=None)
    assert not every_ready_pod_runs(dep(), [new, old], "new")


def test_what_blocks_a_rollout_is_named_pod_by_pod_and_bounded() -> None:
    pods = [
        PodInfo(f"surge-{i}", LABELS, None, unschedulable="0/2 nodes: Insufficient gpu",
                table_hash="new")
        for i in range(5)
    ]  # fmt: skip
    pods.append(PodInfo("old", LABELS, None, unschedulable="not ours", table_hash="old"))
    text = rollout_blockers(dep(), pods, "new")
    assert text is not None and text.count("cannot be scheduled") == 3
    assert text.endswith("(and 2 more)") and "not ours" not in text
    failing = dep()
    quota = 'pods "x" is forbidden: exceeded quota'
    failing["status"]["conditions"] = [
        {"type": "ReplicaFailure", "status": "True", "message": quota}
    ]
    assert "exceeded quota" in str(rollout_blockers(failing, [], "new"))
    assert rollout_blockers(dep(), [], "new") is None


# ----------------------------------------------------------------------------- records


def test_a_record_is_what_the_pool_lease_says_never_what_a_deployment_says() -> None:
    """Issue 33 §1: `kubectl annotate --field-manager=sps-operator` makes any record look
    written by the operator. The pool Lease (the operator's namespace) is the record; the
    copy on the Deployment only names it."""
    at = "2026-03-01T12:00:00Z"
    tag = BorrowTag("uid", "p", "run", 9, "H100", at)
    d = dep()
    d["metadata"]["annotations"] = {"sps.dev/borrowed": tag.to_annotation()}
    d["metadata"]["managedFields"] = [{"manager": "sps-operator", "operation": "Update",
        "fieldsV1": {"f:metadata": {"f:annotations": {"f:sps.dev/borrowed": {}}}}}]  # fmt: skip
    assert read_tag(d) == tag and written_by_operator(d)  # the forgery looks perfect ...
    assert confirmed_tag(None, d) is None  # ... and is no borrow without its Lease
    ns, name = d["metadata"].setdefault("namespace", "serving"), d["metadata"]["name"]
    claim = PoolClaim(ns, "p", "uid", "run", name, "H100", at, replicas=2)
    assert confirmed_tag(claim, d) == replace(tag, replicas=2)  # the Lease's numbers
    for other in (replace(claim, namespace="team-a"), replace(claim, deployment="x"),
                  replace(claim, run="r2"), replace(claim, profile_uid="u2")):  # fmt: skip
        assert confirmed_tag(other, d) is None
    bare = dep()  # the Lease alone: claimed, but the scale was never written
    bare["metadata"]["namespace"] = ns
    assert confirmed_tag(claim, bare) is None
    # A claim of the previous version (numbers on the Deployment) is honoured with a copy
    # the operator's field manager wrote, as that version did, never with another's.
    legacy = replace(claim, replicas=None)
    assert confirmed_tag(legacy, d) == tag
    d["metadata"]["managedFields"][0]["manager"] = "kubectl-annotate"
    assert confirmed_tag(legacy, d) is None


def test_a_borrow_is_one_conditional_write_of_record_and_replicas() -> None:
    tag = BorrowTag("uid", "p", "run", 2, "H100", "2026-03-01T12:00:00Z", hold="abc")
    patch = borrow_patch(dep(), tag, 1)
    assert patch["metadata"]["resourceVersion"] == "7" and patch["spec"] == {"replicas": 1}
    assert read_tag({"metadata": {"annotations": {"sps.dev/borrowed": patch["metadata"][
        "annotations"]["sps.dev/borrowed"]}}}) == tag  # fmt: skip
    undo = borrow_patch(dep(), None, None)
    assert undo["metadata"]["annotations"] == {"sps.dev/borrowed": None} and "spec" not in undo


def test_a_pool_claim_round_trips_through_its_lease() -> None:
    claim = PoolClaim("ns", "p", "uid", "run", "server", "NVIDIA-H100", "2026-03-01T12:00:00Z")
    lease = pool_lease(claim, "sps-system")
    assert lease["metadata"]["namespace"] == "sps-system"
    assert lease["spec"]["holderIdentity"] == "ns/p"
    assert read_claim(lease) == claim
    assert (
        pool_lease(claim, "x")["metadata"]["name"]
        == pool_lease(PoolClaim("other", "q", "u2", "r2", "d", "NVIDIA-H100", "t"), "x")[
            "metadata"
        ]["name"]
    )  # one Lease per GPU product


annotation_text = st.one_of(
    st.text(max_size=300),
    st.dictionaries(
        st.text(max_size=12),
        st.one_of(st.none(), st.integers(), st.text(max_size=20), st.floats(allow_nan=True),
                  st.lists(st.integers(), max_size=3)),
    ).map(json.dumps),
    st.fixed_dictionaries({k: st.one_of(st.text(max_size=10), st.integers(-(10**30), 10**30),
                                        st.floats())
        for k in ("profile_uid", "profile", "run", "replicas", "product", "at")}).map(json.dumps),
    # A pool claim, with the lender's kind (any text, or a kind the operator serves).
    st.fixed_dictionaries({k: st.text(max_size=10) for k in (
        "namespace", "profile", "profile_uid", "run", "deployment", "product", "at")},
        optional={"kind": st.one_of(st.sampled_from(["StatefulSet", "LeaderWorkerSet"]),
                                    st.text(max_size=16), st.integers(), st.none()),
                  "replicas": st.integers(-5, 10)}).map(json.dumps),
)  # fmt: skip


@given(annotation_text)
@example('{"profile_uid":"a","profile":"p","run":"r","replicas":Infinity,"product":"x","at":"t"}')
@example('{"profile_uid":"a","profile":"p","run":"r","replicas":1e400,"product":"x","at":"t"}')
def test_any_record_text_reads_as_a_record_or_as_none(text: str) -> None:
    tag = read_tag({"metadata": {"annotations": {"sps.dev/borrowed": text}}})
    assert tag is None or isinstance(tag.replicas, int)
    claim = read_claim({"metadata": {"annotations": {"sps.dev/borrow-claim": text}}})
    assert claim is None or claim.replicas is None or 0 < claim.replicas <= 100_000
    assert claim is None or all(isinstance(getattr(claim, k), str) for k in ("run", "hold"))
    # Only a kind the operator lends from: the give-back reads and scales that kind.
    assert claim is None or claim.kind in ("Deployment", "StatefulSet", "LeaderWorkerSet")


# ----------------------------------------------------------------------------- clocks


@given(st.text(max_size=40))
def test_any_recorded_time_text_is_a_time_or_none(text: str) -> None:
    when = clocks.parse(text)
    assert when is None or when.tzinfo is not None
    assert clocks.elapsed(text, NOW) >= 0.0


def test_times_ahead_of_this_clock_beyond_the_bound_are_counted_from_now() -> None:
    ahead = (NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    near = (NOW + timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    past = "2026-03-01T11:00:00Z"
    status = SpsProfileStatus(
        current_run=RunStatus(
            name="r", job="r", phase="Diagonal", gpu_product="g", fingerprint="f", target="t",
            trigger="NoTable", started_at=ahead, borrow=BorrowRecord(deployment="t",
            replicas=2, at="garbage"), running_since=near,
        ),
        last_failure=FailureRecord(run="r", reason="X", message="m", at=past),
        last_schedule_time=ahead,
        next_schedule_time=ahead,  # in the future by design: left alone
    )  # fmt: skip
    found = clocks.bound_recorded_times(status, NOW)
    assert len(found) == 3, found
    assert "currentRun.startedAt" in found[0] and "3600 s ahead" in found[0]
    assert "currentRun.borrow.at 'garbage' is not a time" in found
    run = status.current_run
    assert run is not None and run.borrow is not None
    assert run.started_at == run.borrow.at == status.last_schedule_time == "2026-03-01T12:00:00Z"
    assert run.running_since == near and status.last_failure is not None
    assert status.last_failure.at == past and status.next_schedule_time == ahead
    assert clocks.elapsed(near, NOW) == 0.0 and clocks.trusted(ahead, NOW) is None


def test_work_many_passes_ask_for_is_done_once_per_interval() -> None:
    now = [0.0]
    once = Periodic(60.0, clock=lambda: now[0])
    assert once.due() and not once.due()
    now[0] = 59.0
    assert not once.due()
    now[0] = 60.0
    assert once.due()
