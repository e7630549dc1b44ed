"""The reconcile pass against an in-memory API (pure decisions, real builders and fits).

The end-to-end tests run the same code against a real control plane; these pin the
orchestration: adoption after a restart, collection, gating, Job-creation failures,
reuse of a table, and that status is written only when it changes.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.rest import ApiException

from sps_operator.controller.placement import PodInfo
from sps_operator.controller.reconcile import Reconciler, Settings
from sps_operator.profiler.publish import build_patch

NS = "serving"
H100, H200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"
NODES = {"n1": {"nvidia.com/gpu.product": H100}, "n2": {"nvidia.com/gpu.product": H200}}


def _selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for part in filter(None, selector.split(",")):
        key, _, value = part.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKube:
    """Enough of `controller.kube.Kube` for the reconcile pass, in memory."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.status_patches: list[dict[str, Any]] = []
        self.applied: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []
        self.reject_jobs = False
        self.clock = 0

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.clock += 1
        obj["metadata"].setdefault("creationTimestamp", f"2026-03-01T00:00:{self.clock:02d}Z")
        return obj

    def list_deployments(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o)
            for (kind, _), o in self.objects.items()
            if kind == "Deployment"
            and _selector_matches(label_selector, o["metadata"].get("labels", {}))
        ]

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(("Job", name)))

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects.get(("ConfigMap", name)))

    def _list(self, kind: str, selector: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(o)
            for (k, _), o in self.objects.items()
            if k == kind and _selector_matches(selector, o["metadata"].get("labels", {}))
        ]

    def list_config_maps(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self._list("ConfigMap", label_selector)

    def list_jobs(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self._list("Job", label_selector)

    def create(self, obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Job" and self.reject_jobs:
            raise ApiException(status=422, reason="Invalid")
        key = (obj["kind"], obj["metadata"]["name"])
        if key in self.objects:
            return False
        self.objects[key] = self._stamp(copy.deepcopy(obj))
        return True

    def delete(self, kind: str, namespace: str, name: str) -> None:
        self.objects.pop((kind, name), None)

    def apply_deployment(self, body: dict[str, Any], force: bool = True) -> None:
        self.applied.append(body)
        dep = self.objects[("Deployment", body["metadata"]["name"])]
        template = dep["spec"]["template"]
        template.setdefault("metadata", {}).setdefault("annotations", {}).update(
            body["spec"]["template"]["metadata"]["annotations"]
        )
        for applied in body["spec"]["template"].get("spec", {}).get("containers", []):
            for container in template["spec"]["containers"]:
                if container["name"] == applied["name"]:
                    container["args"] = applied["args"]
        # The Deployment controller and the kubelet, instantly: rolled and available.
        dep["metadata"]["generation"] += 1
        dep["status"]["observedGeneration"] = dep["metadata"]["generation"]

    def apply_config_map(self, body: dict[str, Any], force: bool = True) -> None:
        self.objects[("ConfigMap", body["metadata"]["name"])] = copy.deepcopy(body)

    def patch_config_map_metadata(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        raise AssertionError("not used by reconcile")

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.status_patches.append(copy.deepcopy(status))

    def event(self, involved: Any, type_: str, reason: str, message: str, now: Any) -> None:
        self.events.append((reason, message))


def deployment(gpu_node: str = "n1") -> dict[str, Any]:
    return {
        "kind": "Deployment",
        "metadata": {
            "name": "server",
            "namespace": NS,
            "labels": {"app": "sglang"},
            "generation": 1,
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "sglang"}},
            "template": {
                "metadata": {"labels": {"app": "sglang"}},
                "spec": {
                    "containers": [
                        {
                            "name": "sglang",
                            "image": "lmsysorg/sglang:v1",
                            "args": ["--speculative-dspark-block-size", "3", "--port", "30000"],
                        }
                    ]
                },
            },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "availableReplicas": 1,
        },
    }


def profile(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "sglang"}},
        "table": {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4]}},
    }
    body.update(spec)
    return {
        "apiVersion": "sps.dev/v1alpha1",
        "kind": "SpsProfile",
        "metadata": {
            "name": "p",
            "namespace": NS,
            "uid": "uid-1",
            "generation": 1,
            "creationTimestamp": "2026-03-01T00:00:00Z",
        },
        "spec": body,
        "status": status or {},
    }


def pods(node: str = "n1") -> list[PodInfo]:
    return [PodInfo("server-1", {"app": "sglang"}, node)]


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)


def reconciler(kube: FakeKube, clock: Clock) -> Reconciler:
    return Reconciler(kube, Settings(gpu_debounce_seconds=0), clock=clock)  # type: ignore[arg-type]


def rounds(scale: float = 1.0, noise: float = 0.0) -> list[dict[str, Any]]:
    out = []
    for repeat in (0, 1):
        for bs in (1, 2, 4):
            t = (0.010 + 0.001 * bs) * scale * (1 + (noise if repeat else -noise))
            out.append(
                {
                    "repeat": repeat,
                    "batch_size": bs,
                    "batch_size_per_rank": bs,
                    "frac": None,
                    "batch_tokens": bs * 4,
                    "steps_per_sec": 1.0 / t,
                }
            )
    return out


