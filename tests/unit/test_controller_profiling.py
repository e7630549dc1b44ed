"""The profiling reconciler against an in-memory API: what becomes of a run that fails,
is refused, or measures a table the gates refuse, and when no run starts at all."""

from __future__ import annotations

from controller_harness import NS, Harness, deployment, profile_body, rounds, started
from kubernetes.client.rest import ApiException

from sps_operator.api.result import build_patch


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
