"""The rollout reconciler against an in-memory API: a rollout that fails returns to the
previous table, and the profile's own rollout reads as Rolling while its pods are
replaced."""

from __future__ import annotations

from controller_harness import H100, Harness, deployment, profile_body, rounds, started

from sps_operator.api.result import build_patch
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.placement import PodInfo


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