def finish_job(kube: FakeKube, job: str, result: dict[str, Any], ok: bool = True) -> None:
    kube.objects[("Job", job)]["status"] = {
        "conditions": [{"type": "Complete" if ok else "Failed", "status": "True"}]
    }
    cm = kube.objects[("ConfigMap", f"{job}-result")]
    cm["data"] = {k: v for k, v in result["data"].items() if v is not None}


def last_status(kube: FakeKube) -> dict[str, Any]:
    return kube.status_patches[-1]


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_first_run_adopted_after_a_restart_then_published_and_rolled() -> None:
    kube, clock = FakeKube(), Clock()
    kube.create(deployment())
    reconciler(kube, clock).reconcile(profile(), pods(), NODES)
    status = last_status(kube)
    run = status["currentRun"]
    assert run["trigger"] == "NoTable" and run["gpuProduct"] == H100
    assert ("Job", run["job"]) in kube.objects
    assert ("ServiceAccount", f"{run['name']}-profiler") in kube.objects
    assert conditions(status)["Profiling"] == ("True", "NoTable")

    # A restarted operator that never saw its status write: same name, the Job is adopted.
    clock.tick()
    reconciler(kube, clock).reconcile(profile(), pods(), NODES)
    assert last_status(kube)["currentRun"]["job"] == run["job"]
    assert len([k for k in kube.objects if k[0] == "Job"]) == 1

    finish_job(kube, run["job"], build_patch(status="succeeded", rounds=rounds(), manifest={}))
    clock.tick()
    rec = reconciler(kube, clock)
    rec.reconcile(profile(last_status(kube)), pods(), NODES)
    status = last_status(kube)
    assert status["currentRun"] is None
    (table,) = status["tables"]
    assert table["gpuProduct"] == H100 and table["run"] == run["name"]
    cm = kube.objects[("ConfigMap", table["configMap"])]
    assert cm["immutable"] is True and json.loads(cm["data"]["table.json"])["sample_batch_tokens"]
    assert ("ServiceAccount", f"{run['name']}-profiler") not in kube.objects
    # Rolled out by server-side apply with the table's hash.
    (applied,) = kube.applied
    annotations = applied["spec"]["template"]["metadata"]["annotations"]
    assert annotations["sps.dev/table-hash"] == table["hash"]
    assert ("TablePublished" in [e[0] for e in kube.events]) and (
        "RolloutApplied" in [e[0] for e in kube.events]
    )

    # Next pass: the Deployment has rolled → Ready; a pass with nothing new writes nothing.
    clock.tick()
    rec.reconcile(profile(last_status(kube)), pods(), NODES)
    status = last_status(kube)
    assert conditions(status)["Ready"] == ("True", "TableLive")
    writes = len(kube.status_patches)
    rec.reconcile(profile(last_status(kube)), pods(), NODES)
    assert len(kube.status_patches) == writes


def test_gpu_move_profiles_then_moving_back_reuses_without_a_job() -> None:
    kube, clock = FakeKube(), Clock()
    kube.create(deployment())
    rec = reconciler(kube, clock)
    status: dict[str, Any] = {}
    for node in ("n1", "n2"):
        rec.reconcile(profile(status), pods(node), NODES)
        run = last_status(kube)["currentRun"]
        finish_job(kube, run["job"], build_patch(status="succeeded", rounds=rounds(), manifest={}))
        clock.tick()
        rec.reconcile(profile(last_status(kube)), pods(node), NODES)
        status = last_status(kube)
        assert status["currentRun"] is None
    assert {t["gpuProduct"] for t in status["tables"]} == {H100, H200}
    jobs = {k for k in kube.objects if k[0] == "Job"}
    clock.tick()
    rec.reconcile(profile(status), pods("n1"), NODES)
    assert last_status(kube)["currentRun"] is None
    assert {k for k in kube.objects if k[0] == "Job"} <= jobs
    h100 = next(t for t in status["tables"] if t["gpuProduct"] == H100)
    assert (
        kube.applied[-1]["spec"]["template"]["metadata"]["annotations"]["sps.dev/table-hash"]
        == h100["hash"]
    )


def test_mixed_gpu_products_give_a_condition_and_no_run() -> None:
    kube, clock = FakeKube(), Clock()
    kube.create(deployment())
    mixed = [PodInfo("a", {"app": "sglang"}, "n1"), PodInfo("b", {"app": "sglang"}, "n2")]
    reconciler(kube, clock).reconcile(profile(), mixed, NODES)
    status = last_status(kube)
    assert status["currentRun"] is None
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and "several GPU products" in degraded["message"]


