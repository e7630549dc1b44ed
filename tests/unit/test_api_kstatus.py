"""Flux reads an SpsProfile's health with kstatus: the status follows its conventions.

`kstatus` below re-implements the rules kstatus applies to a custom resource
(sigs.k8s.io/cli-utils, pkg/kstatus/status: `Compute` in status.go, `checkGenericProperties`
and `checkGeneration` in generic.go): a deletionTimestamp is Terminating; an
observedGeneration other than metadata.generation is InProgress; a condition `Reconciling`
True is InProgress, `Stalled` True is Failed; otherwise the resource is Current (Ready is
not read). kustomize-controller's health checks (`wait: true`, `healthChecks`) wait for
Current and fail on Failed, so without Reconciling/Stalled a failed profile passed them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from controller_harness import NS, Harness, deployment, profile_body
from fakekube import FakeKube

from sps_operator.api import reason_registry as registry
from sps_operator.api import reasons as R
from sps_operator.api.status import Condition
from sps_operator.controller.policies import conditions as cond
from sps_operator.controller.reconcile.reconciler import Reconciler

CURRENT, IN_PROGRESS, FAILED, TERMINATING = "Current", "InProgress", "Failed", "Terminating"
FLUX_READS = {
    R.Health.HEALTHY: CURRENT,
    R.Health.SUSPENDED: CURRENT,
    R.Health.PROGRESSING: IN_PROGRESS,
    R.Health.DEGRADED: FAILED,
}


def kstatus(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if meta.get("deletionTimestamp"):
        return TERMINATING
    observed = status.get("observedGeneration")
    if "generation" in meta and observed is not None and observed != meta["generation"]:
        return IN_PROGRESS
    for c in status.get("conditions") or []:
        if c.get("type") == "Reconciling" and c.get("status") == "True":
            return IN_PROGRESS
        if c.get("type") == "Stalled" and c.get("status") == "True":
            return FAILED
    return CURRENT


NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def kstatus_of(*conditions: tuple[str, str, str]) -> tuple[str, list[Condition]]:
    listed = [
        Condition(
            type=t, status=s, reason=r, message="m", last_transition_time="2026-03-01T11:00:00Z"
        )
        for t, s, r in conditions
    ]
    written = cond.with_kstatus(listed, NOW, 1)
    obj = {
        "metadata": {"generation": 1},
        "status": {"observedGeneration": 1, "conditions": [c.to_k8s() for c in written]},
    }
    return kstatus(obj), written


@pytest.mark.parametrize("reason", sorted(registry.REASONS))
def test_flux_reads_every_ready_reason_as_argo_cd_does(reason: str) -> None:
    kind = registry.REASONS[reason].kind
    ready = ("Ready", "True" if kind == R.Kind.LIVE else "False", reason)
    for profiling in (("Profiling", "False", "Idle"), ("Profiling", "False", reason)):
        got, written = kstatus_of(profiling, ready)
        health = registry.health({c.type: (str(c.status), c.reason) for c in written})
        assert got == FLUX_READS[health], (profiling, ready)
        types = [c.type for c in written]
        assert types.count("Reconciling") == 1 and types.count("Stalled") == 1


def test_waiting_is_in_progress_giving_up_is_failed_suspended_is_current() -> None:
    waiting = ("Profiling", "False", "WaitingForGPUs")
    assert kstatus_of(waiting, ("Ready", "False", "WaitingForGPUs"))[0] == IN_PROGRESS
    gave_up = ("Profiling", "False", "Idle")
    assert kstatus_of(gave_up, ("Ready", "False", "WaitingForGPUs"))[0] == FAILED
    assert kstatus_of(gave_up, ("Ready", "False", "Suspended"))[0] == CURRENT
    assert kstatus_of(gave_up, ("Ready", "False", "NoTargets"))[0] == CURRENT
    assert kstatus_of(gave_up, ("Ready", "False", "RolloutPending"))[0] == IN_PROGRESS
    _, written = kstatus_of(waiting, ("Ready", "False", "WaitingForGPUs"))
    reconciling = next(c for c in written if c.type == "Reconciling")
    assert (reconciling.reason, reconciling.observed_generation) == ("WaitingForGPUs", 1)


def profile(h: Harness) -> dict[str, Any]:
    return dict(h.kube.obj("SpsProfile", "p", NS))


def test_a_profiles_life_as_flux_sees_it() -> None:
    h = Harness.one_target()
    # No status yet (the API drops a status sent on create): kstatus reads Current until the
    # operator's first pass, a limit of kstatus that docs/gitops.md states.
    assert kstatus(profile(h)) == CURRENT
    h.tick()
    h.run_pass()
    assert profile(h)["status"]["observedGeneration"] == 1
    assert kstatus(profile(h)) == IN_PROGRESS  # a run measures
    h.finish()
    h.settle()
    assert h.condition("Ready")[:2] == ("True", "TableLive")
    assert kstatus(profile(h)) == CURRENT
    assert h.condition("Reconciling")[0] == h.condition("Stalled")[0] == "False"

    # A new spec the operator has not seen is in progress whatever the conditions say.
    body = h.kube.obj("SpsProfile", "p", NS)
    body["metadata"]["generation"] = 2
    assert kstatus(profile(h)) == IN_PROGRESS
    h.run_pass()
    assert kstatus(profile(h)) == CURRENT


def test_a_failed_run_without_a_table_is_failed_and_its_retry_in_progress() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish(ok=False)
    h.tick()
    h.run_pass()
    assert h.condition("Ready")[1] == "ProfilingFailed"
    assert kstatus(profile(h)) == FAILED
    assert h.condition("Stalled")[:2] == ("True", "ProfilingFailed")
    h.tick(60)
    h.run_pass()  # the retry starts
    assert profile(h)["status"]["currentRun"]["attempt"] == 2
    assert kstatus(profile(h)) == IN_PROGRESS


def test_an_invalid_spec_is_failed() -> None:
    kube = FakeKube()
    body = profile_body()
    body["spec"]["table"] = {"kind": "Diagonal", "sweep": {"fracs": [0.5]}}
    kube.put(body)
    kube.put(deployment())
    Reconciler(kube).reconcile(kube.obj("SpsProfile", "p", NS), None)  # type: ignore[arg-type]
    obj = kube.obj("SpsProfile", "p", NS)
    assert kstatus(obj) == FAILED
    stalled = next(c for c in obj["status"]["conditions"] if c["type"] == "Stalled")
    assert stalled["reason"] == "InvalidSpec"
