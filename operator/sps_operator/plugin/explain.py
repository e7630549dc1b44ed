"""`kubectl sps explain`: why the last run failed (or why nothing happens), and what to do.

Pure: it reads the SpsProfile, the current run's Job and pods, and the profile's
events as the API returns them, and returns findings, each with a next step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from sps_operator.api import reasons as R
from sps_operator.api.result import clean_text
from sps_operator.plugin.view import age, conditions_by_type, profile_state

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


# Why the operator leaves a Deployment alone (status.targets[].reason): what it means and
# what to do.
TARGET_REASONS: dict[str, tuple[str, str]] = {
    R.CONFLICT: (
        "Another SpsProfile serves this Deployment",
        "A Deployment, and an AnnotateOnly rollout.tableConfigMap, belong to one profile (the "
        "one recorded on it in sps.dev/owner, else the oldest); this one never writes to it. "
        "Narrow spec.selector so each Deployment is selected by one profile, give each "
        "AnnotateOnly profile its own rollout.tableConfigMap, or delete the other profile.",
    ),
    R.NOT_AN_SGLANG_SERVER: (
        "The selected Deployment is not an SGLang server the operator can recognise",
        "Start SGLang visibly in the container's command/args (python3 -m "
        "sglang.launch_server ... or sglang serve ...), set spec.serverContainer to the right "
        "container, or narrow spec.selector to SGLang Deployments.",
    ),
    R.NOT_A_DSPARK_SERVER: (
        "The selected server does not run DSpark speculative decoding",
        "SPS tables are only for servers started with --speculative-algorithm DSPARK; fix the "
        "server's flags or narrow spec.selector.",
    ),
    R.UNREADABLE_SHELL_SCRIPT: (
        "The server is started by a shell script the operator cannot read safely",
        "Put the launcher and its flags in the container's command/args (exec form); a script "
        "must be one plain command line without variables, pipes or several commands.",
    ),
    R.HIDDEN_COST_INPUT: (
        "A cost input of the server comes from something the operator cannot read",
        "The message names the reference (a Secret key, a per-pod field, a missing or too "
        "large ConfigMap) that feeds a flag or variable the table depends on: a change there "
        "would go unseen and leave a wrong table live. Write the value in args or env, or take "
        "it from a ConfigMap key, which the operator reads (it never reads Secrets).",
    ),
    R.SHELL_WRAPPED_SERVER: (
        "rollout.mode Inject cannot add the table flag to a shell script",
        "Move the launcher and flags to command/args, or use rollout.mode AnnotateOnly and "
        "write --speculative-dspark-sps-table-path into your script (docs/gitops.md).",
    ),
    R.TABLE_NOT_MOUNTED: (
        "With AnnotateOnly, the Deployment does not read the table where the operator writes it",
        "Mount spec.rollout.tableConfigMap at the directory of spec.rollout.tablePath and pass "
        "--speculative-dspark-sps-table-path <tablePath> to the server (docs/gitops.md).",
    ),
    R.ONE_TABLE_CONFIGMAP_MANY_SERVERS: (
        "AnnotateOnly has one table ConfigMap but the Deployments need different tables",
        "Give each (GPU product, server) its own SpsProfile and tableConfigMap, or use "
        "rollout.mode Inject (a table per Deployment).",
    ),
    R.TABLE_NOT_ELIGIBLE: (
        "The table in status does not match what its ConfigMap holds",
        "The table ConfigMap was changed or removed by hand. `kubectl sps reprofile` to "
        "measure a new one; the operator will not roll a table it cannot verify.",
    ),
    R.NO_SERVER_CONTAINER: (
        "spec.serverContainer names no container of the Deployment",
        "Set spec.serverContainer to the SGLang container's name.",
    ),
    R.AMBIGUOUS_FLAG: (
        "A flag of the server is an abbreviation of several flags",
        "SGLang's parser refuses it too (the server does not start). Write the flag in full.",
    ),
    R.CONFIG_FILE_FLAGS: (
        "The server reads flags from a --config file the operator cannot see",
        "A cost flag in the file would change without making the table stale. Write the "
        "flags in the container's args (`sps-operator fingerprint -f deployment.yaml` shows "
        "what the operator reads).",
    ),
    R.DIAGONAL_ONLY_SERVER: (
        "The server's table loader reads only diagonal tables; an Additive table would stop it",
        "Set spec.table.kind: Diagonal. The message says how the operator knows: "
        "--speculative-dspark-sps-table-path const (the fzyzcjy/sglang fork), or a profiling "
        "clone that refused an additive table at start-up (status.diagonalOnlyServers; a "
        "changed server is judged again). docs/compatibility.md lists the builds.",
    ),
    R.LORA_NEEDS_STATIC_MODE: (
        "DSpark with LoRA runs only in static mode, which reads no table",
        "SGLang refuses LoRA with DSpark outside static mode (#34337), so the operator puts no "
        "table onto such a server and profiles none in compact mode. Run the server in "
        "static mode with table.kind Diagonal, or without LoRA (docs/compatibility.md).",
    ),
    R.LORA_UNSUPPORTED: (
        "This SGLang release refuses LoRA with DSpark at start-up",
        "Releases up to v0.5.17 run LoRA only with NGRAM speculative decoding: the server "
        "cannot start. Use a later SGLang in static mode, or run without LoRA; if the image "
        "tag misleads, set spec.server.sglangVersion.",
    ),
}

# Failures a run can end with (status.lastFailure.reason), beyond the heuristics below.
FAILURE_REASONS: dict[str, tuple[str, str]] = {
    R.RESULT_REFUSED: (
        "The profiling Job's result was refused as implausible or malformed",
        "The Job runs the server's image; a result outside SGLang's physical bounds is never "
        "fitted. Check the profiler's log (`kubectl logs job/<run> -c profiler`) and that "
        "spec.job.image is the operator's profiler; then `kubectl sps reprofile {name}`.",
    ),
    R.DOUBTFUL_MEASUREMENT: (
        "The measurement is not plausible (more tokens measured as faster)",
        "Usually a noisy GPU (co-tenants, throttling). Re-profile on an idle GPU "
        "(`kubectl sps reprofile {name}`), or raise spec.table.sweep.repeats.",
    ),
    R.SELF_CHECK_FAILED: (
        "The fitted table fails its self-check (non-positive or implausible step times)",
        "The table was not published. Re-profile (`kubectl sps reprofile {name}`); widen the "
        "sweep if it keeps failing.",
    ),
    R.SWEEP_MISMATCH: (
        "The profiler measured a sweep this profile did not ask for (or a cell more than once)",
        "Use the operator's profiler image (remove spec.job.image) and do not edit the sweep "
        "during a run; then `kubectl sps reprofile {name}`.",
    ),
    R.INCOMPLETE_SWEEP: (
        "The profiler's result did not cover every cell of spec.table.sweep; no table was made",
        "sps-profiler measures every cell or fails the run, so a short result comes from a "
        "Job image that is not sps-profiler (remove spec.job.image) or a sweep edited during "
        "the run; cells measured only on an uncorrectable clock ramp are named in the "
        "message. Then `kubectl sps reprofile {name}`.",
    ),
    R.JOB_POLICY: (
        "spec.job or spec.server asks for something the cluster admin's policy does not allow",
        "The message starts with the rule (a chart value jobPolicy.*, or spec.server.url) and "
        "says what to change. Change that field of spec.job or spec.server, or ask the cluster "
        "admin to allow it; no Job was created, and the run starts at the next pass after the "
        "fix (docs/operator.md, Admin policy).",
    ),
    R.GPU_PIN_CONFLICT: (
        "The profiling Job would not run on the GPU product its table is for",
        "The Job is pinned to the product the target's pods run on. Remove "
        "spec.gpuProductLabel from spec.job.nodeSelector, or make the Deployment's required "
        "node affinity admit that product (while the Deployment moves to another pool, the "
        "run starts once its pods have moved). No Job was created.",
    ),
    R.JOB_LABELS_SELECT_PODS: (
        "spec.job.labels would make the profiling pod pass for a server pod",
        "A Service would send user traffic to the profiling server, or a Deployment or "
        "PodDisruptionBudget would count it as a replica. Remove or rename the labels the "
        "message names in spec.job.labels; no Job was created.",
    ),
    R.READ_WRITE_ONCE_POD_CLAIM: (
        "The target mounts a ReadWriteOncePod PersistentVolumeClaim: the clone can never mount it",
        "Only one pod in the cluster may mount such a claim, and the server does. Put the "
        "weights on a ReadOnlyMany or ReadWriteMany claim, or in an image volume or an init "
        "container that downloads them (docs/operator.md, Volumes). No Job was created; the "
        "run starts at the next pass after the fix.",
    ),
    R.CLAIM_NODE_UNAVAILABLE: (
        "The target's ReadWriteOnce claims are attached on no node the clone may use",
        "A ReadWriteOnce claim attaches to one node at a time, so the clone runs where a ready "
        "pod of the target mounts it, on the GPU product the table is for. The message names "
        "the claims and where they are held; the run starts once such a pod is ready. No Job "
        "was created. To let the clone run anywhere, use a ReadOnlyMany or ReadWriteMany claim.",
    ),
    R.TARGET_CHANGED: (
        "The Deployment changed between the two phases of an Additive run",
        "Phase 2 would have measured another server than phase 1, so the run ended. A new "
        "run profiles the server as it is now, by itself; if it keeps happening, avoid "
        "changing the Deployment while it is being profiled.",
    ),
    R.NAME_TAKEN: (
        "An object the run needs exists under the same name and is not this profile's",
        "Delete or rename the object named in the message; the operator never adopts "
        "objects it does not own.",
    ),
    R.RECONCILE_ERROR: (
        "A step of the operator's pass failed",
        "The message names the step and the API's answer. Transient errors retry with "
        "backoff by themselves; a persistent one (403, 422) needs the RBAC or object fixed.",
    ),
    R.WAITING_FOR_GPUS: (
        "The last run gave up: its Job waited longer than capacity.waitTimeoutSeconds for GPUs",
        "Every GPU of the product was busy for the whole wait. Let the operator lend the run "
        "one replica (spec.capacity.mode: BorrowReplica, docs/capacity.md), add a node to the "
        "pool, or raise spec.capacity.waitTimeoutSeconds; the run is retried with backoff, "
        "or now with `kubectl sps reprofile {name}`.",
    ),
    R.QUEUED_IN_KUEUE: (
        "The last run gave up: Kueue did not admit its Job within capacity.waitTimeoutSeconds",
        "Check the queue (`kubectl get workloads`, the ClusterQueue's quota for the GPU "
        "product), give the Job a higher priority (spec.job.priorityClassName or a "
        "WorkloadPriorityClass label), or raise spec.capacity.waitTimeoutSeconds.",
    ),
    R.KUEUE_NOT_INSTALLED: (
        "The last run ended at once: its Job names a Kueue queue, but Kueue is not installed",
        "The Job was created suspended for Kueue (label kueue.x-k8s.io/queue-name) and the "
        "API group kueue.x-k8s.io is not served, so nothing would ever admit it. Install "
        "Kueue, or remove the queue label (the chart's jobDefaults.labels, or spec.job.labels); "
        "the run is retried with backoff, or now with `kubectl sps reprofile {name}`.",
    ),
    R.LOCAL_QUEUE_MISSING: (
        "The last run gave up: the Kueue LocalQueue its Job names does not exist",
        "Create the LocalQueue in this namespace (pointing at a ClusterQueue with quota for "
        "the GPU product), or name an existing one in spec.job.labels "
        "(kueue.x-k8s.io/queue-name); then `kubectl sps reprofile {name}`.",
    ),
    R.BORROW_BLOCKED: (
        "The last run gave up: no GPU was free and borrowing a replica stayed refused",
        "The message names what refused the borrow (a PodDisruptionBudget, minAvailable, an "
        "HPA or a GitOps owner of replicas, a rollout, another borrow on the product); see "
        "docs/capacity.md. Fix that or add a node, then `kubectl sps reprofile {name}`.",
    ),
    R.KUEUE_MANAGED_TARGET: (
        "The last run gave up: no GPU was free, and its target is a Deployment Kueue manages",
        "capacity.mode BorrowReplica never borrows from a Deployment whose pods Kueue admits "
        "(label kueue.x-k8s.io/queue-name on it or its pod template): a lent replica's quota "
        "would go to whatever Kueue admits next. Set spec.capacity.mode: Wait and give the "
        "profiling Job GPU quota in Kueue (spec.job.labels kueue.x-k8s.io/queue-name: a "
        "LocalQueue of this namespace; docs/capacity.md), then `kubectl sps reprofile {name}`.",
    ),
    R.DIAGONAL_ONLY_SERVER: (
        "The profiling clone refused the additive seed table: its loader reads only diagonal",
        "Nothing was rolled out, and the operator now refuses Additive for this server (a "
        "production server would not have started with an additive table). Set "
        "spec.table.kind: Diagonal; the message has the server's last words.",
    ),
    R.SERVER_REFUSED_TO_START: (
        "The profiling clone refused to start",
        "The message has the server's last words and what they mean (e.g. the fzyzcjy fork "
        "needs --speculative-dspark-sps-table-path=const in compact mode). Fix the "
        "Deployment, then `kubectl sps reprofile {name}`.",
    ),
    R.LORA_NEEDS_STATIC_MODE: (
        "The profiling clone refused LoRA in its mode",
        "DSpark with LoRA runs only in static mode; use table.kind Diagonal, or run without "
        "LoRA (docs/compatibility.md).",
    ),
    R.KUEUE_DEACTIVATED: (
        "The last run ended at once: Kueue deactivated its Job's Workload",
        "Kueue will not admit a deactivated Workload again; the message has Kueue's reason. "
        "MaximumExecutionTimeExceeded: the label kueue.x-k8s.io/max-exec-time-seconds on the "
        "Job (spec.job.labels or the chart's jobDefaults.labels) is shorter than a run takes: "
        "raise it or shorten the sweep. Kueue counts it from admission; the run is retried "
        "with backoff, or now with `kubectl sps reprofile {name}`.",
    ),
    R.DEADLINE_EXCEEDED: (
        "The profiling Job ran longer than its limit",
        "The limit is spec.job.activeDeadlineSeconds, or the Job's label "
        "kueue.x-k8s.io/max-exec-time-seconds when shorter (the message says which); it "
        "counts from when the Job started running, not from its wait for GPUs, and a replica "
        "lent to the run is given back when it is reached. Raise it, or shorten the sweep "
        "(sweep.maxBatchSize, fewer fracs, a wider sweep.ciRelWidth); the run is retried "
        "with backoff, or now with `kubectl sps reprofile {name}`.",
    ),
    R.RESULT_MISSING: (
        "The profiling Job completed but its result never arrived",
        "The operator waited for the profiler's last write to the result ConfigMap after the "
        "Job completed, and it did not come. Read the profiler's log (`kubectl logs job/<run> "
        "-c profiler`, the run is in status.lastFailure.run); the run is retried with backoff.",
    ),
    R.JOB_MISSING: (
        "The profiling Job disappeared before it finished",
        "Something deleted the run's Job while it ran (a person, a cleanup job, a GitOps "
        "prune of the namespace). The run is retried with backoff; if it keeps happening, "
        "find what deletes Jobs in this namespace.",
    ),
    R.TARGET_GONE: (
        "The target Deployment went away (or became unreadable) between the two phases",
        "Phase 2 of an Additive run clones the Deployment phase 1 measured; it was deleted, "
        "or its server command can no longer be read (status.targets says why). The run is "
        "retried with backoff once the Deployment is back as it was.",
    ),
    R.STATUS_WRITE_FAILED: (
        "The operator could not write this profile's full status",
        "The API refused the status (the message says why); report it with `kubectl get sps "
        "{name} -o yaml` and the operator's log.",
    ),
}


# A table that failed an acceptance gate (spec.gates): not retried as it is.
GATE_FAILURES = frozenset(
    {R.FIT_QUALITY_GATE_FAILED, R.ERROR_BOUND_GATE_FAILED, R.CHANGE_GATE_FAILED}
)


def _text(*parts: Any) -> str:
    return " ".join(str(p) for p in parts if p).lower()


def _failure_finding(name: str, failure: Mapping[str, Any]) -> Finding:
    reason = str(failure.get("reason") or "Failed")
    message = str(failure.get("message") or "")
    text = _text(reason, message)
    attempts = failure.get("attempts") or 1
    evidence = f"{reason}: {message} (run {failure.get('run', '?')}, at {failure.get('at', '?')}"
    evidence += f", {attempts} attempts)" if attempts and int(attempts) > 1 else ")"
    if reason in FAILURE_REASONS:
        what, next_step = FAILURE_REASONS[reason]
        return Finding(what=what, why=evidence, next=next_step.format(name=name))
    if reason in GATE_FAILURES:
        return _gate_finding(name, evidence)
    if reason == R.JOB_CREATE_FAILED:
        return Finding(
            what="The API server refused the profiling Job",
            why=evidence,
            next=(
                "The Job is built from the target's pod spec plus spec.job; the message names "
                "the invalid field. Fix spec.job (image, resources, tolerations, nodeSelector) "
                "or the Deployment; if neither sets that field, it is an operator bug: report it "
                f"with `kubectl get deploy -o yaml` and `kubectl get sps {name} -o yaml`."
            ),
        )
    if reason == R.ROLLOUT_FAILED:
        return Finding(
            what="The new table's rollout did not become available; the operator rolled back",
            why=evidence,
            next=(
                "Read the new pods' logs and events (`kubectl rollout status`, `kubectl describe "
                "pod`): a server that fails with the new table, or a pod that cannot be placed. "
                "The table stays in status.tables; once the cause is fixed, "
                f"`kubectl sps reprofile {name}`."
            ),
        )
    if reason == R.FIT_FAILED:
        return Finding(
            what="The measured rounds could not be fitted into a table",
            why=evidence,
            next=(
                "Too few usable rounds (a sweep of one batch size, or rounds the profiler "
                "dropped). Widen spec.table.sweep (batchSizes / maxBatchSize), then "
                f"`kubectl sps reprofile {name}`."
            ),
        )
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
        next=(
            "Read the profiler's log: "
            f"`kubectl logs job/{failure.get('run', '<job>')} -c profiler`; "
            f"fix the cause, then `kubectl sps reprofile {name}`."
        ),
    )


def _gate_finding(name: str, evidence: str) -> Finding:
    bound = (
        " The error bound (ERROR-BOUND in `kubectl sps get -o wide`, "
        "status.tables[].quality.errorBoundRel) is wide when the GPU's steps are noisy or "
        "autocorrelated (wide round CIs: tighten sweep.ciRelWidth) or when the table "
        "interpolates across too few batch sizes (leave-one-out error: add sweep.batchSizes)."
        if R.ERROR_BOUND_GATE_FAILED in evidence or "maxErrorBound" in evidence
        else ""
    )
    return Finding(
        what="A new table failed an acceptance gate and was not rolled out",
        why=evidence,
        next=(
            f"Look at it: `kubectl sps table {name} --rejected` and compare with the live one "
            f"(`kubectl sps diff {name} {name}@rejected`). It is not retried as it is. If the "
            "change is real (new image, driver, clocks), relax spec.gates (maxChange, "
            "maxErrorBound, maxRmsMs, minR2): the changed spec starts a new attempt by itself; "
            f"if it is noise, `kubectl sps reprofile {name}` to measure again.{bound}"
        ),
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


def _rollout_findings(status: Mapping[str, Any]) -> list[Finding]:
    findings = []
    for target in status.get("targets") or []:
        name = target.get("deployment")
        message = str(target.get("message") or "")
        if target.get("state") == "Rolling" and target.get("reason") == R.ROLLOUT_BLOCKED:
            lowered = message.lower()
            next_step = next(
                (hint for keys, hint in _ROLLOUT_NEXT if any(k in lowered for k in keys)),
                "Look at the new pods (`kubectl describe pod`, `kubectl rollout status "
                f"deployment/{name}`); the profile is ready only once every ready pod runs "
                "the table.",
            )
            findings.append(
                Finding(
                    what=f"The rollout of the new table onto Deployment {name} is blocked "
                    f"(since {target.get('blockedSince') or '?'})",
                    why=f"RolloutBlocked: {message}",
                    next=next_step,
                )
            )
        elif target.get("heldUntil"):
            findings.append(
                Finding(
                    what=f"A newer table for Deployment {name} waits for the minimum interval "
                    "between rollouts",
                    why=message,
                    next=(
                        f"It is rolled at {target['heldUntil']} by itself; each rollout restarts "
                        "every server, so refreshes of a table that runs are spaced by the "
                        "operator's minimum (chart value refresh.minIntervalSeconds) or the "
                        "profile's spec.refresh.minIntervalSeconds, whichever is longer."
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


def _schedule_and_clock_findings(
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


def _waiting_finding(
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
    if reason == R.QUEUED_IN_KUEUE:
        return Finding(
            what=f"The profiling Job is queued in Kueue {how_long}",
            why=why,
            next=(
                "Kueue admits the Job (unsuspends it) when its ClusterQueue has quota for "
                f"{gpu}; the message ends with Kueue's own words on the Job's Workload "
                "(`kubectl get workloads -n <namespace>`). Give the queue quota, or a higher "
                f"priority (spec.job.priorityClassName / a WorkloadPriorityClass). {bound}"
            ),
        )
    if reason == R.LOCAL_QUEUE_MISSING:
        return Finding(
            what=f"The profiling Job names a Kueue LocalQueue that does not exist {how_long}",
            why=why,
            next=(
                "Create the LocalQueue in this namespace (spec.clusterQueue: a ClusterQueue "
                f"with quota for {gpu}; `kubectl get localqueues -n <namespace>`), or name an "
                "existing one in spec.job.labels (kueue.x-k8s.io/queue-name); the waiting run "
                f"goes on as soon as it exists. {bound}"
            ),
        )
    if reason == R.BORROW_BLOCKED:
        return Finding(
            what=f"The profiling Job waits for GPUs and borrowing a replica is refused {how_long}",
            why=why,
            next=(
                "capacity.mode BorrowReplica never borrows below minAvailable ready replicas, "
                "against a PodDisruptionBudget that allows no disruption, during a rollout, from "
                "a Deployment whose replicas an HPA or a GitOps apply owns, or twice at once on "
                "one GPU product (docs/capacity.md). Remove what "
                f"the message names, free a GPU of {gpu}, or add a node; the operator retries "
                f"by itself. {bound}"
            ),
        )
    if reason == R.KUEUE_MANAGED_TARGET:
        return Finding(
            what=f"The profiling Job waits for GPUs; its target is never borrowed from {how_long}",
            why=why,
            next=(
                "Kueue manages the target Deployment (label kueue.x-k8s.io/queue-name on it or "
                "its pod template), so capacity.mode BorrowReplica does not borrow from it: the "
                "lent replica's quota would go to whatever Kueue admits next, and the replica "
                "would queue for it again. This does not change by itself. Set "
                "spec.capacity.mode: Wait and give the profiling Job GPU quota in Kueue "
                "(spec.job.labels kueue.x-k8s.io/queue-name: a LocalQueue of this namespace), or "
                f"free a GPU of {gpu}; the run goes on as soon as a GPU is free. {bound}"
            ),
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


def _run_line(run: Mapping[str, Any], now: datetime) -> dict[str, str] | None:
    """The current run in one line: what it does, how long it has waited, what it borrowed."""
    if not run:
        return None
    line = {"name": str(run.get("name") or "?"), "phase": str(run.get("phase") or "?")}
    waiting = run.get("waiting") or {}
    if waiting.get("reason"):
        line["waiting"] = str(waiting["reason"])
        line["waitingFor"] = age(waiting.get("since"), now)
        line["waitingSince"] = str(waiting.get("since") or "")
    borrow = run.get("borrow") or {}
    if borrow.get("deployment"):
        line["borrowed"] = (
            f"1 of {borrow.get('replicas', '?')} replicas of {borrow['deployment']} "
            f"for {age(borrow.get('at'), now)}"
        )
    changes = [str(c) for c in run.get("changes") or []]
    if changes:
        line["trigger"] = str(run.get("trigger") or "")
        line["changes"] = "; ".join(changes)
    return line


def _pod_findings(
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


def explain(
    profile: Mapping[str, Any],
    job: Mapping[str, Any] | None = None,
    pods: Sequence[Mapping[str, Any]] = (),
    events: Sequence[Mapping[str, Any]] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    now = now or datetime.now(UTC)
    meta = profile.get("metadata") or {}
    name = str(meta.get("name", "?"))
    status = profile.get("status") or {}
    conds = conditions_by_type(profile)
    findings: list[Finding] = []

    generation = meta.get("generation")
    observed = status.get("observedGeneration")
    if not status:
        findings.append(
            Finding(
                what="The operator has not processed this profile yet",
                why="the profile has no status",
                next=(
                    "Check the operator runs and serves this namespace: "
                    "`kubectl -n sps-system logs deploy/sps-operator` (watch.mode/namespaces "
                    "in the chart's values)."
                ),
            )
        )
    elif generation is not None and observed is not None and observed < generation:
        findings.append(
            Finding(
                what="The operator has not seen the latest spec yet",
                why=f"observedGeneration {observed} < generation {generation}",
                next="Wait a few seconds; if it persists, check the operator's log.",
            )
        )

    gpu = str(status.get("gpuProduct") or "")
    mixed_evidence = [
        f"{c.get('reason', '')}: {c.get('message', '')}"
        for c in (conds.get(R.DEGRADED), conds.get(R.READY))
        if c and c.get("status") in ("True", "False") and c.get("reason") == R.MIXED_GPU_PRODUCTS
    ] + [
        f"Deployment {t.get('deployment')}: {t.get('message')}"
        for t in status.get("targets") or []
        if t.get("reason") == R.MIXED_GPU_PRODUCTS
    ]
    if "," in gpu or mixed_evidence:
        findings.append(
            Finding(
                what="The targets run on several GPU products",
                why="; ".join(mixed_evidence) or f"GPU products: {gpu}",
                next=(
                    "One table fits one GPU product. Pin each Deployment to one pool "
                    "(nodeSelector nvidia.com/gpu.product: <product>), or split it into one "
                    "Deployment per pool; the operator keeps a table per product."
                ),
            )
        )

    for target in status.get("targets") or []:
        reason = str(target.get("reason") or "")
        if target.get("state") == "Refused" and reason in TARGET_REASONS:
            what, next_step = TARGET_REASONS[reason]
            findings.append(
                Finding(
                    what=f"{what} (Deployment {target.get('deployment')})",
                    why=f"{reason}: {target.get('message') or ''}",
                    next=next_step,
                )
            )

    for target in status.get("targets") or []:
        unseen = [str(u) for u in target.get("unfingerprinted") or []]
        if unseen:
            findings.append(
                Finding(
                    what="Inputs that look like cost inputs are not in the fingerprint "
                    f"(Deployment {target.get('deployment')})",
                    why="; ".join(unseen),
                    next=(
                        "A change of these reprofiles nothing, so a table could outlive the "
                        "cost it measured. Pin the image by digest or release tag; write "
                        "cost flags in args, not in a Secret; after changing one of the "
                        f"others, `kubectl sps reprofile {name}`. docs/fingerprint.md lists "
                        "what is fingerprinted."
                    ),
                )
            )

    failure = status.get("lastFailure")
    if failure:
        findings.append(_failure_finding(name, failure))

    rejected = status.get("rejectedTable")
    if rejected and (failure or {}).get("reason") not in GATE_FAILURES:  # said once
        tr = conds.get(R.TABLE_READY) or {}
        findings.append(
            _gate_finding(
                name,
                f"rejected table {rejected.get('configMap', '?')}: "
                f"{tr.get('reason', '')}: {tr.get('message', '')}",
            )
        )

    stale = conds.get(R.STALE) or {}
    after = "; the last attempt failed ("
    stale_message = str(stale.get("message") or "")
    if stale.get("status") == "True" and after in stale_message:
        head, _, tail = stale_message.partition(after)
        reason, _, next_step = tail.partition("): ")
        findings.append(
            Finding(
                what="A refresh is pending and its last attempt failed",
                why=f"{stale.get('reason', '')}: {head} (last attempt: {reason})",
                next=next_step or "See status.lastFailure.",
            )
        )
    findings.extend(_rollout_findings(status))
    findings.extend(_schedule_and_clock_findings(status, events))

    run = status.get("currentRun") or {}
    waiting = _waiting_finding(name, profile.get("spec") or {}, run, now)
    if waiting is not None:
        findings.append(waiting)
    if job is not None:
        findings.extend(_pod_findings(name, pods, scheduling=waiting is None))

    for event in events:
        if event.get("type") == "Warning" and not findings:
            findings.append(
                Finding(
                    what=f"Warning event {event.get('reason', '')}",
                    why=str(event.get("message") or event.get("note") or ""),
                    next="See `kubectl describe sps " + name + "`.",
                )
            )
            break

    targets = status.get("targets")
    if status and targets == [] and not findings:
        findings.append(
            Finding(
                what="No Deployment matches the selector",
                why=f"spec.selector = {(profile.get('spec') or {}).get('selector')}",
                next="Label the SGLang Deployment(s) in this namespace to match spec.selector.",
            )
        )

    ready = conds.get(R.READY) or {}
    if status and ready.get("status") != "True" and not findings and not status.get("currentRun"):
        # Never "nothing is wrong" while the profile is not ready.
        findings.append(
            Finding(
                what="The profile is not ready",
                why=f"{ready.get('reason', 'Unknown')}: {ready.get('message', '')}",
                next=f"`kubectl describe sps {name}` shows each Deployment's state and message.",
            )
        )

    return {
        "name": name,
        "namespace": meta.get("namespace"),
        "state": profile_state(profile),
        "conditions": [
            {
                k: clean_text(c.get(k) or "", MAX_EVIDENCE)
                for k in ("type", "status", "reason", "message")
            }
            for c in conds.values()
        ],
        "run": _run_line(run, now),
        "findings": [f.to_dict() for f in findings],
    }


def render_explain(report: Mapping[str, Any]) -> str:
    lines = [f"SpsProfile {report.get('namespace')}/{report['name']}: {report['state']}"]
    for cond in report.get("conditions") or []:
        lines.append(
            f"  {cond['type']:<11} {cond['status']:<7} {cond.get('reason') or ''}"
            + (f" - {cond['message']}" if cond.get("message") else "")
        )
    run = report.get("run")
    if run:
        text = f"  Run {run['name']} ({run['phase']})"
        if run.get("waiting"):
            text += f": {run['waiting']} for {run['waitingFor']} (since {run['waitingSince']})"
        if run.get("borrowed"):
            text += f"; borrowed {run['borrowed']}"
        lines.append(clean_text(text, MAX_EVIDENCE))
        if run.get("changes"):
            trigger = run.get("trigger") or R.SERVER_CHANGED
            why = f"  {trigger}: the server changed: {run['changes']}"
            lines.append(clean_text(why, MAX_EVIDENCE))
    findings = report.get("findings") or []
    if not findings:
        lines.append(
            "\nNothing is wrong: every Deployment runs a table measured for it"
            if report.get("state") == R.READY
            else "\nNothing is wrong: a run is in progress."
        )
        return "\n".join(lines)
    for i, finding in enumerate(findings, 1):
        lines += [
            "",
            f"{i}. {finding['what']}",
            f"   Why:  {finding['why']}",
            f"   Next: {finding['next']}",
        ]
    return "\n".join(lines)
