"""The SpsProfile status: what the operator writes back (conditions, runs, targets, tables).

Status models tolerate unknown fields (`StatusModel`), so an object written by a newer
operator still parses; text a Job or an exception produced is cut to fit, never refused.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, field_validator

from sps_operator.api import limits as L
from sps_operator.api.kinds import RunPhase, TableKind  # re-exported
from sps_operator.api.legacy_tables import without_v1_twins
from sps_operator.api.validation import (
    ConditionMessage,
    MessageText,
    ProgressText,
    ReportLine,
    StatusModel,
    Timestamp,
    optional_timestamp,
)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(StatusModel):
    """The shape of metav1.Condition."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    status: ConditionStatus
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: Timestamp
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    message: ConditionMessage = Field(default="")


class FitQuality(StatusModel):
    """How well a table predicts the step time. A Diagonal table with repeats 1 passes
    through its medians (RMS 0, R² 1): the leave-one-out and confidence-interval figures
    and errorBoundRel are the honest ones."""

    rms_ms: float | None = Field(default=None, description="RMS fit error, milliseconds.")
    r2: float | None = Field(default=None, description="Coefficient of determination.")
    max_rel_err: float | None = Field(
        default=None,
        description="Largest absolute relative error of the fit at a measured probe "
        "(non-negative; 0.03 = 3 %).",
    )
    loo_rel_rms: float | None = Field(
        default=None,
        description="Leave-one-out interpolation error, RMS: each probe predicted by the table "
        "fitted without it, relative to its measured step time.",
    )
    loo_rel_max: float | None = Field(
        default=None, description="Leave-one-out interpolation error, largest absolute value."
    )
    ci_rel_max: float | None = Field(
        default=None,
        description="Largest relative half-width of a round's confidence interval of the median "
        "step time (the measurement's own uncertainty).",
    )
    error_bound_rel: float | None = Field(
        default=None,
        description="Predicted bound of the table's relative error against the true step time "
        "anywhere on the grid (what gates.maxErrorBound checks).",
    )


class TableRef(StatusModel):
    """A published table (an immutable ConfigMap)."""

    gpu_product: str
    fingerprint: str = Field(description="Hash of what the cost depends on.")
    kind: TableKind
    config_map: str = Field(description="Immutable ConfigMap holding the table.")
    hash: str = Field(description="sha256 of the table JSON (first 16 hex digits).")
    quality: FitQuality | None = None
    profiled_at: str | None = optional_timestamp()
    run: str | None = Field(default=None, description="The run that measured it.")
    trigger: str | None = Field(
        default=None,
        max_length=63,
        description="Why it was measured (its run's trigger): a table a user asked for "
        "(RefreshToken, ReprofileRequested) rolls as soon as it is ready; a scheduled refresh "
        "(Schedule) waits for the minimum interval between rollouts.",
    )
    refresh_count: int | None = Field(
        default=None,
        ge=0,
        description=(
            "status.refreshCount when the run that measured it started: the table answers"
            " the refresh requests up to that one, not later ones."
        ),
    )
    previous: str | None = Field(
        default=None, description="The table it replaced (rollback target on a failed rollout)."
    )
    previous_hash: str | None = Field(
        default=None,
        max_length=64,
        description="The content hash of the table it replaced, as the operator published "
        "it: a rollback returns only to a ConfigMap whose bytes still hash to this (never to "
        "what the ConfigMap's own labels claim).",
    )
    adopted_from: str | None = Field(
        default=None,
        max_length=63,
        description="The fingerprint (version 1) its ConfigMap is labelled with, under which "
        "0.1.0 finds it after a rollback: the one it was stored under before an operator "
        "upgrade re-keyed it (the previous fingerprint function gave the same value for the "
        "server as it is now), or, for a table this version measured, its server's version-1 "
        "fingerprint when that stands for this server alone (docs/fingerprint.md, "
        "Upgrading).",
    )
    message: MessageText | None = Field(default=None, description="Why it was rejected, if it was.")
    gpu_seconds: float | None = Field(
        default=None,
        ge=0,
        description="GPU seconds its run took: the GPUs of its profiling Jobs times the "
        "seconds they ran (not their wait), summed over phases and preemptions.",
    )


