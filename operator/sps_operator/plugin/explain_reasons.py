"""What `kubectl sps explain` says about each reason the operator records (pure, no I/O).

A refused target's reason (status.targets[].reason) and a run's failure reason
(status.lastFailure.reason) map to what it means and the next step; the reasons themselves
are spelled in api/reasons.py.
"""

from __future__ import annotations

from sps_operator.api import reasons as R

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
    R.TABLE_MODIFIED: (
        "A table ConfigMap does not hold the bytes the operator published",
        "Someone replaced or edited it under its name (a table is its content hash, recorded "
        "in status when it was published; its labels and owner prove nothing). The operator "
        "never rolls it: it drops the table from status.tables and measures it again, and "
        "the new run's publish replaces the ConfigMap. Find who recreated it (`kubectl get "
        "cm <name> -o yaml`: managedFields, creationTimestamp) and do not edit table "
        "ConfigMaps.",
    ),
    R.TABLE_MOUNT_SHADOWED: (
        "The server container mounts something at or under the table's path",
        "A volume mount of the Deployment's own (a subPath file at the table path, a "
        "directory over it) would hide the table the operator puts there while status said "
        "it runs. Remove the mount, or move it out of spec.rollout.tablePath's directory.",
    ),
    R.TARGET_TOO_LARGE: (
        "The Deployment, or its server's command line, is larger than the operator reads",
        "The message says which limit (object size, or flags of the server's command "
        "line): the operator parses at most that much of a tenant's object per pass. Trim "
        "the Deployment (unused flags, huge annotations) below the limit.",
    ),
    R.STABLE_TABLE_CONTESTED: (
        "AnnotateOnly: something else keeps writing the stable table ConfigMap",
        "The message names the other writer (its field manager) and how often the operator "
        "had to write the table back. Two writers of one ConfigMap fight forever: point "
        "spec.rollout.tableConfigMap at a ConfigMap only the operator writes (never a "
        "system one such as kube-root-ca.crt), or stop the other writer (a GitOps tool "
        "syncing it: exclude its data, docs/gitops.md).",
    ),
    R.HOLDER_REFERENCE_CONTESTED: (
        "Something keeps removing the reference that makes a Deployment hold its table",
        "The operator makes each Deployment that mounts a table an owner of its ConfigMap, "
        "so the garbage collector keeps the table while the Deployment needs it, even when "
        "the profile goes. Something (a person, a GitOps tool syncing the ConfigMap, a "
        "controller) removes that reference again after each write; the operator writes it "
        "back with a backoff (1 min, doubling, at most hourly) instead of at every pass. "
        "Find the writer (`kubectl get cm <table> --show-managed-fields -o yaml`) and stop "
        "it touching ownerReferences of the operator's table ConfigMaps.",
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
    R.PD_DISAGGREGATED_SERVER: (
        "The server is one half of a PD-disaggregated pair (--disaggregation-mode)",
        "A decode server takes requests only with the KV cache its prefill peer sends it, so a "
        "profiling clone alone cannot run the profiler's batches; and it replays the full-width "
        "verify graph whatever the budget (no DP tier gathering), so a table measured on a "
        "clone without the mode would be another server's. A prefill server never decodes. "
        "No table the operator can measure fits it (a table measured without the mode "
        "prices budgets the server does not run), so none is measured or rolled. Narrow "
        "spec.selector to servers without --disaggregation-mode (docs/compatibility.md).",
    ),
    R.ENGRAM_COMPACT_TABLE: (
        "An Engram model (DeepSeek-V4.1-Flash) cannot capture its CUDA graphs with a table",
        "With SGLANG_RAGGED_VERIFY_MODE compact (or cap-accept) and a profiled table, capture "
        "dies on every rank ('engram target-verify expects one equal block per request', "
        "sglang #39173), so the operator puts no table onto it and profiles none in compact "
        "mode. Run it in static mode with table.kind Diagonal, or wait for a fixed SGLang and "
        "set spec.server.sglangVersion (docs/compatibility.md).",
    ),
}

# Failures a run can end with (status.lastFailure.reason), beyond the heuristics below.
FAILURE_REASONS: dict[str, tuple[str, str]] = {
    R.JOB_CREATE_FAILED: (
        "The API server refused the profiling Job",
        "The Job is built from the target's pod spec plus spec.job; the message names "
        "the invalid field. Fix spec.job (image, resources, tolerations, nodeSelector) "
        "or the Deployment; if neither sets that field, it is an operator bug: report it "
        "with `kubectl get deploy -o yaml` and `kubectl get sps {name} -o yaml`.",
    ),
    R.ROLLOUT_FAILED: (
        "The new table's rollout did not become available; the operator rolled back",
        "Read the new pods' logs and events (`kubectl rollout status`, `kubectl describe "
        "pod`): a server that fails with the new table, or a pod that cannot be placed. "
        "The table stays in status.tables; once the cause is fixed, "
        "`kubectl sps reprofile {name}`.",
    ),
    R.FIT_FAILED: (
        "The measured rounds could not be fitted into a table",
        "Too few usable rounds (a sweep of one batch size, or rounds the profiler "
        "dropped). Widen spec.table.sweep (batchSizes / maxBatchSize), then "
        "`kubectl sps reprofile {name}`.",
    ),
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
    R.ENGRAM_COMPACT_TABLE: (
        "The profiling clone died capturing its CUDA graphs with a table (an Engram model)",
        "SGLang's Engram target-verify cannot capture compact verify graphs with a profiled "
        "table (sglang #39173); the run is not retried. Use table.kind Diagonal in static "
        "mode (docs/compatibility.md); the message has the server's last words.",
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
