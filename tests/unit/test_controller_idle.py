"""Idle must be idle (issue 18 §6): a state only an event can change asks for no timed
pass, and a pass reads O(its own objects) from the caches, not the fleet."""

from __future__ import annotations

import copy
from datetime import timedelta

from api_snapshot import api_snapshot
from controller_harness import NODES, NS, Harness, deployment, indexes_of, profile_body

from sps_operator.api.result import build_patch
from sps_operator.controller import indexes as ix
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies.placement import PodInfo


def wake_after_pass(h: Harness, name: str = "p") -> float | None:
    """One pass (LIST snapshot); the seconds until the pass it asks for (None: none)."""
    assert h.reconciler is not None
    h.tick()
    body = copy.deepcopy(h.kube.obj("SpsProfile", name, NS))
    return h.reconciler.reconcile(body, api_snapshot(h.kube, body, list(h.pods), NODES))


def scaled_to_zero(name: str = "server") -> dict:
    dep = deployment(name)
    dep["spec"]["replicas"] = 0
    dep["status"] = {"observedGeneration": 1, "replicas": 0}
    return dep


def test_a_target_scaled_to_zero_asks_for_no_pass_until_an_event() -> None:
    """Observed: 500 profiles of Deployments scaled to zero kept the operator at 99 % of a
    core: `Waiting` past its settle time asked for a pass "now", forever."""
    h = Harness()
    h.add(scaled_to_zero())
    h.add(profile_body())
    wakes = [wake_after_pass(h) for _ in range(4)]
    assert h.status()["targets"][0]["state"] == "Waiting"
    assert wakes[-1] is None, wakes


def test_pods_that_cannot_be_scheduled_ask_for_no_pass_until_an_event() -> None:
    h = Harness(settings=Settings(gpu_debounce_seconds=30, isolate_fits=False))
    h.add(deployment())
    h.add(profile_body())
    h.pods = [PodInfo("server-0", {"app": "sglang", "deploy": "server"}, None, phase="Pending")]
    wakes = [wake_after_pass(h) for _ in range(3)]
    h.tick(120)  # well past the debounce
    wakes.append(wake_after_pass(h))
    assert h.status()["targets"][0]["state"] == "Waiting"
    assert wakes[-1] is None, wakes


def test_a_moving_placement_asks_for_the_pass_that_settles_it_and_then_settles() -> None:
    """What time alone does change still gets its pass: a product seen during a rollout
    counts after the debounce."""
    h = Harness(settings=Settings(gpu_debounce_seconds=30, isolate_fits=False))
    dep = deployment()
    dep["status"]["updatedReplicas"] = 0  # mid-rollout
    h.add(dep)
    h.add(profile_body())
    h.place()
    first = wake_after_pass(h)
    assert first is not None and 0 < first <= 30
    h.tick(30)
    wake_after_pass(h)
    assert h.status().get("currentRun"), h.status()["targets"]


def test_a_retry_that_cannot_start_asks_for_no_pass_until_an_event() -> None:
    """A failed run is retried after its backoff; when that time comes and its target is
    gone (scaled to zero), the profile waits for an event, not for the next second."""
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish(result=build_patch(status="failed", message="boom"))
    h.settle()
    assert h.status()["lastFailure"]["retryable"]
    h.kube.obj("Deployment", "server")["spec"]["replicas"] = 0
    h.pods = []
    h.tick(3600)
    wakes = [wake_after_pass(h) for _ in range(3)]
    assert not h.status().get("currentRun")
    assert wakes[-1] is None, wakes


# --------------------------------------------------------------------------- O(own objects)


def fleet(size: int) -> Harness:
    """`size` profiles, each selecting its own Deployment (one running, the rest at zero),
    plus a Deployment nobody selects that mounts a ConfigMap of every name."""
    h = Harness()
    for i in range(size):
        dep = deployment(f"d{i}", labels={"app": "sglang", "bench": f"d{i}"})
        if i:
            dep["spec"]["replicas"] = 0
        h.add(dep)
        h.add(profile_body(f"p{i}", selector={"matchLabels": {"bench": f"d{i}"}}))
    h.place("d0")
    return h


def test_a_pass_reads_its_own_objects_not_the_fleet() -> None:
    h = fleet(200)
    idx = indexes_of(h.cluster_objects())
    body = h.kube.obj("SpsProfile", "p0")
    world = ix.world_for(body, idx)
    assert [d["metadata"]["name"] for d in world.deployments] == ["d0"]
    assert [p.name for p in world.profiles] == ["p0"]
    assert [p.name for p in world.pods] == ["d0-0"]
    assert list(world.node_labels) == ["n1"]
    # And the pass it feeds sees what a LIST of the whole namespace sees.
    h.tick()
    status = h.run_cached_pass("p0")
    assert status["currentRun"]["target"] == "d0"
    assert h.run_cached_pass("p7")["targets"][0]["state"] == "Waiting"


def test_a_cached_pass_and_a_listed_pass_agree() -> None:
    """The same fleet, passed once through the caches and once through LISTs: the same
    status (the caches' shortcuts drop nothing a pass needs)."""
    cached, listed = fleet(12), fleet(12)
    for other in (cached, listed):
        other.tick(timedelta(seconds=5).total_seconds())
    for name in ("p0", "p3"):
        for _ in range(3):
            cached.tick()
            listed.tick()
            cached.run_cached_pass(name)
            listed.run_pass(name)
        assert cached.status(name) == listed.status(name)