class RunWaiting(StatusModel):
    """Why a run's Job does not run yet (status.currentRun.waiting)."""

    reason: str = Field(
        description="WaitingForGPUs (no node has free GPUs of the product), QueuedInKueue (the "
        "Job is suspended until Kueue admits it; the message ends with Kueue's words on the "
        "Job's Workload), LocalQueueMissing (the Kueue LocalQueue the Job names does not exist "
        "in the namespace), BorrowBlocked (BorrowReplica cannot borrow now), KueueManagedTarget "
        "(BorrowReplica never borrows from a target Kueue manages; the Job waits as under "
        "Wait)."
    )
    message: MessageText = Field(description="The scheduler's, Kueue's or the operator's words.")
    since: Timestamp = Field(
        description="When the wait began (the run fails after capacity.waitTimeoutSeconds)."
    )
    pool_turn: bool | None = Field(
        default=None,
        description="BorrowReplica: the run could borrow but waits for its turn on the GPU "
        "product (another profile borrows there, or comes first: higher priority of its "
        "pending pod, then the older pod).",
    )
    queue_position: int | None = Field(
        default=None,
        ge=1,
        description="QueuedInKueue: the Job's Workload's position in its ClusterQueue (1: "
        "admitted next), from Kueue's visibility API (pendingworkloads); absent when Kueue "
        "does not report it.",
    )


class BorrowRecord(StatusModel):
    """A replica taken out of the target Deployment for a run (capacity.mode BorrowReplica)."""

    deployment: str = Field(description="The Deployment lending the replica.")
    replicas: int = Field(ge=0, description="Its replicas before the borrow (restored after).")
    at: Timestamp = Field(description="When it was borrowed (serving capacity is reduced since).")
    used: bool = Field(
        default=False,
        description="The run's Job ran on the lent GPUs (a Job suspended or unscheduled again "
        "after that gives the replica back at once).",
    )
    run: str | None = Field(
        default=None, description="status.rolloutBorrow: the run the replica was lent to."
    )
    table: str | None = Field(
        default=None,
        description="status.rolloutBorrow: the hash of the table whose rollout the lent slot "
        "is kept for.",
    )
    held_since: str | None = optional_timestamp(
        description="status.rolloutBorrow: when the run ended and the slot was kept for the "
        "rollout.",
    )
    gpu_product: str | None = Field(
        default=None, description="status.rolloutBorrow: the GPU product of the pool."
    )
    limit_seconds: int | None = Field(
        default=None,
        ge=0,
        description="currentRun.borrow: how long the run may run, counted from "
        "currentRun.runningSince (not its wait), and so how long the replica stays lent at "
        "most: past it the run ends and the replica goes back (DeadlineExceeded).",
    )
    limit: str | None = Field(
        default=None,
        max_length=128,
        description="What sets limitSeconds: spec.job.activeDeadlineSeconds, or Kueue's "
        "kueue.x-k8s.io/max-exec-time-seconds label on the Job when shorter.",
    )


class RunStatus(StatusModel):
    """The profiling run in progress (at most one per SpsProfile)."""

    name: str = Field(description="Run name; also the name of its result ConfigMap.")
    job: str = Field(description="The Job of the current phase.")
    job_uid: str | None = Field(
        default=None,
        max_length=64,
        description="The UID of that Job, as the operator read it: its pods are the pods "
        "whose controller is this UID (a GPU pool's order is read from them only).",
    )
    phase: RunPhase
    gpu_product: str
    fingerprint: str
    target: str = Field(description="The Deployment whose server is cloned.")
    trigger: str = Field(description="Why it runs: NoTable, Schedule, Token, Reprofile, ...")
    started_at: Timestamp
    diagonal_table: str | None = Field(
        default=None, description="Additive: ConfigMap of the phase-1 diagonal table."
    )
    progress: ProgressText | None = Field(
        default=None, description="The profiler's progress (cells done/total), from the Job."
    )
    trigger_key: str | None = Field(default=None, description="Identifies the trigger.")
    attempt: int = Field(default=1, ge=1, description="Attempt number for this trigger.")
    refresh_count: int | None = Field(
        default=None, ge=0, description="status.refreshCount when the run started."
    )
    waiting: RunWaiting | None = Field(
        default=None, description="Why the Job does not run yet, and since when."
    )
    borrow: BorrowRecord | None = Field(
        default=None, description="The replica taken out of the target for this run."
    )
    changes: list[ReportLine] | None = Field(
        default=None,
        max_length=L.MAX_REPORT_LINES,
        description="ServerChanged: what differs between the server of the table the target "
        "ran and the server now (the words of `sps-operator fingerprint`).",
    )
    running_since: str | None = optional_timestamp(
        description="When the Job's pod started running: the run's own deadline "
        "(spec.job.activeDeadlineSeconds) counts from here, not from its wait for GPUs.",
    )
    result_wait_since: str | None = optional_timestamp(
        description="When the Job was seen complete while its result ConfigMap did not hold "
        "the final result yet (the run waits a bounded time for that write).",
    )
    borrow_undone: MessageText | None = Field(
        default=None,
        description="Someone else (a GitOps self-heal, a person) scaled a lent replica back "
        "during this run: what was seen. The run borrows no more.",
    )
    gpus: int | None = Field(
        default=None, ge=0, description="GPUs the current Job's pod holds (while it runs)."
    )
    gpu_seconds: float | None = Field(
        default=None,
        ge=0,
        description="GPU seconds the run took so far: GPUs times the seconds its Jobs ran, "
        "counted when a Job stops running (phase done, preempted, run over).",
    )


