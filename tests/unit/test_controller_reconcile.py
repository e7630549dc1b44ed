"""The reconcile pass against an in-memory API (pure decisions, real builders and fits).

The end-to-end tests run the same code against a real control plane; these pin the
orchestration: adoption after a restart, collection, gating, Job-creation failures,
reuse of a table, and that status is written only when it changes.
"""

from __future__ import annotations

from controller_harness import H100, H200, NS, Harness, deployment, profile_body, rounds
from kubernetes.client.rest import ApiException

from sps_operator.api.result import build_patch
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.reconcile.reconciler import Reconciler


def started(h: Harness, name: str = "p") -> dict:
    h.tick()
    h.run_pass(name)
    run = h.status(name)["currentRun"]
    assert run, h.status(name)
    return dict(run)


def test_first_run_adopted_after_a_restart_then_published_and_rolled() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    run = started(h)
    assert run["trigger"] == "NoTable" and run["gpuProduct"] == H100
    assert h.kube.obj("Job", run["job"])
    assert h.kube.obj("ServiceAccount", f"{run['name']}-profiler")
    assert h.condition("Profiling")[:2] == ("True", "NoTable")

    # A restarted operator that never saw its status write: same name, the Job is adopted.
    h.kube.obj("SpsProfile", "p")["status"]["currentRun"] = None
    h.reconciler = Reconciler(h.kube, h.settings, clock=lambda: h.now)
    h.tick()
    h.run_pass()
    assert h.status()["currentRun"]["job"] == run["job"]
    assert len(h.kube.kinds("Job")) == 1

    h.finish()
    status = h.settle()
    assert status.get("currentRun") is None
    (table,) = status["tables"]
    assert table["gpuProduct"] == H100 and table["run"] == run["name"]
    cm = h.kube.obj("ConfigMap", table["configMap"])
    assert cm["immutable"] is True and h.table_json(table["configMap"])["sample_batch_tokens"]
    assert ("ServiceAccount", NS, f"{run['name']}-profiler") not in h.kube.objects
    assert h.running_hash() == table["hash"]
    reasons = [e[0] for e in h.kube.events]
    assert "TablePublished" in reasons and "RolloutApplied" in reasons
    assert h.condition("Ready")[:2] == ("True", "TableLive")
    (target,) = status["targets"]
    assert target["state"] == "Live" and target["rolledOut"] is True

    # A pass with nothing new writes nothing.
    writes = len(h.kube.status_patches)
    h.tick()
    h.run_pass()
    assert len(h.kube.status_patches) == writes


def test_gpu_move_profiles_then_moving_back_reuses_without_a_job() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    for node in ("n1", "n2"):
        h.place(node=node)
        status = h.profile_once()
        assert status.get("currentRun") is None
    assert {t["gpuProduct"] for t in status["tables"]} == {H100, H200}
    jobs = {j["metadata"]["name"] for j in h.kube.kinds("Job")}
    h.place(node="n1")
    status = h.settle()
    assert status.get("currentRun") is None
    assert {j["metadata"]["name"] for j in h.kube.kinds("Job")} <= jobs
    h100 = next(t for t in status["tables"] if t["gpuProduct"] == H100)
    assert h.running_hash() == h100["hash"]


def test_mixed_gpu_products_give_a_condition_and_no_run() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place(node="n1", count=1)
    h.pods.append(h.pods[0].__class__("server-9", {"app": "sglang", "deploy": "server"}, "n2"))
    status = h.settle()
    assert status.get("currentRun") is None
    assert h.condition("Degraded")[:2] == ("True", "MixedGpuProducts")
    assert "several GPU products" in h.condition("Degraded")[2]
    assert h.condition("Ready")[:2] == ("False", "MixedGpuProducts")


def test_gate_failure_keeps_the_live_table_and_is_not_retried() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body(gates={"maxRmsMs": 0.05}, refresh={"token": "a"}))
    h.place()
    (live,) = h.profile_once()["tables"]

    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    run = started(h)
    assert run["trigger"] == "RefreshToken"
    h.finish(result=build_patch(status="succeeded", rounds=rounds(noise=0.3)))
    status = h.settle()
    assert status["tables"] == [live]
    assert status["rejectedTable"]["hash"] != live["hash"]
    assert h.condition("Degraded")[:2] == ("True", "FitQualityGateFailed")
    h.tick(3600)
    assert h.run_pass().get("currentRun") is None


def test_profiler_failure_is_reported_then_retried_after_backoff() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    first = started(h)
    h.finish(result=build_patch(status="failed", message="pin did not hold"), ok=False)
    h.tick()
    status = h.run_pass()
    assert status["lastFailure"]["reason"] == "ProfilingFailed"
    assert "pin did not hold" in status["lastFailure"]["message"]
    assert status.get("currentRun") is None
    h.tick(10)
    assert h.run_pass().get("currentRun") is None  # backing off
    h.tick(30)
    second = h.run_pass()["currentRun"]
    assert second["attempt"] == 2 and second["job"] != first["job"]
    assert ("Job", NS, first["job"]) not in h.kube.objects  # the old run's objects are gone


def test_rejected_job_lands_in_status() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body())
    h.place()
    h.kube.fail["create_Job"] = ApiException(status=422, reason="Invalid")
    h.tick()
    status = h.run_pass()
    assert status.get("currentRun") is None
    assert status["lastFailure"]["reason"] == "JobCreateFailed"
    assert h.condition("Degraded")[:2] == ("True", "JobCreateFailed")