def test_gate_failure_keeps_the_live_table_and_is_not_retried() -> None:
    kube, clock = FakeKube(), Clock()
    kube.create(deployment())
    rec = reconciler(kube, clock)
    spec = {"gates": {"maxRmsMs": 0.05}, "refresh": {"token": "a"}}
    rec.reconcile(profile(**spec), pods(), NODES)
    run = last_status(kube)["currentRun"]
    finish_job(kube, run["job"], build_patch(status="succeeded", rounds=rounds(), manifest={}))
    clock.tick()
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    (live,) = last_status(kube)["tables"]

    spec["refresh"] = {"token": "b"}
    clock.tick()
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    run = last_status(kube)["currentRun"]
    assert run["trigger"] == "RefreshToken"
    noisy = build_patch(status="succeeded", rounds=rounds(noise=0.3), manifest={})
    finish_job(kube, run["job"], noisy)
    clock.tick()
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    status = last_status(kube)
    assert status["tables"] == [live]
    assert status["rejectedTable"]["hash"] != live["hash"]
    assert conditions(status)["Degraded"] == ("True", "FitQualityGateFailed")
    clock.tick(3600)
    rec.reconcile(profile(status, **spec), pods(), NODES)
    assert last_status(kube)["currentRun"] is None


def test_profiler_failure_is_reported_then_retried_after_backoff() -> None:
    kube, clock = FakeKube(), Clock()
    kube.create(deployment())
    rec = reconciler(kube, clock)
    rec.reconcile(profile(), pods(), NODES)
    first = last_status(kube)["currentRun"]
    finish_job(
        kube, first["job"], build_patch(status="failed", message="pin did not hold"), ok=False
    )
    clock.tick()
    rec.reconcile(profile(last_status(kube)), pods(), NODES)
    status = last_status(kube)
    assert status["lastFailure"]["reason"] == "ProfilingFailed"
    assert "pin did not hold" in status["lastFailure"]["message"]
    assert status["currentRun"] is None
    clock.tick(10)
    rec.reconcile(profile(status), pods(), NODES)
    assert last_status(kube)["currentRun"] is None  # backing off
    clock.tick(30)
    rec.reconcile(profile(last_status(kube)), pods(), NODES)
    second = last_status(kube)["currentRun"]
    assert second["attempt"] == 2 and second["job"] != first["job"]
    assert ("Job", first["job"]) not in kube.objects  # the old run's objects are cleaned up


def test_rejected_job_lands_in_status() -> None:
    kube, clock = FakeKube(), Clock()
    kube.create(deployment())
    kube.reject_jobs = True
    reconciler(kube, clock).reconcile(profile(), pods(), NODES)
    status = last_status(kube)
    assert status["currentRun"] is None
    assert status["lastFailure"]["reason"] == "JobCreateFailed"
    assert conditions(status)["Degraded"] == ("True", "JobCreateFailed")


def test_invalid_spec_is_reported_not_raised() -> None:
    kube, clock = FakeKube(), Clock()
    body = profile()
    body["spec"]["table"] = {"kind": "Diagonal", "sweep": {"fracs": [0.5]}}
    reconciler(kube, clock).reconcile(body, [], NODES)
    ready = next(c for c in last_status(kube)["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert "fracs applies only to kind Additive" in ready["message"]
    body["status"] = last_status(kube)
    clock.tick()
    reconciler(kube, clock).reconcile(body, [], NODES)
    assert len(kube.status_patches) == 1  # nothing changed: no second write


def test_failed_rollout_returns_to_the_previous_table_and_says_so() -> None:
    kube, clock = FakeKube(), Clock()
    kube.create(deployment())
    rec = reconciler(kube, clock)
    spec: dict[str, Any] = {"refresh": {"token": "a"}}
    rec.reconcile(profile(**spec), pods(), NODES)
    run = last_status(kube)["currentRun"]
    finish_job(kube, run["job"], build_patch(status="succeeded", rounds=rounds(), manifest={}))
    clock.tick()
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    (first,) = last_status(kube)["tables"]

    spec = {"refresh": {"token": "b"}}
    clock.tick()
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    run = last_status(kube)["currentRun"]
    slower = build_patch(status="succeeded", rounds=rounds(scale=1.5), manifest={})
    finish_job(kube, run["job"], slower)
    clock.tick()
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    (second,) = last_status(kube)["tables"]
    assert second["previous"] == first["configMap"]
    assert (
        kube.applied[-1]["spec"]["template"]["metadata"]["annotations"]["sps.dev/table-hash"]
        == second["hash"]
    )

    # The new pods never become available.
    kube.objects[("Deployment", "server")]["status"]["conditions"] = [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}
    ]
    clock.tick()
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    status = last_status(kube)
    assert [t["hash"] for t in status["tables"]] == [first["hash"]]
    assert status["rejectedTable"]["hash"] == second["hash"]
    assert status["lastFailure"]["reason"] == "RolloutFailed"
    assert "rolled back to" in status["lastFailure"]["message"]
    assert (
        kube.applied[-1]["spec"]["template"]["metadata"]["annotations"]["sps.dev/table-hash"]
        == first["hash"]
    )
    assert "RolloutFailed" in [e[0] for e in kube.events]
    # No new run for the same trigger.
    kube.objects[("Deployment", "server")]["status"]["conditions"] = []
    clock.tick(3600)
    rec.reconcile(profile(last_status(kube), **spec), pods(), NODES)
    assert last_status(kube)["currentRun"] is None