class TargetState(StrEnum):
    LIVE = "Live"
    ROLLING = "Rolling"
    PUBLISHED = "Published"
    STALE = "Stale"
    NO_TABLE = "NoTable"
    WAITING = "Waiting"
    REFUSED = "Refused"


class TargetStatus(StatusModel):
    deployment: str = Field(
        description="The workload's name (a Deployment, StatefulSet or LeaderWorkerSet: kind)."
    )
    kind: str | None = Field(
        default=None,
        max_length=32,
        description="The workload's kind: Deployment, StatefulSet or LeaderWorkerSet (absent: "
        "Deployment, as written before kinds were listed).",
    )
    gpu_product: str | None = None
    fingerprint: str | None = None
    table: str | None = Field(
        default=None,
        description="Table ConfigMap it runs: measured for it (state Live, Rolling, "
        "Published) or, with state Stale, for a previous server or GPU product; with reason "
        "RolloutQueued, the one it runs while nextTable waits for its turn (none: it runs "
        "none of this profile's).",
    )
    hash: str | None = None
    rolled_out: bool = Field(
        default=False,
        description="True only when the template makes the server read this table and the "
        "rollout completed.",
    )
    state: TargetState | None = Field(
        default=None,
        description="Live: its table runs. Rolling: being rolled. Published: a table exists, "
        "rollout Disabled. Stale: a table measured for another server or GPU stays until a "
        "new one exists. NoTable, Waiting (pods not settled on one GPU product), Refused "
        "(reason says why the operator leaves it alone).",
    )
    reason: str | None = Field(
        default=None,
        description="Why it is refused, or (state Rolling) what blocks its rollout (CamelCase).",
    )
    owner: str | None = Field(default=None, description="The SpsProfile that serves it.")
    observed_gpu: str | None = Field(
        default=None,
        max_length=L.MAX_MESSAGE_LENGTH,
        description="The GPU product its pods were last seen on (<mixed> for several).",
    )
    observed_since: str | None = optional_timestamp(
        description="Since when observedGpu is what it is: while pods move, an observation "
        "counts once it has held for the operator's GPU debounce period.",
    )
    message: MessageText | None = None
    sglang_version: ReportLine | None = Field(
        default=None,
        description="Which SGLang the server runs, and from what evidence (image tag, "
        "spec.server.sglangVersion), or unknown: decides the version-bound fingerprint inputs.",
    )
    table_source: str | None = Field(
        default=None,
        max_length=32,
        description="What the server runs while it has no table of this profile's: const (the "
        "fzyzcjy fork's flat table) or capture-derived (SGLang PR #35413). Empty: the flat "
        "start (or its own table path).",
    )
    servers: ReportLine | None = Field(
        default=None,
        description="What its serving pods' servers confirm of the table (their /server_info: "
        "the table's path, the simulator's hash of its bytes, the settings newer SGLang "
        "resolved), or why one could not confirm (not an error: Live is then judged from "
        "the pods alone). Set while Live, or refused for what a server reported; empty "
        "when the operator does not ask servers (--confirm-servers).",
    )
    unfingerprinted: list[ReportLine] | None = Field(
        default=None,
        max_length=L.MAX_REPORT_LINES,
        description="Inputs that look like cost inputs but are not in the fingerprint (a "
        "change there reprofiles nothing), and what could set one unseen.",
    )
    rolled_at: str | None = optional_timestamp(
        description="When the operator last rolled a new table onto it (the minimum interval "
        "between rollouts counts from here).",
    )
    held_until: str | None = optional_timestamp(
        description="A newer table for it waits for the minimum interval between rollouts "
        "until then (nextTable).",
    )
    next_table: str | None = Field(
        default=None, description="The newer table that waits (see heldUntil, queuedSince)."
    )
    blocked_since: str | None = optional_timestamp(
        description="Since when its rollout has been blocked (reason RolloutBlocked).",
    )
    queued_since: str | None = optional_timestamp(
        description="Since when it waits for its turn to roll nextTable (reason RolloutQueued: "
        "rollout.maxConcurrent of the profile's targets are mid-rollout); the longest waiting "
        "rolls first.",
    )


