"""The reconcile pass against an in-memory API (pure decisions, real builders and fits).

The end-to-end tests run the same code against a real control plane; these pin the
whole pass: adoption after a restart, publish and roll, reuse of a table after a GPU
move and back, a move's debounce across a restart, an invalid spec, and that status is
written only when it changes (each reconciler's own cases: test_controller_profiling.py,
test_controller_rollout.py).
"""

from __future__ import annotations

from controller_harness import H100, H200, NS, Harness, deployment, profile_body, started

from sps_operator.controller.passes.state import Settings
from sps_operator.controller.reconcile.reconciler import Reconciler


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
