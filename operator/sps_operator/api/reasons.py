"""Every condition type and reason an SpsProfile's status can carry, with what it means,
and how health tools read them (pure, no I/O).

The one place they are spelled: the controller sets them and `kubectl sps explain`
(plugin/explain*.py) explains them by these constants. tests/unit/test_api_reasons.py fails
when a module retypes one, when a CamelCase string of the controller or the plugin is
neither here nor declared another vocabulary's, when one here is set nowhere, and when
docs/operator.md does not name it; the unit tests' fake API fails a test whose passes write
a reason not listed here (tests/unit/conftest.py). What GitOps tools see follows from it:
`health` is the rule the Argo CD health check in docs/gitops.md implements in Lua
(tests/ship/test_ship_argocd_health.py runs the Lua against every reason and checks the
docs' table), and the kstatus conditions `Reconciling` and `Stalled` that Flux reads are set
from it (controller/steps/report.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

# --------------------------------------------------------------------------- conditions

READY = "Ready"
PROFILING = "Profiling"
TABLE_READY = "TableReady"
ROLLED_OUT = "RolledOut"
STALE = "Stale"
DEGRADED = "Degraded"
RECONCILING = "Reconciling"
STALLED = "Stalled"

CONDITION_TYPES: dict[str, str] = {
    READY: "every selected Deployment runs a table measured for it (the summary)",
    PROFILING: "a profiling run is in progress (False: idle, or its Job cannot run yet)",
    TABLE_READY: "every target has a table for its exact GPU product and server",
    ROLLED_OUT: "every target's Deployment serves its table",
    STALE: "a target runs a table measured for a previous server, or a refresh is pending",
    DEGRADED: "something needs attention (the live tables keep serving)",
    RECONCILING: "kstatus: the operator is working towards Ready (a run, a wait, a rollout)",
    STALLED: "kstatus: no progress without a fix (a failure, a refusal, an invalid spec)",
}


class Kind(StrEnum):
    """What a reason says about the profile, whichever condition carries it."""

    LIVE = "live"  # tables are live: nothing to do
    PROGRESSING = "progressing"  # the operator is working on it; no one needs to act
    WAITING = "waiting"  # a run's Job cannot run yet (capacity); a failure once it gives up
    SUSPENDED = "suspended"  # nothing to do by design (spec.suspend, no target)
    TRIGGER = "trigger"  # why a run started, or why a table is stale
    PROBLEM = "problem"  # a target the operator leaves alone until someone fixes it
    FAILURE = "failure"  # a run failed or was refused, or the operator's pass did
    INFO = "info"  # the False side of a condition: nothing wrong


# --------------------------------------------------------------------------- reasons
# (PROFILING and ROLLED_OUT, above, are reasons too: of the conditions of the same name.)

# Ready / TableReady / RolledOut when all is well.
TABLE_LIVE = "TableLive"
AS_EXPECTED = "AsExpected"
IDLE = "Idle"
CURRENT = "Current"
ROLLOUT_DISABLED = "RolloutDisabled"
ROLLOUT_HELD = "RolloutHeld"
# Work in progress.
NO_TABLE = "NoTable"
WAITING = "Waiting"
ROLLOUT_PENDING = "RolloutPending"
# A run's Job that cannot run yet; the run fails with the same reason after
# spec.capacity.waitTimeoutSeconds.
WAITING_FOR_GPUS = "WaitingForGPUs"
QUEUED_IN_KUEUE = "QueuedInKueue"
BORROW_BLOCKED = "BorrowBlocked"
KUEUE_MANAGED_TARGET = "KueueManagedTarget"
LOCAL_QUEUE_MISSING = "LocalQueueMissing"
# Nothing to do by design.
SUSPENDED = "Suspended"
NO_TARGETS = "NoTargets"
# Triggers (Profiling=True, Stale=True).
GPU_CHANGED = "GpuChanged"
SERVER_CHANGED = "ServerChanged"
REFRESH_TOKEN = "RefreshToken"
REPROFILE_REQUESTED = "ReprofileRequested"
SCHEDULE = "Schedule"
REFRESH_REQUESTED = "RefreshRequested"
# Targets the operator leaves alone (status.targets[].reason).
CONFLICT = "Conflict"
NOT_AN_SGLANG_SERVER = "NotAnSglangServer"
NOT_A_DSPARK_SERVER = "NotADsparkServer"
UNREADABLE_SHELL_SCRIPT = "UnreadableShellScript"
SHELL_WRAPPED_SERVER = "ShellWrappedServer"
TABLE_NOT_MOUNTED = "TableNotMounted"
ONE_TABLE_CONFIGMAP_MANY_SERVERS = "OneTableConfigMapManyServers"
MIXED_GPU_PRODUCTS = "MixedGpuProducts"
NO_SERVER_CONTAINER = "NoServerContainer"
TABLE_NOT_ELIGIBLE = "TableNotEligible"
TABLE_MODIFIED = "TableModified"
TABLE_MOUNT_SHADOWED = "TableMountShadowed"
TARGET_TOO_LARGE = "TargetTooLarge"
STABLE_TABLE_CONTESTED = "StableTableContested"
HOLDER_REFERENCE_CONTESTED = "HolderReferenceContested"
HIDDEN_COST_INPUT = "HiddenCostInput"
AMBIGUOUS_FLAG = "AmbiguousFlag"
CONFIG_FILE_FLAGS = "ConfigFileFlags"
DIAGONAL_ONLY_SERVER = "DiagonalOnlyServer"
LORA_NEEDS_STATIC_MODE = "LoraNeedsStaticMode"
LORA_UNSUPPORTED = "LoraUnsupported"
PD_DISAGGREGATED_SERVER = "PdDisaggregatedServer"
ENGRAM_COMPACT_TABLE = "EngramCompactTable"
ROLLOUT_BLOCKED = "RolloutBlocked"
TARGET_PROBLEM = "TargetProblem"
# Refusals before a run creates anything (the admin policy).
JOB_POLICY = "JobPolicy"
GPU_PIN_CONFLICT = "GpuPinConflict"
JOB_LABELS_SELECT_PODS = "JobLabelsSelectPods"
READ_WRITE_ONCE_POD_CLAIM = "ReadWriteOncePodClaim"
CLAIM_NODE_UNAVAILABLE = "ClaimNodeUnavailable"
# Failed runs (status.lastFailure.reason).
PROFILING_FAILED = "ProfilingFailed"
JOB_CREATE_FAILED = "JobCreateFailed"
NAME_TAKEN = "NameTaken"
JOB_MISSING = "JobMissing"
RESULT_MISSING = "ResultMissing"
# In a ProfilingFailed or ResultMissing message when the result ConfigMap holds nothing at
# all (controller/steps/run.never_written); `kubectl sps explain` then names the egress.
NEVER_WROTE_RESULT = "never wrote to its result ConfigMap"
RESULT_REFUSED = "ResultRefused"
SERVER_REFUSED_TO_START = "ServerRefusedToStart"
KUEUE_NOT_INSTALLED = "KueueNotInstalled"
KUEUE_DEACTIVATED = "KueueDeactivated"
DEADLINE_EXCEEDED = "DeadlineExceeded"
TARGET_GONE = "TargetGone"
TARGET_CHANGED = "TargetChanged"
SWEEP_MISMATCH = "SweepMismatch"
INCOMPLETE_SWEEP = "IncompleteSweep"
DOUBTFUL_MEASUREMENT = "DoubtfulMeasurement"
FIT_FAILED = "FitFailed"
SELF_CHECK_FAILED = "SelfCheckFailed"
FIT_QUALITY_GATE_FAILED = "FitQualityGateFailed"
ERROR_BOUND_GATE_FAILED = "ErrorBoundGateFailed"
CHANGE_GATE_FAILED = "ChangeGateFailed"
ROLLOUT_FAILED = "RolloutFailed"
RECONCILE_ERROR = "ReconcileError"
STATUS_WRITE_FAILED = "StatusWriteFailed"
INVALID_SPEC = "InvalidSpec"
# Events (besides failure reasons).
PROFILING_STARTED = "ProfilingStarted"
OFF_DIAGONAL_PHASE_STARTED = "OffDiagonalPhaseStarted"
TABLE_REJECTED = "TableRejected"
TABLE_PUBLISHED = "TablePublished"
TABLE_UNCHANGED = "TableUnchanged"
ROLLOUT_APPLIED = "RolloutApplied"
PLACEHOLDER_TABLE = "PlaceholderTable"
REPLICA_BORROWED = "ReplicaBorrowed"
REPLICA_RETURNED = "ReplicaReturned"
REPLICA_HELD_FOR_ROLLOUT = "ReplicaHeldForRollout"
BORROW_UNDONE = "BorrowUndone"
CLOCK_SKEW = "ClockSkew"


@dataclass(frozen=True)
class Reason:
    kind: Kind
    meaning: str


REASONS: dict[str, Reason] = {
    # Ready / TableReady / RolledOut when all is well.
    TABLE_LIVE: Reason(Kind.LIVE, "every target runs a table measured for it"),
    ROLLED_OUT: Reason(Kind.LIVE, "every target's Deployment serves its table"),
    AS_EXPECTED: Reason(Kind.INFO, "Degraded=False: nothing needs attention"),
    IDLE: Reason(Kind.INFO, "Profiling=False: no run in progress"),
    CURRENT: Reason(Kind.INFO, "Stale=False: every table in use matches its server"),
    ROLLOUT_DISABLED: Reason(Kind.INFO, "spec.rollout.mode is Disabled: tables are published only"),
    ROLLOUT_HELD: Reason(
        Kind.INFO, "RolledOut=False: a newer table waits for the minimum rollout interval"
    ),
    # Work in progress.
    PROFILING: Reason(Kind.PROGRESSING, "a run is measuring the table"),
    NO_TABLE: Reason(
        Kind.PROGRESSING, "a target has no table for its server yet (a run starts or runs)"
    ),
    WAITING: Reason(
        Kind.PROGRESSING, "a target's GPU product is not settled yet (pods moving or pending)"
    ),
    ROLLOUT_PENDING: Reason(Kind.PROGRESSING, "a Deployment is rolling onto its new table"),
    # A run's Job that cannot run yet; the run fails with the same reason after
    # spec.capacity.waitTimeoutSeconds.
    WAITING_FOR_GPUS: Reason(Kind.WAITING, "no node has free GPUs of the product"),
    QUEUED_IN_KUEUE: Reason(Kind.WAITING, "the Job is suspended until Kueue admits it"),
    BORROW_BLOCKED: Reason(Kind.WAITING, "no GPU is free and a replica may not be borrowed"),
    KUEUE_MANAGED_TARGET: Reason(
        Kind.WAITING, "no GPU is free and BorrowReplica never borrows from a target Kueue manages"
    ),
    LOCAL_QUEUE_MISSING: Reason(Kind.WAITING, "the Kueue LocalQueue the Job names does not exist"),
    # Nothing to do by design.
    SUSPENDED: Reason(Kind.SUSPENDED, "spec.suspend is true"),
    NO_TARGETS: Reason(Kind.SUSPENDED, "the selector matches no Deployment in the namespace"),
    # Triggers (Profiling=True, Stale=True).
    GPU_CHANGED: Reason(Kind.TRIGGER, "a target moved to a GPU product without a table"),
    SERVER_CHANGED: Reason(Kind.TRIGGER, "a target's server changed (image, model, flags)"),
    REFRESH_TOKEN: Reason(Kind.TRIGGER, "spec.refresh.token changed"),
    REPROFILE_REQUESTED: Reason(Kind.TRIGGER, "the sps.dev/reprofile annotation changed"),
    SCHEDULE: Reason(Kind.TRIGGER, "spec.refresh.schedule fired"),
    REFRESH_REQUESTED: Reason(Kind.TRIGGER, "a refresh was requested (its kind unrecorded)"),
    # Targets the operator leaves alone (status.targets[].reason).
    CONFLICT: Reason(Kind.PROBLEM, "another SpsProfile serves the Deployment or ConfigMap"),
    NOT_AN_SGLANG_SERVER: Reason(Kind.PROBLEM, "the container does not start an SGLang server"),
    NOT_A_DSPARK_SERVER: Reason(Kind.PROBLEM, "the server does not run DSpark decoding"),
    UNREADABLE_SHELL_SCRIPT: Reason(Kind.PROBLEM, "the server is started by a complex script"),
    SHELL_WRAPPED_SERVER: Reason(Kind.PROBLEM, "Inject cannot add its flag to a shell script"),
    TABLE_NOT_MOUNTED: Reason(Kind.PROBLEM, "AnnotateOnly: the server does not read the table"),
    ONE_TABLE_CONFIGMAP_MANY_SERVERS: Reason(
        Kind.PROBLEM, "AnnotateOnly: one ConfigMap for servers that need different tables"
    ),
    MIXED_GPU_PRODUCTS: Reason(Kind.PROBLEM, "a Deployment's pods run on several GPU products"),
    NO_SERVER_CONTAINER: Reason(Kind.PROBLEM, "spec.serverContainer names no container"),
    TABLE_NOT_ELIGIBLE: Reason(Kind.PROBLEM, "a table in status does not match its ConfigMap"),
    TABLE_MODIFIED: Reason(
        Kind.PROBLEM, "a table ConfigMap's bytes do not hash to what the operator published"
    ),
    TABLE_MOUNT_SHADOWED: Reason(
        Kind.PROBLEM, "the server container mounts something over the table's path"
    ),
    TARGET_TOO_LARGE: Reason(
        Kind.PROBLEM, "the Deployment or its server's command line exceeds what the operator reads"
    ),
    STABLE_TABLE_CONTESTED: Reason(
        Kind.PROBLEM, "AnnotateOnly: another writer keeps changing the stable ConfigMap"
    ),
    HOLDER_REFERENCE_CONTESTED: Reason(
        Kind.PROBLEM, "something keeps removing a Deployment's holder reference from a table"
    ),
    HIDDEN_COST_INPUT: Reason(
        Kind.PROBLEM, "a cost input of the server comes from what the operator cannot read"
    ),
    AMBIGUOUS_FLAG: Reason(Kind.PROBLEM, "a server flag the operator cannot read unambiguously"),
    CONFIG_FILE_FLAGS: Reason(Kind.PROBLEM, "the server reads flags from a config file"),
    DIAGONAL_ONLY_SERVER: Reason(
        Kind.PROBLEM, "an Additive profile for a server whose loader reads only diagonal tables"
    ),
    LORA_NEEDS_STATIC_MODE: Reason(
        Kind.PROBLEM, "the server refuses DSpark with LoRA in this mode"
    ),
    LORA_UNSUPPORTED: Reason(Kind.PROBLEM, "the server's release refuses DSpark with LoRA"),
    PD_DISAGGREGATED_SERVER: Reason(
        Kind.PROBLEM, "a PD-disaggregated server, which a profiling clone cannot be alone"
    ),
    ENGRAM_COMPACT_TABLE: Reason(
        Kind.PROBLEM, "an Engram model whose CUDA-graph capture a compact-mode table breaks"
    ),
    ROLLOUT_BLOCKED: Reason(
        Kind.PROBLEM, "the new pods cannot start (unschedulable, image pull, crash loop)"
    ),
    TARGET_PROBLEM: Reason(Kind.PROBLEM, "a target is refused (no reason recorded)"),
    # Refusals before a run creates anything (the admin policy).
    JOB_POLICY: Reason(Kind.FAILURE, "spec.job or spec.server asks what the policy forbids"),
    GPU_PIN_CONFLICT: Reason(Kind.FAILURE, "the Job would not run on the table's GPU product"),
    JOB_LABELS_SELECT_PODS: Reason(Kind.FAILURE, "spec.job.labels would select server pods"),
    READ_WRITE_ONCE_POD_CLAIM: Reason(
        Kind.FAILURE, "the target mounts a ReadWriteOncePod claim a clone can never share"
    ),
    CLAIM_NODE_UNAVAILABLE: Reason(
        Kind.FAILURE, "no ready target pod holds its ReadWriteOnce claims on a node of the product"
    ),
    # Failed runs (status.lastFailure.reason).
    PROFILING_FAILED: Reason(Kind.FAILURE, "the profiling Job or the profiler failed"),
    JOB_CREATE_FAILED: Reason(Kind.FAILURE, "the API server refused the profiling Job"),
    NAME_TAKEN: Reason(Kind.FAILURE, "an object of the run's name belongs to someone else"),
    JOB_MISSING: Reason(Kind.FAILURE, "the Job disappeared before it finished"),
    RESULT_MISSING: Reason(Kind.FAILURE, "the Job completed without a result"),
    RESULT_REFUSED: Reason(Kind.FAILURE, "the Job's result was malformed or implausible"),
    SERVER_REFUSED_TO_START: Reason(
        Kind.FAILURE, "the profiling clone of the server refused to start"
    ),
    KUEUE_NOT_INSTALLED: Reason(
        Kind.FAILURE, "the Job names a Kueue queue but Kueue is not installed"
    ),
    KUEUE_DEACTIVATED: Reason(
        Kind.FAILURE, "Kueue deactivated the Job's Workload (e.g. its maximum execution time)"
    ),
    DEADLINE_EXCEEDED: Reason(
        Kind.FAILURE,
        "the Job ran past spec.job.activeDeadlineSeconds or Kueue's max-exec-time-seconds",
    ),
    TARGET_GONE: Reason(Kind.FAILURE, "the Deployment went away between the phases"),
    TARGET_CHANGED: Reason(Kind.FAILURE, "the Deployment changed between the phases"),
    SWEEP_MISMATCH: Reason(Kind.FAILURE, "the result measured cells not asked for"),
    INCOMPLETE_SWEEP: Reason(Kind.FAILURE, "the result lacks cells the sweep asked for"),
    DOUBTFUL_MEASUREMENT: Reason(Kind.FAILURE, "more tokens measured as faster"),
    FIT_FAILED: Reason(Kind.FAILURE, "the rounds could not be fitted into a table"),
    SELF_CHECK_FAILED: Reason(Kind.FAILURE, "the fitted table fails its self-check"),
    FIT_QUALITY_GATE_FAILED: Reason(Kind.FAILURE, "the table fails spec.gates' fit quality"),
    ERROR_BOUND_GATE_FAILED: Reason(Kind.FAILURE, "the table's error bound exceeds spec.gates"),
    CHANGE_GATE_FAILED: Reason(Kind.FAILURE, "the table changes more than spec.gates allow"),
    ROLLOUT_FAILED: Reason(Kind.FAILURE, "the new table's rollout failed; rolled back"),
    RECONCILE_ERROR: Reason(Kind.FAILURE, "a step of the operator's pass failed"),
    STATUS_WRITE_FAILED: Reason(Kind.FAILURE, "the API server refused the full status"),
    INVALID_SPEC: Reason(Kind.FAILURE, "the spec does not validate"),
}

# Reasons of the Events the operator posts on an SpsProfile (besides failure reasons).
EVENT_REASONS: dict[str, str] = {
    PROFILING_STARTED: "a run's Job was created",
    OFF_DIAGONAL_PHASE_STARTED: "an Additive run's phase 2 Job was created",
    TABLE_REJECTED: "a table failed a gate or a refused result (not retried)",
    TABLE_PUBLISHED: "a new table ConfigMap was published",
    TABLE_UNCHANGED: "a run measured the table already published",
    ROLLOUT_APPLIED: "a Deployment was applied with its table",
    PLACEHOLDER_TABLE: "an AnnotateOnly ConfigMap got SGLang's no-table placeholder",
    REPLICA_BORROWED: "a replica was lent to a run (BorrowReplica)",
    REPLICA_RETURNED: "a borrowed replica was given back",
    REPLICA_HELD_FOR_ROLLOUT: "a borrowed replica is kept until its Deployment's rollout ends",
    BORROW_UNDONE: "someone scaled a lent replica back before the run gave it back",
    CLOCK_SKEW: "a recorded time was ahead of this replica's clock; counted from now",
}

# What the health rule below reads.
WAITING_REASONS = frozenset(r for r, d in REASONS.items() if d.kind == Kind.WAITING)
PROGRESSING_REASONS = frozenset(r for r, d in REASONS.items() if d.kind == Kind.PROGRESSING)
SUSPENDED_REASONS = frozenset(r for r, d in REASONS.items() if d.kind == Kind.SUSPENDED)


class Health(StrEnum):
    """Argo CD's health statuses; kstatus: Progressing is InProgress, Degraded Failed, the
    others Current."""

    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    SUSPENDED = "Suspended"
    DEGRADED = "Degraded"


def health(conditions: Mapping[str, tuple[str, str]]) -> Health:
    """The profile's health from its conditions ({type: (status, reason)}), once the status
    reflects the latest spec. Waiting is progress, not failure: a run in progress or whose
    Job waits for capacity, a rollout, a target whose GPU settles. Suspended: nothing to do
    by design. Degraded: only what needs someone to act (a failed or refused run, a refused
    target, an invalid spec)."""
    ready = conditions.get(READY)
    if ready is None:
        return Health.PROGRESSING
    status, reason = ready
    if status == "True":
        return Health.HEALTHY
    if reason in SUSPENDED_REASONS:
        return Health.SUSPENDED
    profiling = conditions.get(PROFILING)
    if profiling is not None and (profiling[0] == "True" or profiling[1] in WAITING_REASONS):
        return Health.PROGRESSING  # a run exists: it runs, or its Job waits for capacity
    if reason in PROGRESSING_REASONS:
        return Health.PROGRESSING
    return Health.DEGRADED
