"""Time in the operator's decisions: another replica's clock (issue 18 §16), the minimum
interval between scheduled runs and rollouts (§17), a result that lags its Job's
completion (§18), and what happens after a refresh whose attempt failed (§26)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from capacity_harness import job_pod
from controller_harness import Harness, deployment, profile_body, rounds

from sps_operator.api import labels as L
from sps_operator.api.result import build_patch
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies import conditions as cond
from sps_operator.plugin.explain import explain, render_explain

HOUR = 3600


def hourly(**spec: Any) -> Harness:
    """One target; the operator's minimum interval is an hour."""
    settings = Settings(gpu_debounce_seconds=0, isolate_fits=False,
                        min_refresh_interval_seconds=HOUR)  # fmt: skip
    return Harness.one_target(settings=settings, **spec)


def written_elsewhere(h: Harness) -> None:
    """The profile's status was just written by another replica (a new resourceVersion:
    this process's memory of its own last write no longer applies)."""
    profile = h.kube.obj("SpsProfile", "p")
    profile["metadata"]["resourceVersion"] += "-elsewhere"


def vanished_job_started(ahead: timedelta) -> Harness:
    """A run whose startedAt another replica recorded `ahead` of this clock, and whose Job
    was then deleted."""
    h = Harness.one_target()
    h.tick()
    run = h.run_pass()["currentRun"]
    profile = h.kube.obj("SpsProfile", "p")
    profile["status"]["currentRun"]["startedAt"] = cond.rfc3339(h.now + ahead)
    written_elsewhere(h)
    h.kube.objects.pop(("Job", "serving", run["job"]))
    return h


def explained(h: Harness, events: list[dict[str, Any]] | None = None) -> str:
    return render_explain(explain(h.kube.obj("SpsProfile", "p"), events=events or []))


# ----------------------------------------------------------------------------- §16 clocks


def test_a_start_time_from_a_clock_far_ahead_cannot_keep_a_vanished_job_alive() -> None:
    """A startedAt in the future (another replica's clock), then the Job deleted: the
    profile once stayed Profiling for hours, a pass every second, and explain found
    nothing."""
    h = vanished_job_started(timedelta(hours=2))
    h.tick()
    h.run_pass()  # counted from now: a Job created "now" may not be in the cache yet
    h.tick(60)
    status = h.run_pass()
    assert status.get("currentRun") is None
    assert status["lastFailure"]["reason"] == "JobMissing"
    (skew,) = [m for r, m in h.kube.events if r == "ClockSkew"]
    assert "currentRun.startedAt" in skew and "7199 s ahead of this replica's clock" in skew
    text = explained(h, [{"type": "Warning", "reason": "ClockSkew", "message": skew}])
    assert "ahead of the operator's clock" in text and "NTP" in text


def test_a_time_within_the_skew_bound_still_counts_as_a_moment_ago() -> None:
    h = vanished_job_started(timedelta(seconds=20))
    h.tick()
    assert h.run_pass()["currentRun"]  # created "a moment ago": not in the cache yet
    assert "ClockSkew" not in [r for r, _ in h.kube.events]


def test_a_wait_recorded_by_a_clock_ahead_still_times_out() -> None:
    h = Harness.one_target(capacity={"waitTimeoutSeconds": 600})
    h.tick()
    h.run_pass()
    job_pod(h)  # unschedulable: the run waits
    profile = h.kube.obj("SpsProfile", "p")
    profile["status"]["currentRun"]["waiting"] = {
        "reason": "WaitingForGPUs", "message": "m",
        "since": cond.rfc3339(h.now + timedelta(days=1)),
    }  # fmt: skip
    written_elsewhere(h)
    h.tick()
    since = h.run_pass()["currentRun"]["waiting"]["since"]
    assert since == cond.rfc3339(h.now)  # counted from now, not from tomorrow
    h.tick(600)
    assert h.run_pass()["lastFailure"]["reason"] == "WaitingForGPUs"


# ----------------------------------------------------------------------------- §17 intervals


def test_a_schedule_every_minute_runs_at_most_once_per_minimum_interval() -> None:
    h = hourly(refresh={"schedule": "* * * * *"})
    h.profile_once()
    started = 0
    for _ in range(90):  # an hour and a half, minute by minute
        h.tick(60)
        status = h.run_pass()
        if status.get("currentRun"):
            started += 1
            h.finish()
            h.settle(passes=2)
    assert started == 1, started
    status = h.status()
    assert "fires more often than the minimum interval" in status["scheduleHeldBack"]
    assert "fire times in between are skipped" in h.condition("Profiling")[2]
    assert "The refresh schedule fires more often" in explained(h)


