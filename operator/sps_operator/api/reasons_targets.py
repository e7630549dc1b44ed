"""The registry's entries for the reasons the operator leaves a Deployment alone
(status.targets[].reason; pure). Each says what it means, its kind (its health:
api/reason_registry.py), and what `kubectl sps explain` says of a refused target
(`target`), and of a run that ended with it (`failure`, {name}: the profile)."""

from __future__ import annotations

from sps_operator.api import reasons as R
from sps_operator.api.reasons import Advice, Kind, Reason

TARGET_REASONS: dict[str, Reason] = {
    R.CONFLICT: Reason(
        Kind.PROBLEM,
        "another SpsProfile serves the Deployment or ConfigMap",
        target=Advice(
            "Another SpsProfile serves this Deployment",
            "A Deployment, and an AnnotateOnly rollout.tableConfigMap, belong to one profile "
            "(the one recorded on it in sps.dev/owner, else the oldest); this one never writes "
            "to it. Narrow spec.selector so each Deployment is selected by one profile, give "
            "each AnnotateOnly profile its own rollout.tableConfigMap, or delete the other "
            "profile.",
        ),
    ),
    R.NOT_AN_SGLANG_SERVER: Reason(
        Kind.PROBLEM,
        "the container does not start an SGLang server",
        target=Advice(
            "The selected Deployment is not an SGLang server the operator can recognise",
            "Start SGLang visibly in the container's command/args (python3 -m "
            "sglang.launch_server ... or sglang serve ...), set spec.serverContainer to the "
            "right container, or narrow spec.selector to SGLang Deployments.",
        ),
    ),
    R.NOT_A_DSPARK_SERVER: Reason(
        Kind.PROBLEM,
        "the server does not run DSpark decoding",
        target=Advice(
            "The selected server does not run DSpark speculative decoding",
            "SPS tables are only for servers started with --speculative-algorithm DSPARK; fix "
            "the server's flags or narrow spec.selector.",
        ),
    ),
    R.UNREADABLE_SHELL_SCRIPT: Reason(
        Kind.PROBLEM,
        "the server is started by a complex script",
        target=Advice(
            "The server is started by a shell script the operator cannot read safely",
            "Put the launcher and its flags in the container's command/args (exec form); a "
            "script must be one plain command line without variables, pipes or several commands.",
        ),
    ),
    R.SHELL_WRAPPED_SERVER: Reason(
        Kind.PROBLEM,
        "Inject cannot add its flag to a shell script",
        target=Advice(
            "rollout.mode Inject cannot add the table flag to a shell script",
            "Move the launcher and flags to command/args, or use rollout.mode AnnotateOnly and "
            "write --speculative-dspark-sps-table-path into your script (docs/gitops.md).",
        ),
    ),
    R.TABLE_NOT_MOUNTED: Reason(
        Kind.PROBLEM,
        "AnnotateOnly: the server does not read the table",
        target=Advice(
            "With AnnotateOnly, the Deployment does not read the table where the operator "
            "writes it",
            "Mount spec.rollout.tableConfigMap at the directory of spec.rollout.tablePath and "
            "pass --speculative-dspark-sps-table-path <tablePath> to the server "
            "(docs/gitops.md).",
        ),
    ),
    R.ONE_TABLE_CONFIGMAP_MANY_SERVERS: Reason(
        Kind.PROBLEM,
        "AnnotateOnly: one ConfigMap for servers that need different tables",
        target=Advice(
            "AnnotateOnly has one table ConfigMap but the Deployments need different tables",
            "Give each (GPU product, server) its own SpsProfile and tableConfigMap, or use "
            "rollout.mode Inject (a table per Deployment).",
        ),
    ),
    R.MIXED_GPU_PRODUCTS: Reason(
        Kind.PROBLEM,
        "a Deployment's pods run on several GPU products",
        advice=(
            "One table fits one GPU product. Pin each Deployment to one pool (nodeSelector "
            "nvidia.com/gpu.product: <product>), or split it into one Deployment per pool; the "
            "operator keeps a table per product."
        ),
    ),
    R.NO_SERVER_CONTAINER: Reason(
        Kind.PROBLEM,
        "spec.serverContainer names no container",
        target=Advice(
            "spec.serverContainer names no container of the Deployment",
            "Set spec.serverContainer to the SGLang container's name.",
        ),
    ),
    R.TABLE_NOT_ELIGIBLE: Reason(
        Kind.PROBLEM,
        "a table in status does not match its ConfigMap",
        target=Advice(
            "The table in status does not match what its ConfigMap holds",
            "The table ConfigMap was changed or removed by hand. `kubectl sps reprofile` to "
            "measure a new one; the operator will not roll a table it cannot verify.",
        ),
    ),
    R.TABLE_MODIFIED: Reason(
        Kind.PROBLEM,
        "a table ConfigMap's bytes do not hash to what the operator published",
        target=Advice(
            "A table ConfigMap does not hold the bytes the operator published",
            "Someone replaced or edited it under its name (a table is its content hash, "
            "recorded in status when it was published; its labels and owner prove nothing). The "
            "operator never rolls it: it drops the table from status.tables and measures it "
            "again, and the new run's publish replaces the ConfigMap. Find who recreated it "
            "(`kubectl get cm <name> -o yaml`: managedFields, creationTimestamp) and do not "
            "edit table ConfigMaps.",
        ),
    ),
    R.TABLE_MOUNT_SHADOWED: Reason(
        Kind.PROBLEM,
        "the server container mounts something over the table's path",
        target=Advice(
            "The server container mounts something at or under the table's path",
            "A volume mount of the Deployment's own (a subPath file at the table path, a "
            "directory over it) would hide the table the operator puts there while status said "
            "it runs. Remove the mount, or move it out of spec.rollout.tablePath's directory.",
        ),
    ),
    R.SERVER_RUNS_OTHER_TABLE: Reason(
        Kind.PROBLEM,
        "a serving server reports another table than the one rolled onto it",
        target=Advice(
            "A server's own /server_info reports another table than the one its pod carries",
            "Every ready pod carries the table's hash, but the server (its /server_info) "
            "reports another table path, no table, or (the simulator) other table bytes: "
            "something in the container or its start-up replaces the path or the file (a "
            "wrapper script, an init step, an image that writes there). The message names the "
            "pod and what its server said. Fix the server's start-up so it reads "
            "spec.rollout.tablePath as mounted; the target is Live again once its servers "
            "confirm it.",
        ),
    ),
    R.SERVER_RESOLVED_DRIFT: Reason(
        Kind.PROBLEM,
        "a serving server resolved a cost setting otherwise than the clone that measured its table",
        target=Advice(
            "A server resolved a cost setting otherwise than the profiling clone did",
            "Newer SGLang reports what it resolved (world_size, disaggregation_mode, and with "
            "SGLANG_EXPOSE_OWN_ENV_VARS=1 its own environment): the serving server's report "
            "differs from what the clone that measured its table reported, in what the pod "
            "spec cannot show (an auto-resolved value, a variable from an envFrom Secret, an "
            "SGL_ spelling). The message names the settings. Make them explicit in the "
            "server's args or env (so the fingerprint sees them), then `kubectl sps reprofile "
            "{name}`.",
        ),
    ),
    R.TARGET_TOO_LARGE: Reason(
        Kind.PROBLEM,
        "the Deployment or its server's command line exceeds what the operator reads",
        target=Advice(
            "The Deployment, or its server's command line, is larger than the operator reads",
            "The message says which limit (object size, or flags of the server's command line): "
            "the operator parses at most that much of a tenant's object per pass. Trim the "
            "Deployment (unused flags, huge annotations) below the limit.",
        ),
    ),
    R.GROUP_MISMATCH: Reason(
        Kind.PROBLEM,
        "a LeaderWorkerSet's templates are not one server",
        target=Advice(
            "The LeaderWorkerSet's leader and worker templates are not one server",
            "Every rank of a group loads the table itself, so the leader's and the workers' "
            "server containers must have the same cost inputs (only the per-rank arguments "
            "--node-rank and --dist-init-addr may differ), ask for the same GPUs, and --nnodes "
            "must be the group size (leaderWorkerTemplate.size). The message names what differs.",
        ),
    ),
    R.KIND_NOT_INSTALLED: Reason(
        Kind.PROBLEM,
        "spec.targetKinds names a kind the cluster does not serve",
        advice=(
            "spec.targetKinds names a kind of workload the API server does not serve (the "
            "LeaderWorkerSet CRD, leaderworkerset.x-k8s.io, is not installed): install it, or "
            "remove the kind from spec.targetKinds. The other kinds are served meanwhile."
        ),
    ),
    R.STABLE_TABLE_CONTESTED: Reason(
        Kind.PROBLEM,
        "AnnotateOnly: another writer keeps changing the stable ConfigMap",
        target=Advice(
            "AnnotateOnly: something else keeps writing the stable table ConfigMap",
            "The message names the other writer (its field manager) and how often the operator "
            "had to write the table back. Two writers of one ConfigMap fight forever: point "
            "spec.rollout.tableConfigMap at a ConfigMap only the operator writes (never a "
            "system one such as kube-root-ca.crt), or stop the other writer (a GitOps tool "
            "syncing it: exclude its data, docs/gitops.md).",
        ),
    ),
    R.HOLDER_REFERENCE_CONTESTED: Reason(
        Kind.PROBLEM,
        "something keeps removing a Deployment's holder reference from a table",
        target=Advice(
            "Something keeps removing the reference that makes a Deployment hold its table",
            "The operator makes each Deployment that mounts a table an owner of its ConfigMap, "
            "so the garbage collector keeps the table while the Deployment needs it, even when "
            "the profile goes. Something (a person, a GitOps tool syncing the ConfigMap, a "
            "controller) removes that reference again after each write; the operator writes it "
            "back with a backoff (1 min, doubling, at most hourly) instead of at every pass. "
            "Find the writer (`kubectl get cm <table> --show-managed-fields -o yaml`) and stop "
            "it touching ownerReferences of the operator's table ConfigMaps.",
        ),
    ),
    R.HIDDEN_COST_INPUT: Reason(
        Kind.PROBLEM,
        "a cost input of the server comes from what the operator cannot read",
        target=Advice(
            "A cost input of the server comes from something the operator cannot read",
            "The message names the reference (a Secret key, a per-pod field, a missing or too "
            "large ConfigMap) that feeds a flag or variable the table depends on: a change "
            "there would go unseen and leave a wrong table live. Write the value in args or "
            "env, or take it from a ConfigMap key, which the operator reads (it never reads "
            "Secrets).",
        ),
    ),
    R.AMBIGUOUS_FLAG: Reason(
        Kind.PROBLEM,
        "a server flag the operator cannot read unambiguously",
        target=Advice(
            "A flag of the server is an abbreviation of several flags",
            "SGLang's parser refuses it too (the server does not start). Write the flag in full.",
        ),
    ),
    R.CONFIG_FILE_FLAGS: Reason(
        Kind.PROBLEM,
        "the server reads flags from a config file",
        target=Advice(
            "The server reads flags from a --config file the operator cannot see",
            "A cost flag in the file would change without making the table stale. Write the "
            "flags in the container's args (`sps-operator fingerprint -f deployment.yaml` shows "
            "what the operator reads).",
        ),
    ),
    R.DIAGONAL_ONLY_SERVER: Reason(
        Kind.PROBLEM,
        "an Additive profile for a server whose loader reads only diagonal tables",
        target=Advice(
            "The server's table loader reads only diagonal tables; an Additive table would stop it",
            "Set spec.table.kind: Diagonal. The message says how the operator knows: "
            "--speculative-dspark-sps-table-path const (the fzyzcjy/sglang fork), or a "
            "profiling clone that refused an additive table at start-up "
            "(status.diagonalOnlyServers; a changed server is judged again). "
            "docs/compatibility.md lists the builds.",
        ),
        failure=Advice(
            "The profiling clone refused the additive seed table: its loader reads only diagonal",
            "Nothing was rolled out, and the operator now refuses Additive for this server (a "
            "production server would not have started with an additive table). Set "
            "spec.table.kind: Diagonal; the message has the server's last words.",
        ),
    ),
    R.LORA_NEEDS_STATIC_MODE: Reason(
        Kind.PROBLEM,
        "the server refuses DSpark with LoRA in this mode",
        target=Advice(
            "DSpark with LoRA runs only in static mode, which reads no table",
            "SGLang refuses LoRA with DSpark outside static mode (#34337), so the operator puts "
            "no table onto such a server and profiles none in compact mode. Run the server in "
            "static mode with table.kind Diagonal, or without LoRA (docs/compatibility.md).",
        ),
        failure=Advice(
            "The profiling clone refused LoRA in its mode",
            "DSpark with LoRA runs only in static mode; use table.kind Diagonal, or run without "
            "LoRA (docs/compatibility.md).",
        ),
    ),
    R.LORA_UNSUPPORTED: Reason(
        Kind.PROBLEM,
        "the server's release refuses DSpark with LoRA",
        target=Advice(
            "This SGLang release refuses LoRA with DSpark at start-up",
            "Releases up to v0.5.17 run LoRA only with NGRAM speculative decoding: the server "
            "cannot start. Use a later SGLang in static mode, or run without LoRA; if the image "
            "tag misleads, set spec.server.sglangVersion.",
        ),
    ),
    R.PD_DISAGGREGATED_SERVER: Reason(
        Kind.PROBLEM,
        "a PD-disaggregated server, which a profiling clone cannot be alone",
        target=Advice(
            "The server is one half of a PD-disaggregated pair (--disaggregation-mode)",
            "A decode server takes requests only with the KV cache its prefill peer sends it, "
            "so a profiling clone alone cannot run the profiler's batches; and it replays the "
            "full-width verify graph whatever the budget (no DP tier gathering), so a table "
            "measured on a clone without the mode would be another server's. A prefill server "
            "never decodes. No table the operator can measure fits it (a table measured without "
            "the mode prices budgets the server does not run), so none is measured or rolled. "
            "Narrow spec.selector to servers without --disaggregation-mode "
            "(docs/compatibility.md).",
        ),
    ),
    R.ENGRAM_COMPACT_TABLE: Reason(
        Kind.PROBLEM,
        "an Engram model whose CUDA-graph capture a compact-mode table breaks",
        target=Advice(
            "An Engram model (DeepSeek-V4.1-Flash) cannot capture its CUDA graphs with a table",
            "With SGLANG_RAGGED_VERIFY_MODE compact (or cap-accept) and a profiled table, "
            "capture dies on every rank ('engram target-verify expects one equal block per "
            "request', sglang #39173), so the operator puts no table onto it and profiles none "
            "in compact mode. Run it in static mode with table.kind Diagonal, or wait for a "
            "fixed SGLang and set spec.server.sglangVersion (docs/compatibility.md).",
        ),
        failure=Advice(
            "The profiling clone died capturing its CUDA graphs with a table (an Engram model)",
            "SGLang's Engram target-verify cannot capture compact verify graphs with a profiled "
            "table (sglang #39173); the run is not retried. Use table.kind Diagonal in static "
            "mode (docs/compatibility.md); the message has the server's last words.",
        ),
    ),
    R.ROLLOUT_BLOCKED: Reason(
        Kind.PROBLEM,
        "the new pods cannot start (unschedulable, image pull, crash loop)",
        advice=(
            "The message says what keeps the new pods from starting (the scheduler's, the "
            "kubelet's or the Deployment controller's words); once that is fixed the rollout "
            "goes on by itself."
        ),
    ),
    R.TARGET_PROBLEM: Reason(
        Kind.PROBLEM,
        "a target is refused (no reason recorded)",
        advice="`kubectl describe sps {name}` shows each Deployment's state and message.",
    ),
}
