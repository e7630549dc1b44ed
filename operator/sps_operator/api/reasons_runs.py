"""The registry's entries for the reasons of a run (pure): why its Job waits
(status.currentRun.waiting.reason), why it was refused before anything was created, and why
it failed (status.lastFailure.reason). Each says what it means, its kind (its health:
api/reason_registry.py), and what `kubectl sps explain` says of a waiting run (`waiting`,
{gpu}: its GPU product) and of a run that ended with it (`failure`; `advice` when explain
builds the finding from the message: {name} the profile, {run} the run)."""

from __future__ import annotations

from sps_operator.api import reasons as R
from sps_operator.api.reasons import Advice, Kind, Reason

# A table that failed an acceptance gate (spec.gates): the same next step for each gate;
# `kubectl sps explain` adds why an error bound is wide.
GATE_ADVICE = (
    "Look at it: `kubectl sps table {name} --rejected` and compare with the live one "
    "(`kubectl sps diff {name} {name}@rejected`). It is not retried as it is. If the "
    "change is real (new image, driver, clocks), relax spec.gates (maxChange, "
    "maxErrorBound, maxRmsMs, minR2): the changed spec starts a new attempt by itself; "
    "if it is noise, `kubectl sps reprofile {name}` to measure again."
)

RUN_REASONS: dict[str, Reason] = {
    R.WAITING_FOR_GPUS: Reason(
        Kind.WAITING,
        "no node has free GPUs of the product",
        failure=Advice(
            "The last run gave up: its Job waited longer than capacity.waitTimeoutSeconds for GPUs",
            "Every GPU of the product was busy for the whole wait. Let the operator lend the "
            "run one replica (spec.capacity.mode: BorrowReplica, docs/capacity.md), add a node "
            "to the pool, or raise spec.capacity.waitTimeoutSeconds; the run is retried with "
            "backoff, or now with `kubectl sps reprofile {name}`.",
        ),
    ),
    R.QUEUED_IN_KUEUE: Reason(
        Kind.WAITING,
        "the Job is suspended until Kueue admits it",
        waiting=Advice(
            "The profiling Job is queued in Kueue",
            "Kueue admits the Job (unsuspends it) when its ClusterQueue has quota for {gpu}; "
            "the message ends with Kueue's own words on the Job's Workload (`kubectl get "
            "workloads -n <namespace>`). Give the queue quota, or a higher priority "
            "(spec.job.priorityClassName / a WorkloadPriorityClass).",
        ),
        failure=Advice(
            "The last run gave up: Kueue did not admit its Job within capacity.waitTimeoutSeconds",
            "Check the queue (`kubectl get workloads`, the ClusterQueue's quota for the GPU "
            "product), give the Job a higher priority (spec.job.priorityClassName or a "
            "WorkloadPriorityClass label), or raise spec.capacity.waitTimeoutSeconds.",
        ),
    ),
    R.BORROW_BLOCKED: Reason(
        Kind.WAITING,
        "no GPU is free and a replica may not be borrowed",
        waiting=Advice(
            "The profiling Job waits for GPUs and borrowing a replica is refused",
            "capacity.mode BorrowReplica never borrows below minAvailable ready replicas, "
            "against a PodDisruptionBudget that allows no disruption, during a rollout, from a "
            "workload whose replicas an HPA or a GitOps apply owns, or twice at once on one "
            "GPU product (docs/capacity.md). Remove what the message names, free a GPU of "
            "{gpu}, or add a node; the operator retries by itself.",
        ),
        failure=Advice(
            "The last run gave up: no GPU was free and borrowing a replica stayed refused",
            "The message names what refused the borrow (a PodDisruptionBudget, minAvailable, an "
            "HPA or a GitOps owner of replicas, a rollout, another borrow on the product); see "
            "docs/capacity.md. Fix that or add a node, then `kubectl sps reprofile {name}`.",
        ),
    ),
    R.KUEUE_MANAGED_TARGET: Reason(
        Kind.WAITING,
        "no GPU is free and BorrowReplica never borrows from a target Kueue manages",
        waiting=Advice(
            "The profiling Job waits for GPUs; its target is never borrowed from",
            "Kueue manages the target (label kueue.x-k8s.io/queue-name on it or on a pod "
            "template of it), so capacity.mode BorrowReplica does not borrow from it: the lent "
            "replica's quota would go to whatever Kueue admits next, and the replica would "
            "queue for it again. This does not change by itself. Set spec.capacity.mode: Wait "
            "and give the profiling Job GPU quota in Kueue (spec.job.labels "
            "kueue.x-k8s.io/queue-name: a LocalQueue of this namespace), or free a GPU of "
            "{gpu}; the run goes on as soon as a GPU is free.",
        ),
        failure=Advice(
            "The last run gave up: no GPU was free, and its target is a workload Kueue manages",
            "capacity.mode BorrowReplica never borrows from a workload whose pods Kueue "
            "admits (label kueue.x-k8s.io/queue-name on it or on a pod template of it): a lent "
            "replica's quota would go to whatever Kueue admits next. Set spec.capacity.mode: "
            "Wait and give the profiling Job GPU quota in Kueue (spec.job.labels "
            "kueue.x-k8s.io/queue-name: a LocalQueue of this namespace; docs/capacity.md), then "
            "`kubectl sps reprofile {name}`.",
        ),
    ),
    R.LOCAL_QUEUE_MISSING: Reason(
        Kind.WAITING,
        "the Kueue LocalQueue the Job names does not exist",
        waiting=Advice(
            "The profiling Job names a Kueue LocalQueue that does not exist",
            "Create the LocalQueue in this namespace (spec.clusterQueue: a ClusterQueue with "
            "quota for {gpu}; `kubectl get localqueues -n <namespace>`), or name an existing "
            "one in spec.job.labels (kueue.x-k8s.io/queue-name); the waiting run goes on as "
            "soon as it exists.",
        ),
        failure=Advice(
            "The last run gave up: the Kueue LocalQueue its Job names does not exist",
            "Create the LocalQueue in this namespace (pointing at a ClusterQueue with quota for "
            "the GPU product), or name an existing one in spec.job.labels "
            "(kueue.x-k8s.io/queue-name); then `kubectl sps reprofile {name}`.",
        ),
    ),
    R.JOB_POLICY: Reason(
        Kind.FAILURE,
        "spec.job or spec.server asks what the policy forbids",
        failure=Advice(
            "spec.job or spec.server asks for something the cluster admin's policy does not allow",
            "The message starts with the rule (a chart value jobPolicy.*, or spec.server.url) "
            "and says what to change. Change that field of spec.job or spec.server, or ask the "
            "cluster admin to allow it; no Job was created, and the run starts at the next pass "
            "after the fix (docs/operator.md, Admin policy).",
        ),
    ),
    R.GPU_PIN_CONFLICT: Reason(
        Kind.FAILURE,
        "the Job would not run on the table's GPU product",
        failure=Advice(
            "The profiling Job would not run on the GPU product its table is for",
            "The Job is pinned to the product the target's pods run on. Remove "
            "spec.gpuProductLabel from spec.job.nodeSelector, or make the Deployment's required "
            "node affinity admit that product (while the Deployment moves to another pool, the "
            "run starts once its pods have moved). No Job was created.",
        ),
    ),
    R.JOB_LABELS_SELECT_PODS: Reason(
        Kind.FAILURE,
        "spec.job.labels would select server pods",
        failure=Advice(
            "spec.job.labels would make the profiling pod pass for a server pod",
            "A Service would send user traffic to the profiling server, or a Deployment or "
            "PodDisruptionBudget would count it as a replica. Remove or rename the labels the "
            "message names in spec.job.labels; no Job was created.",
        ),
    ),
    R.READ_WRITE_ONCE_POD_CLAIM: Reason(
        Kind.FAILURE,
        "the target mounts a ReadWriteOncePod claim a clone can never share",
        failure=Advice(
            "The target mounts a ReadWriteOncePod PersistentVolumeClaim: the clone can never "
            "mount it",
            "Only one pod in the cluster may mount such a claim, and the server does. Put the "
            "weights on a ReadOnlyMany or ReadWriteMany claim, or in an image volume or an init "
            "container that downloads them (docs/operator.md, Volumes). No Job was created; the "
            "run starts at the next pass after the fix.",
        ),
    ),
    R.CLAIM_NODE_UNAVAILABLE: Reason(
        Kind.FAILURE,
        "no ready target pod holds its ReadWriteOnce claims on a node of the product",
        failure=Advice(
            "The target's ReadWriteOnce claims are attached on no node the clone may use",
            "A ReadWriteOnce claim attaches to one node at a time, so the clone runs where a "
            "ready pod of the target mounts it, on the GPU product the table is for. The "
            "message names the claims and where they are held; the run starts once such a pod "
            "is ready. No Job was created. To let the clone run anywhere, use a ReadOnlyMany or "
            "ReadWriteMany claim.",
        ),
    ),
    R.PROFILING_FAILED: Reason(
        Kind.FAILURE,
        "the profiling Job or the profiler failed",
        advice=(
            "Read the profiler's log: `kubectl logs job/{run} -c profiler`; fix the cause, then "
            "`kubectl sps reprofile {name}`."
        ),
    ),
    R.JOB_CREATE_FAILED: Reason(
        Kind.FAILURE,
        "the API server refused the profiling Job",
        failure=Advice(
            "The API server refused the profiling Job",
            "The Job is built from the target's pod spec plus spec.job; the message names the "
            "invalid field. Fix spec.job (image, resources, tolerations, nodeSelector) or the "
            "Deployment; if neither sets that field, it is an operator bug: report it with "
            "`kubectl get deploy -o yaml` and `kubectl get sps {name} -o yaml`.",
        ),
    ),
    R.NAME_TAKEN: Reason(
        Kind.FAILURE,
        "an object of the run's name belongs to someone else",
        failure=Advice(
            "An object the run needs exists under the same name and is not this profile's",
            "Delete or rename the object named in the message; the operator never adopts "
            "objects it does not own.",
        ),
    ),
    R.JOB_MISSING: Reason(
        Kind.FAILURE,
        "the Job disappeared before it finished",
        failure=Advice(
            "The profiling Job disappeared before it finished",
            "Something deleted the run's Job while it ran (a person, a cleanup job, a GitOps "
            "prune of the namespace). The run is retried with backoff; if it keeps happening, "
            "find what deletes Jobs in this namespace.",
        ),
    ),
    R.RESULT_MISSING: Reason(
        Kind.FAILURE,
        "the Job completed without a result",
        failure=Advice(
            "The profiling Job completed but its result never arrived",
            "The operator waited for the profiler's last write to the result ConfigMap after "
            "the Job completed, and it did not come. Read the profiler's log (`kubectl logs "
            "job/<run> -c profiler`, the run is in status.lastFailure.run); the run is retried "
            "with backoff.",
        ),
    ),
    R.RESULT_REFUSED: Reason(
        Kind.FAILURE,
        "the Job's result was malformed or implausible",
        failure=Advice(
            "The profiling Job's result was refused as implausible or malformed",
            "The Job runs the server's image; a result outside SGLang's physical bounds is "
            "never fitted. Check the profiler's log (`kubectl logs job/<run> -c profiler`) and "
            "that spec.job.image is the operator's profiler; then `kubectl sps reprofile "
            "{name}`.",
        ),
    ),
    R.SERVER_REFUSED_TO_START: Reason(
        Kind.FAILURE,
        "the profiling clone of the server refused to start",
        failure=Advice(
            "The profiling clone refused to start",
            "The message has the server's last words and what they mean (e.g. the fzyzcjy fork "
            "needs --speculative-dspark-sps-table-path=const in compact mode). Fix the "
            "Deployment, then `kubectl sps reprofile {name}`.",
        ),
    ),
    R.KUEUE_NOT_INSTALLED: Reason(
        Kind.FAILURE,
        "the Job names a Kueue queue but Kueue is not installed",
        failure=Advice(
            "The last run ended at once: its Job names a Kueue queue, but Kueue is not installed",
            "The Job was created suspended for Kueue (label kueue.x-k8s.io/queue-name) and the "
            "API group kueue.x-k8s.io is not served, so nothing would ever admit it. Install "
            "Kueue, or remove the queue label (the chart's jobDefaults.labels, or "
            "spec.job.labels); the run is retried with backoff, or now with `kubectl sps "
            "reprofile {name}`.",
        ),
    ),
    R.KUEUE_DEACTIVATED: Reason(
        Kind.FAILURE,
        "Kueue deactivated the Job's Workload (e.g. its maximum execution time)",
        failure=Advice(
            "The last run ended at once: Kueue deactivated its Job's Workload",
            "Kueue will not admit a deactivated Workload again; the message has Kueue's reason. "
            "MaximumExecutionTimeExceeded: the label kueue.x-k8s.io/max-exec-time-seconds on "
            "the Job (spec.job.labels or the chart's jobDefaults.labels) is shorter than a run "
            "takes: raise it or shorten the sweep. Kueue counts it from admission; the run is "
            "retried with backoff, or now with `kubectl sps reprofile {name}`.",
        ),
    ),
    R.DEADLINE_EXCEEDED: Reason(
        Kind.FAILURE,
        "the Job ran past spec.job.activeDeadlineSeconds or Kueue's max-exec-time-seconds",
        failure=Advice(
            "The profiling Job ran longer than its limit",
            "The limit is spec.job.activeDeadlineSeconds, or the Job's label "
            "kueue.x-k8s.io/max-exec-time-seconds when shorter (the message says which); it "
            "counts from when the Job started running, not from its wait for GPUs, and a "
            "replica lent to the run is given back when it is reached. Raise it, or shorten the "
            "sweep (sweep.maxBatchSize, fewer fracs, a wider sweep.ciRelWidth); the run is "
            "retried with backoff, or now with `kubectl sps reprofile {name}`.",
        ),
    ),
    R.TARGET_GONE: Reason(
        Kind.FAILURE,
        "the Deployment went away between the phases",
        failure=Advice(
            "The target Deployment went away (or became unreadable) between the two phases",
            "Phase 2 of an Additive run clones the Deployment phase 1 measured; it was deleted, "
            "or its server command can no longer be read (status.targets says why). The run is "
            "retried with backoff once the Deployment is back as it was.",
        ),
    ),
    R.TARGET_CHANGED: Reason(
        Kind.FAILURE,
        "the Deployment changed between the phases",
        failure=Advice(
            "The Deployment changed between the two phases of an Additive run",
            "Phase 2 would have measured another server than phase 1, so the run ended. A new "
            "run profiles the server as it is now, by itself; if it keeps happening, avoid "
            "changing the Deployment while it is being profiled.",
        ),
    ),
    R.SWEEP_MISMATCH: Reason(
        Kind.FAILURE,
        "the result measured cells not asked for",
        failure=Advice(
            "The profiler measured a sweep this profile did not ask for (or a cell more than once)",
            "Use the operator's profiler image (remove spec.job.image) and do not edit the "
            "sweep during a run; then `kubectl sps reprofile {name}`.",
        ),
    ),
    R.INCOMPLETE_SWEEP: Reason(
        Kind.FAILURE,
        "the result lacks cells the sweep asked for",
        failure=Advice(
            "The profiler's result did not cover every cell of spec.table.sweep; no table was made",
            "sps-profiler measures every cell or fails the run, so a short result comes from a "
            "Job image that is not sps-profiler (remove spec.job.image) or a sweep edited "
            "during the run; cells measured only on an uncorrectable clock ramp are named in "
            "the message. Then `kubectl sps reprofile {name}`.",
        ),
    ),
    R.DOUBTFUL_MEASUREMENT: Reason(
        Kind.FAILURE,
        "more tokens measured as faster",
        failure=Advice(
            "The measurement is not plausible (more tokens measured as faster)",
            "Usually a noisy GPU (co-tenants, throttling). Re-profile on an idle GPU (`kubectl "
            "sps reprofile {name}`), or raise spec.table.sweep.repeats.",
        ),
    ),
    R.FIT_FAILED: Reason(
        Kind.FAILURE,
        "the rounds could not be fitted into a table",
        failure=Advice(
            "The measured rounds could not be fitted into a table",
            "Too few usable rounds (a sweep of one batch size, or rounds the profiler dropped). "
            "Widen spec.table.sweep (batchSizes / maxBatchSize), then `kubectl sps reprofile "
            "{name}`.",
        ),
    ),
    R.SELF_CHECK_FAILED: Reason(
        Kind.FAILURE,
        "the fitted table fails its self-check",
        failure=Advice(
            "The fitted table fails its self-check (non-positive or implausible step times)",
            "The table was not published. Re-profile (`kubectl sps reprofile {name}`); widen "
            "the sweep if it keeps failing.",
        ),
    ),
    R.FIT_QUALITY_GATE_FAILED: Reason(
        Kind.FAILURE,
        "the table fails spec.gates' fit quality",
        advice=GATE_ADVICE,
    ),
    R.ERROR_BOUND_GATE_FAILED: Reason(
        Kind.FAILURE,
        "the table's error bound exceeds spec.gates",
        advice=GATE_ADVICE,
    ),
    R.CHANGE_GATE_FAILED: Reason(
        Kind.FAILURE,
        "the table changes more than spec.gates allow",
        advice=GATE_ADVICE,
    ),
    R.ROLLOUT_FAILED: Reason(
        Kind.FAILURE,
        "the new table's rollout failed; rolled back",
        failure=Advice(
            "The new table's rollout did not become available; the operator rolled back",
            "Read the new pods' logs and events (`kubectl rollout status`, `kubectl describe "
            "pod`): a server that fails with the new table, or a pod that cannot be placed. The "
            "table stays in status.tables; once the cause is fixed, `kubectl sps reprofile "
            "{name}`.",
        ),
    ),
    R.RECONCILE_ERROR: Reason(
        Kind.FAILURE,
        "a step of the operator's pass failed",
        failure=Advice(
            "A step of the operator's pass failed",
            "The message names the step and the API's answer. Transient errors retry with "
            "backoff by themselves; a persistent one (403, 422) needs the RBAC or object fixed.",
        ),
    ),
    R.STATUS_WRITE_FAILED: Reason(
        Kind.FAILURE,
        "the API server refused the full status",
        failure=Advice(
            "The operator could not write this profile's full status",
            "The API refused the status (the message says why); report it with `kubectl get sps "
            "{name} -o yaml` and the operator's log.",
        ),
    ),
    R.INVALID_SPEC: Reason(
        Kind.FAILURE,
        "the spec does not validate",
        advice=(
            "The message names the field: fix it in the spec (docs/api.md lists each field and its "
            "bounds)."
        ),
    ),
}