def test_a_profile_may_lengthen_the_minimum_interval_but_not_shorten_it() -> None:
    h = hourly(refresh={"schedule": "* * * * *", "minIntervalSeconds": 60})
    h.profile_once()
    h.tick(60)
    assert "(3600 s:" in h.run_pass()["scheduleHeldBack"]
    h = hourly(refresh={"schedule": "* * * * *", "minIntervalSeconds": 7200})
    h.profile_once()
    h.tick(60)
    assert "(7200 s:" in h.run_pass()["scheduleHeldBack"]


def test_a_scheduled_refresh_waits_for_the_minimum_interval_between_rollouts() -> None:
    h = hourly(refresh={"schedule": "0 * * * *", "token": "a"})
    h.profile_once()
    h.tick(50 * 60)
    _asked_again(h, "token")  # rolled at once, at 12:50
    (first,) = h.profile_once(result=build_patch(status="succeeded", rounds=rounds(0.9)))["tables"]
    assert h.running_hash() == first["hash"]
    h.tick(600)  # the schedule fires at 13:00, ten minutes after that rollout
    status = h.profile_once(result=build_patch(status="succeeded", rounds=rounds(scale=1.2)))
    (second,) = status["tables"]
    assert second["hash"] != first["hash"] and second["trigger"] == "Schedule"
    # Ten minutes after the last rollout: the new table waits, the old one serves.
    assert h.running_hash() == first["hash"]
    (target,) = h.status()["targets"]
    assert target["state"] == "Live" and target["table"] == first["configMap"]
    assert target["nextTable"] == second["configMap"] and target["heldUntil"]
    assert "scheduled refresh" in target["message"] and "kubectl sps reprofile" in target["message"]
    assert h.condition("Ready")[0] == "True"
    assert h.condition("RolledOut")[:2] == ("False", "RolloutHeld")
    assert "waits for the minimum interval between rollouts" in explained(h)
    h.tick(HOUR)
    h.settle(passes=2)
    assert h.running_hash() == second["hash"]
    assert h.condition("RolledOut")[:2] == ("True", "RolledOut")


def _asked_again(h: Harness, how: str) -> None:
    profile = h.kube.obj("SpsProfile", "p")
    if how == "token":
        profile["spec"]["refresh"]["token"] = "b"
    else:  # what `kubectl sps reprofile` writes
        profile["metadata"].setdefault("annotations", {})[L.ANNOTATION_REPROFILE] = "r1"


@pytest.mark.parametrize("how", ["token", "reprofile"])
def test_a_table_a_user_asked_for_rolls_as_soon_as_it_is_ready(how: str) -> None:
    """Issue 34: `kubectl sps reprofile` two minutes after a rollout measured a new table,
    then held it for 55 minutes (RolloutHeld). Only a scheduled refresh waits."""
    h = hourly(refresh={"token": "a"})
    (first,) = h.profile_once()["tables"]
    h.tick(120)
    _asked_again(h, how)
    status = h.profile_once(result=build_patch(status="succeeded", rounds=rounds(scale=1.2)))
    (second,) = status["tables"]
    assert second["hash"] != first["hash"]
    assert second["trigger"] == ("RefreshToken" if how == "token" else "ReprofileRequested")
    assert h.running_hash() == second["hash"]
    (target,) = status["targets"]
    assert target["state"] == "Live" and target["table"] == second["configMap"]
    assert "heldUntil" not in target and "nextTable" not in target
    assert h.condition("RolledOut")[:2] == ("True", "RolledOut")


def test_a_table_for_a_changed_server_is_never_held_back() -> None:
    h = hourly()
    h.profile_once()
    h.tick(60)
    dep = h.kube.obj("Deployment", "server")
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "lmsysorg/sglang:v2"
    h.kube.roll(dep)
    status = h.profile_once()
    (target,) = status["targets"]
    table = next(t for t in status["tables"] if t["fingerprint"] == target["fingerprint"])
    assert len(status["tables"]) == 2 and h.running_hash() == table["hash"]  # at once


