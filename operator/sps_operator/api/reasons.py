"""Every condition type and reason an SpsProfile's status can carry, spelled once, and the
shape of the registry that says what each means (pure, no I/O).

The controller sets them and `kubectl sps explain` explains them by these constants; the
registry (api/reason_registry.py, its entries in api/reasons_status.py, reasons_targets.py
and reasons_runs.py) holds, side by side for each reason, what it means, its kind (which
sets the health Argo CD and kstatus read) and the advice `kubectl sps explain` gives.
tests/unit/test_api_reasons.py fails when a module retypes one, when a CamelCase string of
the controller or the plugin is neither here nor declared another vocabulary's, when one
here is set nowhere, when one lacks its meaning or advice, and when docs/operator.md does
not name it; the unit tests' fake API fails a test whose passes write a reason not listed
(tests/unit/conftest.py).
"""

from __future__ import annotations

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
ROLLOUT_QUEUED = "RolloutQueued"
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
SERVER_RUNS_OTHER_TABLE = "ServerRunsOtherTable"
SERVER_RESOLVED_DRIFT = "ServerResolvedDrift"
TARGET_TOO_LARGE = "TargetTooLarge"
GROUP_MISMATCH = "GroupMismatch"
KIND_NOT_INSTALLED = "KindNotInstalled"
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
# all (controller/profiling/run.never_written); `kubectl sps explain` then names the egress.
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
class Advice:
    """What `kubectl sps explain` says of a reason where it meets it: what is wrong, in one
    line, and the next step."""

    what: str
    next: str


@dataclass(frozen=True)
class Reason:
    """One entry of the registry: what the reason means (status, docs), its kind (which sets
    its health), and the advice `kubectl sps explain` gives: `advice`, the next step when a
    condition carries it, and where explain meets it in a status field, what it says there:
    of a refused target (`target`), a waiting run (`waiting`), a run that ended with it
    (`failure`). Every reason has at least one."""

    kind: Kind
    meaning: str
    advice: str = ""
    target: Advice | None = None
    waiting: Advice | None = None
    failure: Advice | None = None


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


class Health(StrEnum):
    """Argo CD's health statuses; kstatus: Progressing is InProgress, Degraded Failed, the
    others Current."""

    HEALTHY = "Healthy"
    PROGRESSING = "Progressing"
    SUSPENDED = "Suspended"
    DEGRADED = "Degraded"