class FailureRecord(StatusModel):
    run: str
    reason: str
    message: MessageText
    at: Timestamp
    gpu_product: str | None = None
    fingerprint: str | None = None
    attempts: int = 1
    trigger_key: str | None = Field(
        default=None, description="The trigger this failure belongs to (retries share it)."
    )
    retryable: bool = Field(
        default=True,
        description="False for gate failures: only a new trigger, or a change of the spec "
        "that decides a run (gates, table, job, server, capacity), runs again.",
    )
    spec_hash: str | None = Field(
        default=None,
        description="Hash of the spec parts that decide a run when it failed: a different "
        "one (a gate relaxed, say) allows a new attempt.",
    )


class CostRecord(StatusModel):
    """What this profile's tables cost on one GPU product, since the profile exists."""

    gpu_product: str = Field(max_length=253)
    gpu_seconds: float = Field(
        default=0.0, ge=0, description="GPU seconds of its profiling Jobs (GPUs x running time)."
    )
    lent_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Seconds replicas were lent to its runs (capacity.mode BorrowReplica), "
        "counted when each was given back.",
    )


class SpsProfileStatus(StatusModel):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    gpu_product: str | None = Field(
        default=None, description="GPU product of the targets (comma-joined when several)."
    )
    live_table: str | None = Field(default=None, description="Live table ConfigMap (summary).")
    tables: list[TableRef] = Field(
        default_factory=list,
        description="Live table per (GPU product, fingerprint); reused without profiling.",
    )

    @field_validator("tables", mode="before")
    @classmethod
    def _drop_v1_twins(cls, value: object) -> object:
        """The entries written for 0.1.0 beside this operator's (api/legacy_tables.py)."""
        return without_v1_twins(value) if isinstance(value, list) else value

    rejected_table: TableRef | None = Field(
        default=None, description="Last table that failed a gate (kept for inspection)."
    )
    current_run: RunStatus | None = None
    last_failure: FailureRecord | None = None
    last_schedule_time: str | None = optional_timestamp()
    next_schedule_time: str | None = optional_timestamp()
    schedule_held_back: MessageText | None = Field(
        default=None,
        description="Set while refresh.schedule fires more often than the minimum interval "
        "between scheduled runs: which fire times are skipped, and when the next run is.",
    )
    refresh_requested_at: str | None = optional_timestamp(
        description="When the latest refresh was requested (token, annotation, schedule).",
    )
    refresh_count: int = Field(
        default=0,
        ge=0,
        description=(
            "Refresh requests so far. A table whose run started before the latest one"
            " (tables[].refreshCount lower) is measured again; a counter, not a time, so a"
            " request in the second a table was published, or during its run, is not lost."
        ),
    )
    refresh_reason: str | None = Field(default=None, description="Why a refresh was requested.")
    observed_token: str | None = Field(default=None, description="refresh.token last acted on.")
    observed_reprofile: str | None = Field(
        default=None, description="sps.dev/reprofile annotation value last acted on."
    )
    targets: list[TargetStatus] = Field(default_factory=list)
    diagonal_only_servers: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list,
        max_length=L.MAX_REPORT_LINES,
        description="Server fingerprints whose profiling clone refused an additive table at "
        "start-up (a loader that reads only the diagonal format): Additive is refused for them.",
    )
    cost: list[CostRecord] = Field(
        default_factory=list,
        max_length=32,
        description="Per GPU product: GPU seconds of profiling Jobs and seconds of lent "
        "replicas so far (the counters sps_gpu_seconds_total and "
        "sps_replica_lent_seconds_total count what each status write adds).",
    )
    rollout_borrow: BorrowRecord | None = Field(
        default=None,
        description="A replica still lent after its run ended: on a full pool the freed slot "
        "is the surge slot the new table's rollout needs; given back when that rollout "
        "completes (or fails, or takes longer than the Deployment's progress deadline or "
        "the admin's bound, chart borrowPolicy.maxRolloutHoldSeconds).",
    )