# ----------------------------------------------------------------------------- §18 result


def test_a_result_written_after_the_jobs_completion_is_waited_for() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish(result=build_patch(status="running", progress="7/8"))
    h.tick(30)
    status = h.run_pass()
    assert status["currentRun"]["resultWaitSince"] and "lastFailure" not in status
    h.finish()  # the profiler's last write arrives
    assert h.settle()["tables"]


def test_a_result_that_never_arrives_fails_after_a_bound_with_why() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish(result=build_patch(status="running", progress="7/8"))
    h.tick()
    h.run_pass()
    h.tick(60)
    failure = h.run_pass()["lastFailure"]
    assert failure["reason"] == "ResultMissing"
    assert "still held no final result 60 s later (status 'running', progress 7/8)" in failure[
        "message"]  # fmt: skip
    assert "profiler's last write never arrived" in failure["message"]


# ----------------------------------------------------------------------------- §26 next


def gate_failed() -> Harness:
    h = Harness()
    h.add(deployment())
    h.add(profile_body(gates={"maxRmsMs": 0.05}, refresh={"token": "a"}))
    h.place()
    h.profile_once()
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.profile_once(result=build_patch(status="succeeded", rounds=rounds(noise=0.3)))
    assert h.status()["lastFailure"]["retryable"] is False
    return h


def test_after_a_gate_failure_status_says_what_happens_next() -> None:
    h = gate_failed()
    stale = h.condition("Stale")
    assert stale[:2] == ("True", "RefreshToken")
    assert "the last attempt failed (FitQualityGateFailed): it is not retried" in stale[2]
    assert "starts a new attempt by itself" in stale[2] and "kubectl sps reprofile p" in stale[2]
    text = explained(h)
    assert "A refresh is pending and its last attempt failed" in text
    h.tick(HOUR)
    assert h.run_pass().get("currentRun") is None  # as it said


def test_a_relaxed_gate_starts_a_new_attempt() -> None:
    h = gate_failed()
    h.kube.obj("SpsProfile", "p")["spec"]["gates"] = {"maxRmsMs": 50.0}
    h.tick()
    run = h.run_pass()["currentRun"]
    assert run["trigger"] == "RefreshToken" and run["attempt"] == 1
    h.finish(result=build_patch(status="succeeded", rounds=rounds(noise=0.3)))
    status = h.settle()
    assert "lastFailure" not in status and h.condition("Stale")[0] == "False"


def test_a_failed_attempt_that_is_retried_says_when() -> None:
    h = Harness.one_target(refresh={"token": "a"})
    h.profile_once()
    h.kube.obj("SpsProfile", "p")["spec"]["refresh"] = {"token": "b"}
    h.tick()
    h.run_pass()
    h.finish(result=build_patch(status="failed", message="server died"), ok=False)
    h.tick()
    h.run_pass()
    stale = h.condition("Stale")[2]
    assert "the last attempt failed (ProfilingFailed): attempt 2 of 3 starts at " in stale


def test_a_job_whose_profiler_never_wrote_its_result_names_the_network_policy() -> None:
    """A default-deny NetworkPolicy without the profiling pods' egress (issue 19 §4): the
    profiler cannot write even `running`, exits 1, and the Job fails with an empty result."""
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish(result={}, ok=False)
    h.tick()
    failure = h.run_pass()["lastFailure"]
    assert failure["reason"] == "ProfilingFailed"
    assert "the profiler never wrote to its result ConfigMap" in failure["message"]
    assert "NetworkPolicy" in failure["message"]
    assert "networkPolicy.profilingPods.enabled" in failure["message"]


def test_a_failed_job_whose_profiler_wrote_keeps_its_own_words_only() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish(result=build_patch(status="failed", message="pin did not hold"), ok=False)
    h.tick()
    failure = h.run_pass()["lastFailure"]
    assert "pin did not hold" in failure["message"]
    assert "NetworkPolicy" not in failure["message"]


def test_a_completed_job_with_nothing_written_names_the_network_policy_after_the_bound() -> None:
    h = Harness.one_target()
    h.tick()
    h.run_pass()
    h.finish(result={})
    h.tick()
    h.run_pass()
    h.tick(60)
    failure = h.run_pass()["lastFailure"]
    assert failure["reason"] == "ResultMissing"
    assert "the profiler never wrote to its result ConfigMap" in failure["message"]
