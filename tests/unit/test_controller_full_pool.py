"""A new table on a full GPU pool (issue 21 §0): the rolling update of a Deployment whose
pods take every GPU needs a surge slot. The replica lent to the run stays lent for the
rollout (its slot is the surge slot); what blocks a rollout is named; and the profile is
Ready/TableLive only when every ready pod runs the table, never on a deadline alone."""

from __future__ import annotations

from typing import Any

from capacity_harness import NO_GPU, harness, job_pod, start_waiting
from controller_harness import Harness, deployment, profile_body

from sps_operator.api import labels as L
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.plugin.explain import explain, render_explain

BORROW_SOON = {"capacity": {"mode": "BorrowReplica", "borrowAfterSeconds": 5}}
POD_LABELS = {"app": "sglang", "deploy": "server"}


def pods(h: Harness, table_hash: str | None, count: int, prefix: str) -> list[PodInfo]:
    return [
        PodInfo(f"{prefix}-{i}", dict(POD_LABELS), "n1", ready=True, table_hash=table_hash)
        for i in range(count)
    ]


def never_live_early(h: Harness) -> None:
    """Ready=True/TableLive only when every ready pod of the target runs the live table."""
    status = h.status()
    ready = h.condition("Ready")
    if ready[0] != "True":
        return
    live = {t["hash"] for t in status["targets"]}
    serving = {p.table_hash for p in h.pods_now() if p.ready and p.labels.get("deploy")}
    assert serving <= live, (ready, serving, live)


def passes(h: Harness, count: int) -> dict[str, Any]:
    for _ in range(count):
        h.tick()
        h.run_pass()
        never_live_early(h)
    return h.status()


def rolling_by_hand() -> tuple[Harness, dict[str, Any]]:
    """A first table published and on the template; the Deployment controller and the
    pods are the test's from here (an old pod without the table is ready)."""
    h = Harness.one_target()
    h.kube.instant_rollout = False
    h.pods_follow_templates = False
    h.pods = pods(h, None, 1, "old")
    h.profile_once()
    (table,) = h.status()["tables"]
    return h, table


def borrowed_then_finished(h: Harness) -> None:
    start_waiting(h)
    h.tick(5)
    h.run_pass()
    assert h.kube.obj("Deployment", "server")["spec"]["replicas"] == 1
    job_pod(h, unschedulable=None)  # the lent GPUs take the Job
    h.kube.instant_rollout = False  # from here the Deployment controller is the test's
    h.pods_follow_templates = False
    h.pods = [p for p in h.pods if p.labels.get("deploy") != "server"] + pods(h, None, 1, "old")
    h.finish()


def test_on_a_full_pool_the_lent_replica_is_the_surge_slot_of_the_new_tables_rollout() -> None:
    h = harness(replicas=2, **BORROW_SOON)  # default strategy: maxSurge 1, maxUnavailable 0
    borrowed_then_finished(h)
    status = passes(h, 2)
    (table,) = status["tables"]
    # The run is over, the table is on the template, the replica stays lent.
    assert status.get("currentRun") is None
    assert h.running_hash() == table["hash"]
    dep = h.kube.obj("Deployment", "server")
    assert dep["spec"]["replicas"] == 1 and h.kube.scales == [("server", 1)]
    held = status["rolloutBorrow"]
    assert (held["deployment"], held["replicas"], held["table"]) == ("server", 2, table["hash"])
    assert f'"hold":"{table["hash"]}"' in dep["metadata"]["annotations"][L.ANNOTATION_BORROWED]
    assert [lease["metadata"]["name"] for lease in h.kube.kinds("Lease")]  # the pool's
    assert "ReplicaHeldForRollout" in [r for r, _ in h.kube.events]
    assert h.condition("Ready")[0] == "False"
    (target,) = status["targets"]
    assert "stays lent to this rollout" in target["message"]

    # The Deployment controller rolls one replica: the new pod takes the lent slot.
    h.pods = [p for p in h.pods if p.labels.get("deploy") != "server"]
    h.pods += pods(h, table["hash"], 1, "new")
    h.kube.roll(dep)
    status = passes(h, 1)
    # Live on every ready pod at one replica: the replica comes back, still rolling.
    assert h.kube.scales == [("server", 1), ("server", 2)]
    assert status.get("rolloutBorrow") is None
    assert L.ANNOTATION_BORROWED not in dep["metadata"]["annotations"]
    assert not h.kube.kinds("Lease")
    (target,) = status["targets"]
    assert target["state"] == "Rolling" and "coming back" in target["message"]
    assert h.condition("Ready")[0] == "False"

    h.pods += pods(h, table["hash"], 1, "back")
    h.kube.roll(dep)
    passes(h, 1)
    assert h.condition("Ready")[:2] == ("True", "TableLive")


