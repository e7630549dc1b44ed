"""The findings of `kubectl sps explain`, one function per topic (pure, no I/O).

Each reads part of an SpsProfile's status (or the run's pods and the profile's events) and
returns what is wrong, the evidence, and the next step; plugin/explain.py runs them in order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sps_operator.api import reasons as R
from sps_operator.api.reason_registry import (
    FAILURE_ADVICE,
    GATE_FAILURES,
    REASONS,
    WAITING_ADVICE,
    fill,
)
from sps_operator.api.result import clean_text
from sps_operator.plugin.view import age

# Text from the cluster (a Job's message, an event) is shown cleaned and bounded: a Job
# runs the user's image, and what it writes must not drive the reader's terminal.
MAX_EVIDENCE = 2000


@dataclass(frozen=True)
class Finding:
    what: str  # what is wrong, in one line
    why: str  # the evidence (reason and message from the cluster)
    next: str  # the next step

    def to_dict(self) -> dict[str, str]:
        return {k: clean_text(v, MAX_EVIDENCE) for k, v in asdict(self).items()}


def _text(*parts: Any) -> str:
    return " ".join(str(p) for p in parts if p).lower()


def failure_finding(name: str, failure: Mapping[str, Any]) -> Finding:
    reason = str(failure.get("reason") or "Failed")
    message = str(failure.get("message") or "")
    text = _text(reason, message)
    attempts = failure.get("attempts") or 1
    evidence = f"{reason}: {message} (run {failure.get('run', '?')}, at {failure.get('at', '?')}"
    evidence += f", {attempts} attempts)" if attempts and int(attempts) > 1 else ")"
    if R.NEVER_WROTE_RESULT.lower() in text:  # controller/profiling/run.never_written
        return Finding(
            what="The profiling pod wrote nothing: it could not reach the API server",
            why=evidence,
            next=(
                "A NetworkPolicy in the namespace most likely denies the profiling pod's egress "
                "to the API server or the cluster DNS. Allow it: the chart's "
                "networkPolicy.profilingPods.enabled=true (namespaces mode), or the policy in "
                "docs/security.md (Network policy) in this namespace. The profiler's own words: "
                f"`kubectl logs job/{failure.get('run', '<job>')} -c profiler`; then "
                f"`kubectl sps reprofile {name}`."
            ),
        )
    if reason in FAILURE_ADVICE:
        advice = FAILURE_ADVICE[reason]
        return Finding(
            what=advice.what,
            why=evidence,
            next=fill(advice.next, name=name, run=failure.get("run", "<job>")),
        )
    if reason in GATE_FAILURES:
        return gate_finding(name, evidence)
    if "verify-all" in text or "verifyall" in text or ("budget" in text and "pin" in text):
        return Finding(
            what="The profiling server ignored the pinned verify budget (the verify-all shortcut)",
            why=evidence,
            next=(
                "The server runs compact mode without a table, so every fraction ran full width. "
                "Use a server with the fix (SGLang PR #32930 / #38897), or launch it with any "
                "non-flat table (e.g. a 2-probe diagonal table via "
                "--speculative-dspark-sps-table-path). With server.source Clone the operator "
                "already mounts the phase-1 diagonal table for the Additive phase 2; with "
                "External, relaunch the external server that way. Then "
                f"`kubectl sps reprofile {name}`."
            ),
        )
    if "deadline" in text:
        return Finding(
            what="The profiling Job ran out of time",
            why=evidence,
            next=(
                "Raise spec.job.activeDeadlineSeconds, or shorten the sweep (sweep.maxBatchSize, "
                f"fewer fracs, a wider sweep.ciRelWidth); then `kubectl sps reprofile {name}`."
            ),
        )
    if "unschedul" in text or "insufficient" in text or "pending" in text:
        return Finding(
            what="The profiling Job could not get a GPU",
            why=evidence,
            next=_gpu_next_step(name),
        )
    if "server" in text and ("ready" in text or "start" in text or "health" in text):
        return Finding(
            what="The cloned SGLang server did not become ready",
            why=evidence,
            next=(
                "Read the server's log: `kubectl logs job/<job> -c sglang-server` (the job name "
                "is in status.lastFailure.run). Typical causes: the model cannot be downloaded "
                "from the Job's pod, or too little GPU memory on the pinned product."
            ),
        )
    return Finding(
        what="The last profiling run failed",
        why=evidence,
        next=fill(REASONS[R.PROFILING_FAILED].advice, name=name, run=failure.get("run", "<job>")),
    )


def gate_finding(name: str, evidence: str) -> Finding:
    bound = (
        " The error bound (ERROR-BOUND in `kubectl sps get -o wide`, "
        "status.tables[].quality.errorBoundRel) is wide when the GPU's steps are noisy or "
        "autocorrelated (wide round CIs: tighten sweep.ciRelWidth), when the table "
        "interpolates across too few batch sizes (leave-one-out error: add sweep.batchSizes), "
        "or when the GPU's clocks were still ramping up (the ramp correction's uncertainty, "
        "and rounds that began on a ramp an idle gap re-armed: a GPU kept busy or warmed "
        "before the run avoids both; `kubectl sps reprofile` measures again)."
        if R.ERROR_BOUND_GATE_FAILED in evidence or "maxErrorBound" in evidence
        else ""
    )
    return Finding(
        what="A new table failed an acceptance gate and was not rolled out",
        why=evidence,
        next=fill(REASONS[R.FIT_QUALITY_GATE_FAILED].advice, name=name) + bound,
    )


# What blocks a rollout, by the words of the scheduler, kubelet or Deployment controller.
_ROLLOUT_NEXT = (
    (
        ("insufficient", "didn't have free ports", "untolerated taint", "0/"),
        "No node has room for the new pod: on a full GPU pool a rolling update with "
        "maxUnavailable 0 needs one free slot for its surge pod. With capacity.mode "
        "BorrowReplica the replica lent to a run stays lent for the rollout (its slot is the "
        "surge slot); otherwise free a GPU of the pool, add a node, or let the Deployment "
        "roll in place (spec.strategy.rollingUpdate.maxUnavailable: 1) (docs/capacity.md).",
    ),
    (
        ("imagepull", "errimagepull", "invalidimagename"),
        "The new pods cannot pull their image: check the image name and tag, the registry "
        "and the pull secrets (`kubectl describe pod <pod>`).",
    ),
    (
        ("crashloopbackoff", "runcontainererror", "createcontainer"),
        "The new pods do not start or keep crashing: read their log (`kubectl logs <pod> "
        "--previous`). A server that fails with the new table is rolled back to the previous "
        "table after the Deployment's progressDeadlineSeconds.",
    ),
    (
        ("replicaset cannot create", "exceeded quota", "forbidden"),
        "The ReplicaSet cannot create the new pods (a quota or an admission policy): the "
        "message says which; fix it or raise the quota.",
    ),
)


def target_label(target: Mapping[str, Any]) -> str:
    """`Kind name` of a status target (a status written before kinds were listed names a
    Deployment)."""
    return f"{target.get('kind') or 'Deployment'} {target.get('deployment')}"


def rollout_findings(status: Mapping[str, Any]) -> list[Finding]:
    findings = []
    for target in status.get("targets") or []:
        name = target.get("deployment")
        label = target_label(target)
        message = str(target.get("message") or "")
        if target.get("state") == "Rolling" and target.get("reason") == R.ROLLOUT_BLOCKED:
            lowered = message.lower()
            next_step = next(
                (hint for keys, hint in _ROLLOUT_NEXT if any(k in lowered for k in keys)),
                "Look at the new pods (`kubectl describe pod`, `kubectl rollout status "
                f"{str(target.get('kind') or 'Deployment').lower()}/{name}`); the profile is "
                "ready only once every ready pod runs the table.",
            )
            findings.append(
                Finding(
                    what=f"The rollout of the new table onto {label} is blocked "
                    f"(since {target.get('blockedSince') or '?'})",
                    why=f"RolloutBlocked: {message}",
                    next=next_step,
                )
            )
        elif target.get("heldUntil"):
            findings.append(
                Finding(
                    what=f"A newer table for {label} waits for the minimum interval "
                    "between rollouts",
                    why=message,
                    next=(
                        f"It is rolled at {target['heldUntil']} by itself; each rollout restarts "
                        "every server, so scheduled refreshes of a table that runs are spaced by "
                        "the operator's minimum (chart value refresh.minIntervalSeconds) or the "
                        "profile's spec.refresh.minIntervalSeconds, whichever is longer. A table "
                        "you ask for (`kubectl sps reprofile`, a new spec.refresh.token) rolls as "
                        "soon as it is ready."
                    ),
                )
            )
    held = status.get("rolloutBorrow") or {}
    if held.get("deployment"):
        findings.append(
            Finding(
                what=f"One replica of {held['deployment']} stays lent to the new table's rollout",
                why=(
                    f"run {held.get('run', '?')} borrowed it at {held.get('at', '?')}; kept since "
                    f"{held.get('heldSince', '?')} for table hash {held.get('table', '?')}"
                ),
                next=(
                    "On a full pool its slot is the surge slot the rolling update needs "
                    "(maxUnavailable 0). It comes back by itself when the table runs on every "
                    "pod, or at the latest after the Deployment's progressDeadlineSeconds."
                ),
            )
        )
    return findings


def schedule_and_clock_findings(
    status: Mapping[str, Any], events: Sequence[Mapping[str, Any]]
) -> list[Finding]:
    findings = []
    if status.get("scheduleHeldBack"):
        findings.append(
            Finding(
                what="The refresh schedule fires more often than the minimum interval between "
                "scheduled runs",
                why=str(status["scheduleHeldBack"]),
                next=(
                    "Each run costs GPU time and each new table restarts every server. Use a "
                    "schedule no more frequent than the interval (e.g. '0 3 * * 0'); the "
                    "operator runs it at most once per interval meanwhile."
                ),
            )
        )
    skewed = [e for e in events if e.get("reason") == R.CLOCK_SKEW]
    if skewed:
        latest = skewed[-1]
        findings.append(
            Finding(
                what="A time in this profile's status was ahead of the operator's clock",
                why=str(latest.get("message") or latest.get("note") or ""),
                next=(
                    "Another operator replica's clock (or a hand-edited status) ran ahead; the "
                    "operator counted from its own clock instead. Check that the nodes' clocks "
                    "are synchronised (NTP / chrony)."
                ),
            )
        )
    return findings


def _gpu_next_step(name: str) -> str:
    return (
        "The profiling Job needs as many GPUs of the same product as one server pod, on one "
        "node. Let the operator lend it one replica of the target for the run "
        "(spec.capacity.mode: BorrowReplica, docs/capacity.md), add a node to that GPU pool, "
        "or profile a server already in profiling mode (spec.server.source: External). The "
        f"run resumes by itself; check with `kubectl sps get {name}`."
    )


def _pin_mismatch(message: str) -> bool:
    """The scheduler says no node has the pinned GPU product (not merely: none is free)."""
    pinned = "didn't match" in message or "affinity" in message or "selector" in message
    return pinned and "insufficient" not in message.lower()


_PIN_NEXT = (
    "The Job is pinned to the GPU product the target runs on (node label "
    "spec.gpuProductLabel). Check the label on your nodes (`kubectl get nodes -L "
    "nvidia.com/gpu.product`); if the GPU product label differs, set spec.gpuProductLabel."
)


def waiting_finding(
    name: str, spec: Mapping[str, Any], run: Mapping[str, Any], now: datetime
) -> Finding | None:
    """Why the current run's Job does not run yet (status.currentRun.waiting), since when,
    and what lets it run."""
    waiting = run.get("waiting") or {}
    reason = str(waiting.get("reason") or "")
    if not reason:
        return None
    message = str(waiting.get("message") or "")
    capacity = spec.get("capacity") or {}
    mode = str(capacity.get("mode") or "Wait")
    timeout = int(capacity.get("waitTimeoutSeconds") or 3600)
    since = str(waiting.get("since") or "?")
    how_long = f"for {age(waiting.get('since'), now)} (since {since})"
    why = f"{reason}: {message} (run {run.get('name', '?')}, Job {run.get('job', '?')})"
    bound = f"The run fails if it waits {timeout} s in all (spec.capacity.waitTimeoutSeconds)."
    gpu = run.get("gpuProduct") or "its GPU product"
    if reason in WAITING_ADVICE:
        advice = WAITING_ADVICE[reason]
        return Finding(
            what=f"{advice.what} {how_long}",
            why=why,
            next=f"{fill(advice.next, name=name, gpu=gpu)} {bound}",
        )
    if _pin_mismatch(message):
        return Finding(
            what=f"No node matches the profiling Job's GPU product pin {how_long}",
            why=why,
            next=f"{_PIN_NEXT} {bound}",
        )
    if mode == "BorrowReplica":
        after = int(capacity.get("borrowAfterSeconds") or 60)
        next_step = (
            f"The operator borrows one replica of the target after {after} s of waiting "
            f"(spec.capacity.borrowAfterSeconds); free a GPU of {gpu} or add a node to make it "
            f"run sooner. {bound}"
        )
    else:
        next_step = f"{_gpu_next_step(name)} {bound}"
    return Finding(
        what=f"The profiling Job is waiting for GPUs of {gpu} {how_long}",
        why=why,
        next=next_step,
    )


def pod_findings(
    name: str, pods: Sequence[Mapping[str, Any]], scheduling: bool = True
) -> list[Finding]:
    """Problems of the run's pods; `scheduling` False when status already says why the Job
    waits (the scheduler's message is in that finding)."""
    findings = []
    for pod in pods:
        status = pod.get("status") or {}
        pod_name = (pod.get("metadata") or {}).get("name", "?")
        if status.get("phase") != "Pending":
            continue
        for cond in status.get("conditions") or []:
            if scheduling and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                message = str(cond.get("message") or "")
                if "didn't match" in message or "affinity" in message or "selector" in message:
                    what = "No node matches the profiling Job's GPU product pin"
                    next_step = _PIN_NEXT
                    if "insufficient" in message.lower():
                        next_step = _gpu_next_step(name)
                else:
                    what = "The profiling Job is Pending: no GPU is free"
                    next_step = _gpu_next_step(name)
                findings.append(
                    Finding(
                        what=what,
                        why=f"pod {pod_name}: {cond.get('reason', '')}: {message}",
                        next=next_step,
                    )
                )
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull"):
                findings.append(
                    Finding(
                        what=f"Container {cs.get('name')} cannot pull its image",
                        why=f"pod {pod_name}: {waiting.get('reason')}: "
                        f"{waiting.get('message', '')}",
                        next="Check spec.job.image / the target's image and the pull secrets.",
                    )
                )
    return findings
