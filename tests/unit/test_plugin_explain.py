"""`kubectl sps explain`: findings with evidence and a next step."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sps_operator.api import reason_registry as registry
from sps_operator.api import reasons as R
from sps_operator.plugin.explain import explain, render_explain


def profile(status: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "namespace": "serving", "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "llama"}}},
        "status": status,
    }


def failure(reason: str, message: str, attempts: int = 1) -> dict[str, Any]:
    return {
        "run": "llama-0a1b2c3d4e",
        "reason": reason,
        "message": message,
        "at": "2026-12-02T11:00:00Z",
        "attempts": attempts,
    }


def whats(report: dict[str, Any]) -> list[str]:
    return [f["what"] for f in report["findings"]]


def test_no_status_means_operator_not_running_here() -> None:
    report = explain(profile({}))
    assert whats(report) == ["The operator has not processed this profile yet"]
    assert "logs deploy/sps-operator" in report["findings"][0]["next"]


def test_old_generation() -> None:
    report = explain(profile({"observedGeneration": 1, "targets": [{"deployment": "x"}]}, 2))
    assert whats(report) == ["The operator has not seen the latest spec yet"]


def test_verify_all_shortcut_failure() -> None:
    report = explain(
        profile(
            {
                "observedGeneration": 1,
                "lastFailure": failure(
                    "VerifyAllShortcut",
                    "every fraction ran at the full-width tier 64; the server ignores the pin",
                ),
            }
        )
    )
    (finding,) = report["findings"]
    assert "verify-all shortcut" in finding["what"]
    assert "VerifyAllShortcut" in finding["why"] and "llama-0a1b2c3d4e" in finding["why"]
    assert "non-flat table" in finding["next"]
    assert "kubectl sps reprofile llama" in finding["next"]


def rejected_table_finding(reason: str, message: str) -> dict[str, str]:
    report = explain(
        profile(
            {
                "observedGeneration": 1,
                "rejectedTable": {"configMap": "llama-table-ffff"},
                "conditions": [
                    {"type": "TableReady", "status": "False", "reason": reason, "message": message}
                ],
            }
        )
    )
    (finding,) = report["findings"]
    assert "failed an acceptance gate" in finding["what"]
    assert "llama-table-ffff" in finding["why"] and message in finding["why"]
    assert "kubectl sps table llama --rejected" in finding["next"]
    return finding  # type: ignore[no-any-return]


def test_gate_failure_points_at_rejected_table() -> None:
    finding = rejected_table_finding("GateFailed", "RMS 0.9 ms > maxRmsMs 0.5")
    assert "ERROR-BOUND" not in finding["next"]


def test_an_error_bound_gate_failure_says_what_widens_the_bound() -> None:
    message = (
        "the table's predicted error bound 12.0% exceeds gates.maxErrorBound 5.0% "
        "(leave-one-out error 3.0%, widest round CI 9.0%)"
    )
    finding = rejected_table_finding("ErrorBoundGateFailed", message)
    assert "ERROR-BOUND" in finding["next"] and "sweep.ciRelWidth" in finding["next"]


def test_mixed_gpu_pool() -> None:
    report = explain(
        profile(
            {
                "observedGeneration": 1,
                "gpuProduct": "NVIDIA-H100-80GB-HBM3,NVIDIA-H200",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "False",
                        "reason": "MixedGpuProducts",
                        "message": "pods of llama run on 2 GPU products",
                    }
                ],
            }
        )
    )
    assert whats(report) == ["The targets run on several GPU products"]
    assert "nodeSelector" in report["findings"][0]["next"]
    assert "MixedGpuProducts" in report["findings"][0]["why"]


def test_mixed_gpu_pool_from_a_target_message() -> None:
    status = {
        "observedGeneration": 1,
        "conditions": [
            {"type": "Degraded", "status": "True", "reason": "TargetProblem", "message": "x"}
        ],
        "targets": [
            {
                "deployment": "llama",
                "state": "Refused",
                "reason": "MixedGpuProducts",
                "message": "pods run on several GPU products (NVIDIA-H100-80GB-HBM3, NVIDIA-H200)",
            }
        ],
    }
    report = explain(profile(status))
    assert whats(report) == ["The targets run on several GPU products"]
    assert report["findings"][0]["why"].startswith("Deployment llama: pods run on several")


def test_pending_job_without_gpus() -> None:
    pod = unschedulable_pod("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    status = {"observedGeneration": 1, "currentRun": {"job": "llama-0a1b2c3d4e"}}
    report = explain(profile(status), job={"metadata": {}}, pods=[pod])
    (finding,) = report["findings"]
    assert finding["what"] == "The profiling Job is Pending: no GPU is free"
    assert "Insufficient nvidia.com/gpu" in finding["why"]
    # Not the hand-made runbook (scale down, profile, scale up): the operator's own borrow.
    assert "capacity.mode: BorrowReplica" in finding["next"]
    assert "scale the Deployment down" not in finding["next"]


NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
SCHEDULER = (
    "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's "
    "node affinity/selector."
)


def waiting_profile(reason: str, message: str, mode: str = "Wait") -> dict[str, Any]:
    p = profile(
        {
            "observedGeneration": 1,
            "currentRun": {
                "name": "llama-0a1b2c3d4e",
                "job": "llama-0a1b2c3d4e",
                "phase": "Diagonal",
                "gpuProduct": "NVIDIA-H100-80GB-HBM3",
                "waiting": {"reason": reason, "message": message, "since": "2026-12-02T11:56:40Z"},
            },
            "conditions": [
                {"type": "Profiling", "status": "False", "reason": reason, "message": message},
                {"type": "Ready", "status": "False", "reason": reason, "message": ""},
            ],
        }
    )
    p["spec"]["capacity"] = {"mode": mode, "waitTimeoutSeconds": 1800}
    return p


def unschedulable_pod(message: str = SCHEDULER) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama-0a1b2c3d4e-xyz"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    }


def test_waiting_for_gpus_says_why_and_for_how_long() -> None:
    report = explain(
        waiting_profile("WaitingForGPUs", f"no node can take it now: {SCHEDULER}"),
        job={"metadata": {}},
        pods=[unschedulable_pod()],
        now=NOW,
    )
    # One finding: the pod's Pending condition is the same news, not a second finding.
    (finding,) = report["findings"]
    assert finding["what"] == (
        "The profiling Job is waiting for GPUs of NVIDIA-H100-80GB-HBM3 "
        "for 3m20s (since 2026-12-02T11:56:40Z)"
    )
    assert finding["why"].startswith("WaitingForGPUs: no node can take it now: 0/4 nodes")
    assert "capacity.mode: BorrowReplica" in finding["next"]
    assert "waits 1800 s" in finding["next"]
    assert report["state"] == "WaitingForGPUs"
    assert report["run"] == {
        "name": "llama-0a1b2c3d4e",
        "phase": "Diagonal",
        "waiting": "WaitingForGPUs",
        "waitingFor": "3m20s",
        "waitingSince": "2026-12-02T11:56:40Z",
    }
    text = render_explain(report)
    assert "SpsProfile serving/llama: WaitingForGPUs" in text
    assert (
        "  Run llama-0a1b2c3d4e (Diagonal): WaitingForGPUs for 3m20s "
        "(since 2026-12-02T11:56:40Z)" in text
    )
    assert "1. The profiling Job is waiting for GPUs" in text


def test_waiting_with_borrow_replica_says_when_it_borrows() -> None:
    p = waiting_profile(
        "WaitingForGPUs", "no node can take it now: 1 Insufficient", "BorrowReplica"
    )
    p["spec"]["capacity"]["borrowAfterSeconds"] = 300
    (finding,) = explain(p, now=NOW)["findings"]
    assert "borrows one replica of the target after 300 s" in finding["next"]


def test_waiting_on_a_pin_that_matches_no_node() -> None:
    message = (
        "no node can take it now: 0/2 nodes are available: 2 node(s) didn't match Pod's "
        "node affinity/selector."
    )
    (finding,) = explain(waiting_profile("WaitingForGPUs", message), now=NOW)["findings"]
    assert finding["what"].startswith(
        "No node matches the profiling Job's GPU product pin for 3m20s"
    )
    assert "spec.gpuProductLabel" in finding["next"]


def test_queued_in_kueue() -> None:
    message = "Job llama-0a1b2c3d4e is suspended until Kueue queue gpu-profiling admits it"
    report = explain(waiting_profile("QueuedInKueue", message), now=NOW)
    (finding,) = report["findings"]
    assert finding["what"] == (
        "The profiling Job is queued in Kueue for 3m20s (since 2026-12-02T11:56:40Z)"
    )
    assert "gpu-profiling" in finding["why"]
    assert "kubectl get workloads" in finding["next"]
    assert report["state"] == "QueuedInKueue"


def test_queued_in_kueue_shows_kueues_words() -> None:
    message = (
        "Job llama-0a1b2c3d4e is suspended until Kueue queue gpu-profiling admits it; Kueue "
        "says QuotaReserved: couldn't assign flavors to pod set main: insufficient quota for "
        "nvidia.com/gpu in flavor h100"
    )
    (finding,) = explain(waiting_profile("QueuedInKueue", message), now=NOW)["findings"]
    assert "insufficient quota for nvidia.com/gpu in flavor h100" in finding["why"]
    assert "Kueue's own words" in finding["next"]


def test_a_missing_local_queue_is_explained() -> None:
    message = "Job llama-0a1b2c3d4e names Kueue queue gpu-profiling, but this namespace has no"
    report = explain(waiting_profile("LocalQueueMissing", message), now=NOW)
    (finding,) = report["findings"]
    assert finding["what"].startswith("The profiling Job names a Kueue LocalQueue that does not")
    assert "Create the LocalQueue" in finding["next"] and "gpu-profiling" in finding["why"]
    assert report["state"] == "LocalQueueMissing"


@pytest.mark.parametrize(
    ("reason", "refusal", "what", "why", "next_steps"),
    [
        (
            "BorrowBlocked",
            "PodDisruptionBudget llama-pdb allows no disruption of llama now",
            "The profiling Job waits for GPUs and borrowing a replica",
            "PodDisruptionBudget llama-pdb",
            ["PodDisruptionBudget", "docs/capacity.md", "retries by itself"],
        ),
        (  # not a matter of time: says so, and what to do instead
            "KueueManagedTarget",
            "Deployment llama is managed by Kueue (label kueue.x-k8s.io/queue-name: serving): "
            "its pods hold Kueue quota, ...",
            "The profiling Job waits for GPUs; its target is never",
            "queue-name: serving",
            ["does not change by itself", "spec.capacity.mode: Wait", "LocalQueue"],
        ),
    ],
)
def test_a_refused_borrow_is_explained(
    reason: str, refusal: str, what: str, why: str, next_steps: list[str]
) -> None:
    message = f"{refusal} (no node can take it now: {SCHEDULER})"
    report = explain(waiting_profile(reason, message, "BorrowReplica"), now=NOW)
    (finding,) = report["findings"]
    assert finding["what"].startswith(what) and "for 3m20s" in finding["what"]
    assert why in finding["why"]
    assert all(step in finding["next"] for step in next_steps), finding["next"]
    assert report["state"] == reason


def test_a_run_on_a_borrowed_replica_is_shown() -> None:
    status = {
        "observedGeneration": 1,
        "currentRun": {
            "name": "llama-0a1b2c3d4e",
            "job": "llama-0a1b2c3d4e",
            "phase": "Diagonal",
            "borrow": {"deployment": "llama", "replicas": 2, "at": "2026-12-02T11:59:00Z"},
        },
    }
    report = explain(profile(status), now=NOW)
    assert report["findings"] == []
    text = render_explain(report)
    assert "  Run llama-0a1b2c3d4e (Diagonal); borrowed 1 of 2 replicas of llama for 60s" in text
    assert "Nothing is wrong: a run is in progress." in text


def test_no_targets_and_render() -> None:
    report = explain(profile({"observedGeneration": 1, "targets": []}))
    assert whats(report) == ["No Deployment matches the selector"]
    text = render_explain(report)
    assert text.startswith("SpsProfile serving/llama: Pending")
    assert "1. No Deployment matches the selector" in text
    assert "   Next: Label the SGLang Deployment(s)" in text


def test_healthy_profile_has_no_findings() -> None:
    status = {
        "observedGeneration": 1,
        "targets": [{"deployment": "llama", "rolledOut": True}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "TableLive", "message": ""}],
    }
    report = explain(profile(status))
    assert report["findings"] == []
    assert report["state"] == "Ready"
    assert "Nothing is wrong" in render_explain(report)


def test_operator_failure_reasons_get_specific_advice() -> None:
    cases = {
        "JobCreateFailed": "refused the profiling Job",
        "RolloutFailed": "rolled back",  # its message names ProgressDeadlineExceeded
        "FitFailed": "could not be fitted",
        "ProfilingFailed": "The last profiling run failed",
        "WaitingForGPUs": "waited longer than capacity.waitTimeoutSeconds",
        "QueuedInKueue": "Kueue did not admit its Job",
        "KueueNotInstalled": "Kueue is not installed",
        "LocalQueueMissing": "LocalQueue its Job names does not exist",
        "BorrowBlocked": "borrowing a replica stayed refused",
        "KueueManagedTarget": "its target is a workload Kueue manages",
        "JobPolicy": "the cluster admin's policy does not allow",
        "GpuPinConflict": "would not run on the GPU product",
        "JobLabelsSelectPods": "pass for a server pod",
        "ReadWriteOncePodClaim": "ReadWriteOncePod PersistentVolumeClaim",
        "ClaimNodeUnavailable": "attached on no node the clone may use",
        "TargetChanged": "changed between the two phases",
        "SweepMismatch": "a cell more than once",
        "IncompleteSweep": "did not cover every cell",
        "DeadlineExceeded": "ran longer than its limit",
        "KueueDeactivated": "Kueue deactivated its Job's Workload",
        "ResultMissing": "its result never arrived",
    }
    for reason, what in cases.items():
        message = (
            "llama did not become available (ProgressDeadlineExceeded); rolled back"
            if reason == "RolloutFailed"
            else "x"
        )
        report = explain(
            profile({"observedGeneration": 1, "lastFailure": failure(reason, message)})
        )
        (finding,) = report["findings"]
        assert what in finding["what"], (reason, finding)
        assert finding["next"]


# The profiler's own failure, explained from its free text; and a reason only Ready carries.
GENERIC = {R.PROFILING_FAILED, R.INVALID_SPEC}


@pytest.mark.parametrize(
    "reason",
    sorted(
        r
        for r, d in registry.REASONS.items()
        if d.kind in (R.Kind.FAILURE, R.Kind.WAITING) and r not in GENERIC
    ),
)
def test_every_failure_reason_of_the_list_gets_specific_advice(reason: str) -> None:
    report = explain(profile({"observedGeneration": 1, "lastFailure": failure(reason, "x")}))
    (finding,) = report["findings"]
    assert finding["what"] != "The last profiling run failed", reason
    assert finding["why"].startswith(f"{reason}: x") and finding["next"]


@pytest.mark.parametrize(
    "reason", sorted(r for r, d in registry.REASONS.items() if d.kind == R.Kind.PROBLEM)
)
def test_every_target_reason_of_the_list_is_explained(reason: str) -> None:
    status = {
        "observedGeneration": 1,
        "conditions": [ready("False", reason, "x")],
        "targets": [{"deployment": "d", "state": "Refused", "reason": reason, "message": "x"}],
    }
    report = explain(profile(status))
    assert report["findings"] and any(reason in f["why"] for f in report["findings"]), reason


def ready(status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": "Ready", "status": status, "reason": reason, "message": message}


def test_a_conflict_names_the_owner_and_what_to_do() -> None:
    status = {
        "observedGeneration": 1,
        "conditions": [ready("False", "Conflict", "server: served by SpsProfile 'older'")],
        "targets": [
            {
                "deployment": "server",
                "state": "Refused",
                "reason": "Conflict",
                "owner": "older",
                "message": "served by SpsProfile 'older'; 'llama' never writes to it",
            }
        ],
    }
    report = explain(profile(status))
    (finding,) = report["findings"]
    assert finding["what"] == "Another SpsProfile serves this Deployment (Deployment server)"
    assert "'older'" in finding["why"] and "Narrow spec.selector" in finding["next"]


def test_never_nothing_is_wrong_while_not_ready() -> None:
    status = {
        "observedGeneration": 1,
        "conditions": [ready("False", "NoTable", "server: no table for H100 yet")],
        "targets": [{"deployment": "server", "state": "NoTable"}],
    }
    text = render_explain(explain(profile(status)))
    assert "Nothing is wrong" not in text and "The profile is not ready" in text
    live = {
        "observedGeneration": 1,
        "conditions": [ready("True", "TableLive")],
        "targets": [{"deployment": "server", "state": "Live"}],
    }
    assert "Nothing is wrong: every Deployment runs a table measured for it" in render_explain(
        explain(profile(live))
    )


def test_job_supplied_text_cannot_drive_the_terminal() -> None:
    evil = "pin failed\x1b[2J\x1b]0;owned\x07\r\x1b[31m" + "x" * 10_000
    report = explain(profile({"observedGeneration": 1, "lastFailure": failure("X", evil)}))
    text = render_explain(report)
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert all(len(f["why"]) <= 2000 for f in report["findings"])


def blocked(message: str) -> dict[str, Any]:
    return {
        "observedGeneration": 1,
        "conditions": [ready("False", "RolloutBlocked", f"server: {message}")],
        "targets": [{"deployment": "server", "state": "Rolling", "reason": "RolloutBlocked",
                     "message": message, "blockedSince": "2026-12-02T11:00:00Z"}],
    }  # fmt: skip


def test_a_blocked_rollout_is_explained_with_the_pods_words_and_what_to_do() -> None:
    cases = {
        "pod server-7c9 cannot be scheduled: 0/4 nodes are available: 2 Insufficient "
        "nvidia.com/gpu": "maxUnavailable: 1",
        "pod server-7c9: container sglang: ImagePullBackOff: Back-off pulling image": (
            "pull secrets"
        ),
        "pod server-7c9: container sglang: CrashLoopBackOff: back-off 5m": "--previous",
        "the ReplicaSet cannot create pods: exceeded quota: gpu": "raise the quota",
        "something else": "kubectl rollout status deployment/server",
    }
    for message, hint in cases.items():
        report = explain(profile(blocked(message)))
        (finding,) = report["findings"]
        assert finding["what"] == (
            "The rollout of the new table onto Deployment server is blocked "
            "(since 2026-12-02T11:00:00Z)"
        )
        assert message in finding["why"] and hint in finding["next"], (message, finding)


def test_a_replica_kept_for_a_rollout_and_a_held_table_are_explained() -> None:
    status = {
        "observedGeneration": 1,
        "conditions": [ready("True", "TableLive")],
        "targets": [{"deployment": "server", "state": "Live", "heldUntil": "2026-12-02T12:00:00Z",
                     "message": "table t2 waits until 2026-12-02T12:00:00Z"}],
        "rolloutBorrow": {"deployment": "server", "replicas": 2, "at": "2026-12-02T10:00:00Z",
                          "run": "llama-1", "table": "abc", "heldSince": "2026-12-02T10:05:00Z"},
    }  # fmt: skip
    whats_ = whats(explain(profile(status)))
    assert whats_ == [
        "A newer table for Deployment server waits for the minimum interval between rollouts",
        "One replica of server stays lent to the new table's rollout",
    ]


@pytest.mark.parametrize("reason", [R.PROFILING_FAILED, R.RESULT_MISSING])
def test_a_profiler_that_wrote_nothing_points_at_the_network_policy(reason: str) -> None:
    from sps_operator.controller.profiling.run import never_written

    message = f"Job llama-0a1b2c3d4e failed (BackoffLimitExceeded): ; {never_written('cm', 'j')}"
    report = explain(profile({"observedGeneration": 1, "lastFailure": failure(reason, message)}))
    (finding,) = report["findings"]
    assert "could not reach the API server" in finding["what"]
    assert "networkPolicy.profilingPods.enabled=true" in finding["next"]
    assert "kubectl logs job/llama-0a1b2c3d4e -c profiler" in finding["next"]


@pytest.mark.parametrize("reason", [R.SUSPENDED, R.INVALID_SPEC, R.NO_TABLE, R.PROFILING_FAILED])
def test_a_profile_not_ready_gets_the_next_step_of_its_reason(reason: str) -> None:
    """The registry's advice for Ready's reason, not only where to look."""
    status = {"observedGeneration": 1, "conditions": [ready("False", reason, "x")]}
    (finding,) = explain(profile(status))["findings"]
    assert finding["what"] == "The profile is not ready"
    expected = registry.fill(registry.REASONS[reason].advice, name="llama", run="<job>")
    assert finding["next"] == expected and "{" not in expected
    unknown = {"observedGeneration": 1, "conditions": [ready("False", "SomethingNew", "x")]}
    (finding,) = explain(profile(unknown))["findings"]
    assert (
        finding["next"] == "`kubectl describe sps llama` shows each Deployment's state and message."
    )


def test_explain_names_each_targets_kind() -> None:
    """Issue 34: status lists each target with its kind; explain shows it, and a finding
    about a StatefulSet says StatefulSet (and the `kubectl rollout status` for it)."""
    status = blocked("the StatefulSet's updateStrategy is OnDelete: the roll waits for you")
    status["targets"][0]["kind"] = "StatefulSet"
    status["targets"].append({"deployment": "big", "kind": "LeaderWorkerSet", "state": "Live",
                              "table": "p-table-1"})  # fmt: skip
    report = explain(profile(status))
    assert report["targets"] == [
        "StatefulSet server: Rolling",
        "LeaderWorkerSet big: Live (p-table-1)",
    ]
    (finding,) = report["findings"]
    assert finding["what"].startswith("The rollout of the new table onto StatefulSet server")
    assert "kubectl rollout status statefulset/server" in finding["next"]
    text = render_explain(report)
    assert "  Target LeaderWorkerSet big: Live (p-table-1)" in text