def test_a_deployment_that_rolls_in_place_gets_its_replica_back_when_the_run_ends() -> None:
    h = Harness()
    dep = deployment()
    dep["spec"]["replicas"] = 2
    dep["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    h.add(dep)
    h.kube.roll(h.kube.obj("Deployment", "server"))
    h.add(profile_body(**BORROW_SOON))
    h.place(count=2)
    start_waiting(h)
    h.tick(5)
    h.run_pass()
    job_pod(h, unschedulable=None)
    h.finish()
    status = passes(h, 1)
    assert status["tables"] and status.get("rolloutBorrow") is None
    assert h.kube.scales == [("server", 1), ("server", 2)]  # at once, no surge slot needed


def test_a_replica_kept_for_a_rollout_goes_back_after_the_progress_deadline() -> None:
    h = harness(replicas=2, **BORROW_SOON)
    borrowed_then_finished(h)
    passes(h, 2)
    assert h.status()["rolloutBorrow"]
    h.tick(600)
    passes(h, 1)
    assert h.status()["rolloutBorrow"]  # within the deadline and its margin
    h.tick(61)
    status = passes(h, 1)
    assert status.get("rolloutBorrow") is None
    assert h.kube.scales[-1] == ("server", 2)
    (note,) = [m for r, m in h.kube.events if r == "ReplicaReturned"]
    assert "did not complete within 660 s" in note


def test_status_is_never_live_while_a_ready_pod_runs_another_table() -> None:
    # The Deployment's status says rolled out, but a ready pod the operator sees still
    # runs without the table (it is not gone yet): not live.
    h = Harness.one_target()
    h.pods_follow_templates = False
    h.pods = pods(h, None, 1, "old")
    h.profile_once()
    (table,) = h.status()["tables"]
    assert h.running_hash() == table["hash"]
    assert h.condition("Ready")[:2] == ("False", "RolloutPending")
    h.pods = pods(h, table["hash"], 1, "new")
    h.settle(passes=1)
    assert h.condition("Ready")[:2] == ("True", "TableLive")


def test_a_rollout_past_its_deadline_with_no_previous_table_is_not_live_and_says_why() -> None:
    """Found on a full pool: the surge pod is Pending (Insufficient nvidia.com/gpu), the
    Deployment reports ProgressDeadlineExceeded, and the profile once turned Ready=True
    TableLive with the table on no running pod."""
    h, table = rolling_by_hand()
    h.pods.append(PodInfo("server-surge", dict(POD_LABELS), None, unschedulable=NO_GPU,
                          table_hash=table["hash"]))  # fmt: skip
    h.settle(passes=1)
    assert h.condition("Ready")[:2] == ("False", "RolloutBlocked")
    dep = h.kube.obj("Deployment", "server")
    dep["status"]["observedGeneration"] = dep["metadata"]["generation"]
    dep["status"]["conditions"] = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    ]
    for _ in range(3):
        h.tick(60)
        status = h.run_pass()
        ready = h.condition("Ready")
        assert ready[:2] == ("False", "RolloutBlocked"), ready
        assert "server-surge cannot be scheduled: " + NO_GPU in ready[2]
        assert "progressDeadlineSeconds and there is no previous table" in ready[2]
        (target,) = status["targets"]
        assert target["state"] == "Rolling" and target["blockedSince"]
    assert h.condition("RolledOut")[:2] == ("False", "RolloutBlocked")
    assert h.condition("Degraded")[:2] == ("True", "RolloutFailed")
    assert [r for r, _ in h.kube.events].count("RolloutFailed") == 1  # said once
    text = render_explain(explain(h.kube.obj("SpsProfile", "p")))
    assert "The rollout of the new table onto Deployment server is blocked" in text
    assert "Insufficient nvidia.com/gpu" in text and "maxUnavailable: 1" in text
    # A GPU frees up: the surge pod runs, the old one goes, and only then is it live.
    h.pods = pods(h, table["hash"], 1, "new")
    dep["status"]["conditions"] = []
    h.kube.roll(dep)
    h.settle(passes=1)
    assert h.condition("Ready")[:2] == ("True", "TableLive")


def test_a_crash_looping_or_unpullable_new_pod_is_named_with_the_kubelets_words() -> None:
    h, table = rolling_by_hand()
    stuck = "container sglang: CrashLoopBackOff: back-off 40s restarting failed container"
    h.pods.append(PodInfo("server-new", dict(POD_LABELS), "n1", table_hash=table["hash"],
                          stuck=stuck))  # fmt: skip
    h.settle(passes=1)
    ready = h.condition("Ready")
    assert ready[:2] == ("False", "RolloutBlocked") and f"pod server-new: {stuck}" in ready[2]
    text = render_explain(explain(h.kube.obj("SpsProfile", "p")))
    assert "kubectl logs <pod> --previous" in text