def test_invalid_spec_is_reported_not_raised() -> None:
    h = Harness()
    body = profile_body()
    body["spec"]["table"] = {"kind": "Diagonal", "sweep": {"fracs": [0.5]}}
    h.add(body)
    h.run_pass()
    ready = h.condition("Ready")
    assert ready[:2] == ("False", "InvalidSpec")
    assert "fracs applies only to kind Additive" in ready[2]
    h.tick()
    h.run_pass()
    assert len(h.kube.status_patches) == 1  # nothing changed: no second write


def test_failed_rollout_returns_to_the_previous_table_and_says_so() -> None:
    h = Harness()
    h.add(deployment())
    h.add(profile_body(refresh={"token": "a"}))
    h.place()
    (first,) = h.profile_once()["tables"]

    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.kube.instant_rollout = False
    started(h)
    h.finish(result=build_patch(status="succeeded", rounds=rounds(scale=1.5)))
    (second,) = h.settle()["tables"]
    assert second["previous"] == first["configMap"]
    assert h.running_hash() == second["hash"]
    assert h.condition("RolledOut")[:2] == ("False", "RolloutPending")

    # The new pods never become available.
    dep = h.kube.obj("Deployment", "server")
    dep["status"]["observedGeneration"] = dep["metadata"]["generation"]
    dep["status"]["conditions"] = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    ]
    h.tick()
    status = h.run_pass()
    assert [t["hash"] for t in status["tables"]] == [first["hash"]]
    assert status["rejectedTable"]["hash"] == second["hash"]
    assert status["lastFailure"]["reason"] == "RolloutFailed"
    assert "rolled back to" in status["lastFailure"]["message"]
    assert h.running_hash() == first["hash"]
    assert "RolloutFailed" in [e[0] for e in h.kube.events]
    # No new run for the same trigger.
    dep["status"]["conditions"] = []
    h.kube.roll(dep)
    h.tick(3600)
    assert h.run_pass().get("currentRun") is None


def test_a_gpu_move_settles_from_status_across_a_restart() -> None:
    """The debounce applies only while pods move, and lives in status: a restarted
    operator continues it instead of starting over."""
    h = Harness(settings=Settings(gpu_debounce_seconds=30))
    h.add(deployment())
    h.add(profile_body())
    h.place(node="n1")
    h.tick()
    assert h.run_pass()["currentRun"]["gpuProduct"] == H100  # rolled out: settled at once
    h.finish()
    h.settle()
    # The Deployment moves to H200: a rollout in progress, pods on the new pool.
    dep = h.kube.obj("Deployment", "server")
    dep["metadata"]["generation"] += 1
    h.place(node="n2")
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert target["observedGpu"] == H200 and target["state"] == "Waiting"
    since = target["observedSince"]
    h.reconciler = Reconciler(h.kube, h.settings, clock=lambda: h.now)  # a restart
    h.tick(20)
    (target,) = h.run_pass()["targets"]
    assert target["observedSince"] == since and target["state"] == "Waiting"
    h.tick(10)
    status = h.run_pass()
    assert status["currentRun"]["gpuProduct"] == H200  # 30 s after the first sighting


def test_the_profiles_own_rollout_reads_as_rolling_while_its_pods_are_replaced() -> None:
    """Seen in the demo: between Profiling and Ready, `kubectl sps get` showed `Waiting`
    with no GPU and no table, because the rollout's pods were for a moment on no node.
    That is the rollout going on, and says so; a move the user makes still waits."""
    h = Harness(settings=Settings(gpu_debounce_seconds=30))
    h.add(deployment())
    h.add(profile_body())
    h.place()
    h.kube.instant_rollout = False
    h.tick()
    h.run_pass()
    h.finish()
    h.tick()
    rolling = h.run_pass()
    (target,) = rolling["targets"]
    assert target["state"] == "Rolling", target
    # The Deployment controller replaces the pod: the old one goes, the new one waits for
    # a node.
    h.pods = [PodInfo("server-1", {"app": "sglang", "deploy": "server"}, None)]
    h.tick()
    status = h.run_pass()
    (target,) = status["targets"]
    assert (target["state"], target["table"]) == ("Rolling", rolling["targets"][0]["table"])
    assert status["gpuProduct"] == H100 and status["liveTable"] == target["table"]
    assert h.condition("Ready")[:2] == ("False", "RolloutPending")
    # A pod of it on another product while it rolls: that is a move, to wait for.
    h.pods = [PodInfo("server-1", {"app": "sglang", "deploy": "server"}, "n2")]
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert target["state"] == "Waiting", target
    h.pods = [PodInfo("server-1", {"app": "sglang", "deploy": "server"}, None)]
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert target["state"] == "Waiting", target  # the Rolling it came from is gone
    # The new pod lands and the rollout completes: Live.
    h.place()
    h.kube.roll(h.kube.obj("Deployment", "server"))
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert target["state"] == "Live"
    # The user moves it: pods on no node is a move to wait for, not a rollout of ours.
    dep = h.kube.obj("Deployment", "server")
    dep["metadata"]["generation"] += 1
    h.pods = [PodInfo("server-2", {"app": "sglang", "deploy": "server"}, None)]
    h.tick()
    (target,) = h.run_pass()["targets"]
    assert target["state"] == "Waiting"
