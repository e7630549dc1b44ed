"""Every condition type and reason an SpsProfile's status can carry, with what it means,
and how health tools read them (pure, no I/O).

The controller modules still spell their reasons as constants of their own; this is the
one list of them (tests/unit/test_api_reasons.py fails when a CamelCase string of the
controller is neither here nor declared a Kubernetes word, and when a reason here is used
nowhere). What GitOps tools see follows from it: `health` is the rule the Argo CD health
check in docs/gitops.md implements in Lua (tests/ship/test_ship_argocd_health.py runs the
Lua against every reason), and the kstatus conditions `Reconciling` and `Stalled` that Flux
reads are set from it (controller/report.py).
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


@dataclass(frozen=True)
class Reason:
    kind: Kind
    meaning: str


REASONS: dict[str, Reason] = {
    # Ready / TableReady / RolledOut when all is well.
    "TableLive": Reason(Kind.LIVE, "every target runs a table measured for it"),
    "RolledOut": Reason(Kind.LIVE, "every target's Deployment serves its table"),
    "AsExpected": Reason(Kind.INFO, "Degraded=False: nothing needs attention"),
    "Idle": Reason(Kind.INFO, "Profiling=False: no run in progress"),
    "Current": Reason(Kind.INFO, "Stale=False: every table in use matches its server"),
    "RolloutDisabled": Reason(
        Kind.INFO, "spec.rollout.mode is Disabled: tables are published only"
    ),
    "RolloutHeld": Reason(
        Kind.INFO, "RolledOut=False: a newer table waits for the minimum rollout interval"
    ),
    # Work in progress.
    "Profiling": Reason(Kind.PROGRESSING, "a run is measuring the table"),
    "NoTable": Reason(
        Kind.PROGRESSING, "a target has no table for its server yet (a run starts or runs)"
    ),
    "Waiting": Reason(
        Kind.PROGRESSING, "a target's GPU product is not settled yet (pods moving or pending)"
    ),
    "RolloutPending": Reason(Kind.PROGRESSING, "a Deployment is rolling onto its new table"),
    # A run's Job that cannot run yet; the run fails with the same reason after
    # spec.capacity.waitTimeoutSeconds.
    "WaitingForGPUs": Reason(Kind.WAITING, "no node has free GPUs of the product"),
    "QueuedInKueue": Reason(Kind.WAITING, "the Job is suspended until Kueue admits it"),
    "BorrowBlocked": Reason(Kind.WAITING, "no GPU is free and a replica may not be borrowed"),
    "KueueManagedTarget": Reason(
        Kind.WAITING, "no GPU is free and BorrowReplica never borrows from a target Kueue manages"
    ),
    "LocalQueueMissing": Reason(Kind.WAITING, "the Kueue LocalQueue the Job names does not exist"),
    # Nothing to do by design.
    "Suspended": Reason(Kind.SUSPENDED, "spec.suspend is true"),
    "NoTargets": Reason(Kind.SUSPENDED, "the selector matches no Deployment in the namespace"),
    # Triggers (Profiling=True, Stale=True).
    "GpuChanged": Reason(Kind.TRIGGER, "a target moved to a GPU product without a table"),
    "ServerChanged": Reason(Kind.TRIGGER, "a target's server changed (image, model, flags)"),
    "RefreshToken": Reason(Kind.TRIGGER, "spec.refresh.token changed"),
    "ReprofileRequested": Reason(Kind.TRIGGER, "the sps.dev/reprofile annotation changed"),
    "Schedule": Reason(Kind.TRIGGER, "spec.refresh.schedule fired"),
    "RefreshRequested": Reason(Kind.TRIGGER, "a refresh was requested (its kind unrecorded)"),
    # Targets the operator leaves alone (status.targets[].reason).
    "Conflict": Reason(Kind.PROBLEM, "another SpsProfile serves the Deployment or ConfigMap"),
    "NotAnSglangServer": Reason(Kind.PROBLEM, "the container does not start an SGLang server"),
    "NotADsparkServer": Reason(Kind.PROBLEM, "the server does not run DSpark decoding"),
    "UnreadableShellScript": Reason(Kind.PROBLEM, "the server is started by a complex script"),
    "ShellWrappedServer": Reason(Kind.PROBLEM, "Inject cannot add its flag to a shell script"),
    "TableNotMounted": Reason(Kind.PROBLEM, "AnnotateOnly: the server does not read the table"),
    "OneTableConfigMapManyServers": Reason(
        Kind.PROBLEM, "AnnotateOnly: one ConfigMap for servers that need different tables"
    ),
    "MixedGpuProducts": Reason(Kind.PROBLEM, "a Deployment's pods run on several GPU products"),
    "NoServerContainer": Reason(Kind.PROBLEM, "spec.serverContainer names no container"),
    "TableNotEligible": Reason(Kind.PROBLEM, "a table in status does not match its ConfigMap"),
    "HiddenCostInput": Reason(
        Kind.PROBLEM, "a cost input of the server comes from what the operator cannot read"
    ),
    "AmbiguousFlag": Reason(Kind.PROBLEM, "a server flag the operator cannot read unambiguously"),
    "ConfigFileFlags": Reason(Kind.PROBLEM, "the server reads flags from a config file"),
    "DiagonalOnlyServer": Reason(
        Kind.PROBLEM, "an Additive profile for a server whose loader reads only diagonal tables"
    ),
    "LoraNeedsStaticMode": Reason(Kind.PROBLEM, "the server refuses DSpark with LoRA in this mode"),
    "LoraUnsupported": Reason(Kind.PROBLEM, "the server's release refuses DSpark with LoRA"),
    "RolloutBlocked": Reason(
        Kind.PROBLEM, "the new pods cannot start (unschedulable, image pull, crash loop)"
    ),
    "TargetProblem": Reason(Kind.PROBLEM, "a target is refused (no reason recorded)"),
    # Refusals before a run creates anything (the admin policy).
    "JobPolicy": Reason(Kind.FAILURE, "spec.job or spec.server asks what the policy forbids"),
    "GpuPinConflict": Reason(Kind.FAILURE, "the Job would not run on the table's GPU product"),
    "JobLabelsSelectPods": Reason(Kind.FAILURE, "spec.job.labels would select server pods"),
    "ReadWriteOncePodClaim": Reason(
        Kind.FAILURE, "the target mounts a ReadWriteOncePod claim a clone can never share"
    ),
    "ClaimNodeUnavailable": Reason(
        Kind.FAILURE, "no ready target pod holds its ReadWriteOnce claims on a node of the product"
    ),
    # Failed runs (status.lastFailure.reason).
    "ProfilingFailed": Reason(Kind.FAILURE, "the profiling Job or the profiler failed"),
    "JobCreateFailed": Reason(Kind.FAILURE, "the API server refused the profiling Job"),
    "NameTaken": Reason(Kind.FAILURE, "an object of the run's name belongs to someone else"),
    "JobMissing": Reason(Kind.FAILURE, "the Job disappeared before it finished"),
    "ResultMissing": Reason(Kind.FAILURE, "the Job completed without a result"),
    "ResultRefused": Reason(Kind.FAILURE, "the Job's result was malformed or implausible"),
    "ServerRefusedToStart": Reason(
        Kind.FAILURE, "the profiling clone of the server refused to start"
    ),
    "KueueNotInstalled": Reason(
        Kind.FAILURE, "the Job names a Kueue queue but Kueue is not installed"
    ),
    "KueueDeactivated": Reason(
        Kind.FAILURE, "Kueue deactivated the Job's Workload (e.g. its maximum execution time)"
    ),
    "DeadlineExceeded": Reason(
        Kind.FAILURE,
        "the Job ran past spec.job.activeDeadlineSeconds or Kueue's max-exec-time-seconds",
    ),
    "TargetGone": Reason(Kind.FAILURE, "the Deployment went away between the phases"),
    "TargetChanged": Reason(Kind.FAILURE, "the Deployment changed between the phases"),
    "SweepMismatch": Reason(Kind.FAILURE, "the result measured cells not asked for"),
    "IncompleteSweep": Reason(Kind.FAILURE, "the result lacks cells the sweep asked for"),
    "DoubtfulMeasurement": Reason(Kind.FAILURE, "more tokens measured as faster"),
    "FitFailed": Reason(Kind.FAILURE, "the rounds could not be fitted into a table"),
    "SelfCheckFailed": Reason(Kind.FAILURE, "the fitted table fails its self-check"),
    "FitQualityGateFailed": Reason(Kind.FAILURE, "the table fails spec.gates' fit quality"),
    "ErrorBoundGateFailed": Reason(Kind.FAILURE, "the table's error bound exceeds spec.gates"),
    "ChangeGateFailed": Reason(Kind.FAILURE, "the table changes more than spec.gates allow"),
    "RolloutFailed": Reason(Kind.FAILURE, "the new table's rollout failed; rolled back"),
    "ReconcileError": Reason(Kind.FAILURE, "a step of the operator's pass failed"),
    "StatusWriteFailed": Reason(Kind.FAILURE, "the API server refused the full status"),
    "InvalidSpec": Reason(Kind.FAILURE, "the spec does not validate"),
}

# Reasons of the Events the operator posts on an SpsProfile (besides failure reasons).
EVENT_REASONS: dict[str, str] = {
    "ProfilingStarted": "a run's Job was created",
    "OffDiagonalPhaseStarted": "an Additive run's phase 2 Job was created",
    "TableRejected": "a table failed a gate or a refused result (not retried)",
    "TablePublished": "a new table ConfigMap was published",
    "TableUnchanged": "a run measured the table already published",
    "RolloutApplied": "a Deployment was applied with its table",
    "PlaceholderTable": "an AnnotateOnly ConfigMap got SGLang's no-table placeholder",
    "ReplicaBorrowed": "a replica was lent to a run (BorrowReplica)",
    "ReplicaReturned": "a borrowed replica was given back",
    "ReplicaHeldForRollout": "a borrowed replica is kept until its Deployment's rollout ends",
    "BorrowUndone": "someone scaled a lent replica back before the run gave it back",
    "ClockSkew": "a recorded time was ahead of this replica's clock; counted from now",
}

# What the health rule below reads.
WAITING = frozenset(r for r, d in REASONS.items() if d.kind == Kind.WAITING)
PROGRESSING = frozenset(r for r, d in REASONS.items() if d.kind == Kind.PROGRESSING)
SUSPENDED = frozenset(r for r, d in REASONS.items() if d.kind == Kind.SUSPENDED)


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
    if reason in SUSPENDED:
        return Health.SUSPENDED
    profiling = conditions.get(PROFILING)
    if profiling is not None and (profiling[0] == "True" or profiling[1] in WAITING):
        return Health.PROGRESSING  # a run exists: it runs, or its Job waits for capacity
    if reason in PROGRESSING:
        return Health.PROGRESSING
    return Health.DEGRADED
