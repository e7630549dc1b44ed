"""`kubectl sps explain`: findings with evidence and a next step."""

from __future__ import annotations

from typing import Any

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


def test_gate_failure_points_at_rejected_table() -> None:
    report = explain(
        profile(
            {
                "observedGeneration": 1,
                "rejectedTable": {"configMap": "llama-table-ffff"},
                "conditions": [
                    {
                        "type": "TableReady",
                        "status": "False",
                        "reason": "GateFailed",
                        "message": "RMS 0.9 ms > maxRmsMs 0.5",
                    }
                ],
            }
        )
    )
    (finding,) = report["findings"]
    assert "failed an acceptance gate" in finding["what"]
    assert "llama-table-ffff" in finding["why"] and "RMS 0.9 ms" in finding["why"]
    assert "kubectl sps table llama --rejected" in finding["next"]


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
                "message": "pods run on several GPU products (NVIDIA-H100-80GB-HBM3, NVIDIA-H200)",
            }
        ],
    }
    report = explain(profile(status))
    assert whats(report) == ["The targets run on several GPU products"]
    assert report["findings"][0]["why"].startswith("Deployment llama: pods run on several")


def test_pending_job_without_gpus() -> None:
    pod = {
        "metadata": {"name": "llama-0a1b2c3d4e-xyz"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    status = {"observedGeneration": 1, "currentRun": {"job": "llama-0a1b2c3d4e"}}
    report = explain(profile(status), job={"metadata": {}}, pods=[pod])
    (finding,) = report["findings"]
    assert finding["what"] == "The profiling Job is Pending: no GPU is free"
    assert "Insufficient nvidia.com/gpu" in finding["why"]
    assert "scale the Deployment down" in finding["next"]


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
