"""The SpsProfile spec: what the user asks for (sweep, table, server, capacity, rollout,
refresh, gates). The Job overrides live in `api/job.py`; the rules and messages in
`api/validation.py`.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from sps_operator.api import cron
from sps_operator.api import limits as L
from sps_operator.api.job import JobOverrides
from sps_operator.api.kinds import TableKind, WorkloadKind  # re-exported
from sps_operator.api.label_selector import LabelSelector
from sps_operator.api.validation import (
    DNS_LABEL_PATTERN,
    MAX_LABEL_KEY,
    MAX_TABLE_PATH,
    MSG_ANNOTATE_ONLY_CM,
    MSG_BATCH_EXCLUSIVE,
    MSG_CLONE_URL,
    MSG_EXTERNAL_URL,
    MSG_FRACS,
    MSG_FRACS_DIAGONAL,
    MSG_GPU_PRODUCT_LABEL,
    MSG_MAX_BATCH_ONE_PROBE,
    MSG_ONE_PROBE,
    MSG_SERVER_CONTAINER,
    MSG_SWEEP_CELLS,
    MSG_SYSTEM_CONFIG_MAP,
    MSG_TABLE_PATH,
    MSG_TABLE_PATH_DOTS,
    MSG_TABLE_PATH_SYSTEM,
    SGLANG_VERSION_PATTERN,
    SYSTEM_CONFIG_MAP_PATTERN,
    TABLE_PATH_DOT_SEGMENT_PATTERN,
    TABLE_PATH_IN_SYSTEM_DIR_PATTERN,
    TABLE_PATH_PATTERN,
    ApiModel,
    cel_label_key,
    cel_optional_match,
    cel_rule,
    cel_string,
    check,
    check_optional_match,
    full_match,
    label_key_ok,
)
from sps_operator.constants import GPU_PRODUCT_LABEL

DEFAULT_TABLE_PATH = "/etc/sps/table/table.json"
DEFAULT_ADDITIVE_FRACS = [0.25, 0.5, 0.75, 1.0]

BatchSize = Annotated[int, Field(ge=L.BATCH_SIZE_MIN, le=L.BATCH_SIZE_MAX)]


class SweepSpec(ApiModel):
    """What the profiler measures. Defaults follow SGLang's reference profiler, except
    the stopping rule: a round ends when the median step time is known well enough. The
    bounds are the profiler's own (`sps_operator.api.limits`): what the API admits, the
    profiler runs."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule("!(has(self.batchSizes) && has(self.maxBatchSize))", MSG_BATCH_EXCLUSIVE),
                cel_rule(
                    "!has(self.fracs) || self.fracs.all(f, "
                    f"f > {L.FRAC_MIN_EXCLUSIVE} && f <= {L.FRAC_MAX})",
                    MSG_FRACS,
                ),
                cel_rule(
                    "!has(self.batchSizes) || self.batchSizes.exists(b, b != self.batchSizes[0])",
                    MSG_ONE_PROBE,
                ),
                cel_rule(
                    f"!has(self.maxBatchSize) || self.maxBatchSize >= {L.MAX_BATCH_SIZE_MIN}",
                    MSG_MAX_BATCH_ONE_PROBE,
                ),
            ]
        }
    )
    batch_sizes: list[BatchSize] | None = Field(
        default=None,
        min_length=1,
        max_length=L.BATCH_SIZES_MAX_COUNT,
        description="Explicit batch sizes per DP rank (`--batch-size`), at least "
        f"{L.MIN_PROBES} distinct. Exclusive with maxBatchSize.",
    )
    max_batch_size: int | None = Field(
        default=None,
        ge=L.BATCH_SIZE_MIN,
        le=L.MAX_BATCH_SIZE_MAX,
        description="Tapered sweep up to this batch size per DP rank (`--max-batch-size`), "
        f"at least {L.MAX_BATCH_SIZE_MIN}. When neither is set, the profiler sweeps up to "
        f"{L.DEFAULT_MAX_BATCH_SIZE}.",
    )
    # Item bounds live in the CEL rule (MSG_FRACS), so both sides say the same thing.
    fracs: list[float] | None = Field(
        default=None,
        min_length=1,
        max_length=L.FRACS_MAX_COUNT,
        description="Additive only: forced verify-budget fractions in (0, 1] (`--fracs`). "
        f"Default {DEFAULT_ADDITIVE_FRACS}.",
    )
    input_len: int | None = Field(
        default=None,
        ge=L.INPUT_LEN_MIN,
        le=L.INPUT_LEN_MAX,
        description="Prompt length in tokens (`--input-len`). Default: sized so each round's "
        "steady steps are centred on contextLen.",
    )
    context_len: int = Field(
        default=L.DEFAULT_CONTEXT_LEN,
        ge=L.CONTEXT_LEN_MIN,
        le=L.CONTEXT_LEN_MAX,
        description="KV context per request the table describes (`--context-len`): a step's "
        "time grows with the requests' context, and every round is measured out to this one.",
    )
    repeats: int = Field(
        default=1, ge=L.REPEATS_MIN, le=L.REPEATS_MAX, description="Repeats of the whole sweep."
    )
    ci_rel_width: float = Field(
        default=0.02,
        ge=L.CI_REL_WIDTH_MIN,
        le=L.CI_REL_WIDTH_MAX,
        description="Stopping rule: a round ends when the confidence interval of the median "
        "step time is narrower than this fraction of the median.",
    )
    min_steady_steps: int | None = Field(
        default=None,
        ge=L.MIN_STEADY_STEPS_MIN,
        le=L.MIN_STEADY_STEPS_MAX,
        description="Floor on steady steps per round.",
    )
    min_steady_seconds: float | None = Field(
        default=None,
        ge=L.MIN_STEADY_SECONDS_MIN,
        le=L.MIN_STEADY_SECONDS_MAX,
        description="Floor on steady seconds per round.",
    )
    vocab_size: int | None = Field(
        default=None,
        ge=L.VOCAB_SIZE_MIN,
        le=L.VOCAB_SIZE_MAX,
        description="Vocabulary size for random prompts (`--vocab-size`). Needed only when the "
        "profiler cannot read the tokenizer (Clone mounts the server's volumes into the "
        "profiler at the same paths, so a local tokenizer_path usually resolves).",
    )
    round_timeout_seconds: float = Field(
        default=300.0,
        ge=L.ROUND_TIMEOUT_SECONDS_MIN,
        le=L.ROUND_TIMEOUT_SECONDS_MAX,
        description="Give up on a round after this long.",
    )

    @model_validator(mode="after")
    def _checks(self) -> SweepSpec:
        if self.batch_sizes is not None and self.max_batch_size is not None:
            raise ValueError(MSG_BATCH_EXCLUSIVE)
        if self.fracs is not None and not all(
            L.FRAC_MIN_EXCLUSIVE < f <= L.FRAC_MAX for f in self.fracs
        ):
            raise ValueError(MSG_FRACS)
        if self.batch_sizes is not None:
            check(len(set(self.batch_sizes)) >= L.MIN_PROBES, MSG_ONE_PROBE)
        if self.max_batch_size is not None:
            check(self.max_batch_size >= L.MAX_BATCH_SIZE_MIN, MSG_MAX_BATCH_ONE_PROBE)
        return self

    def counts(self, kind: TableKind | str) -> tuple[int, int, int]:
        """(batch sizes, fracs, repeats) the profiler will sweep, as the CEL rule counts them."""
        batches = (
            len(self.batch_sizes)
            if self.batch_sizes is not None
            else L.tapered_sweep_size(self.max_batch_size or L.DEFAULT_MAX_BATCH_SIZE)
        )
        if self.fracs is not None:
            fracs = len(self.fracs)
        else:
            fracs = L.DEFAULT_ADDITIVE_FRAC_COUNT if kind == TableKind.ADDITIVE else 1
        return batches, fracs, self.repeats


def _cel_sweep_counts() -> tuple[str, str, str]:
    """CEL for SweepSpec.counts() at the TableSpec level: (batch sizes, fracs, repeats)."""
    m = f"(has(self.sweep.maxBatchSize) ? self.sweep.maxBatchSize : {L.DEFAULT_MAX_BATCH_SIZE})"
    below = "[" + ", ".join(str(v) for v in L.TAPERED_SWEEP_BELOW_256) + "]"
    step = L.TAPERED_SWEEP_STEP_FROM_256
    tapered = (
        f"({m} >= 256 ? {len(L.TAPERED_SWEEP_BELOW_256)} + ({m} - 256) / {step} + 1 + "
        f"(({m} - 256) % {step} == 0 ? 0 : 1) : "
        f"{below}.filter(v, v <= {m}).size() + ({below}.exists(v, v == {m}) ? 0 : 1))"
    )
    batches = f"(has(self.sweep.batchSizes) ? size(self.sweep.batchSizes) : {tapered})"
    fracs = (
        "(has(self.sweep.fracs) ? size(self.sweep.fracs) : "
        f"(self.kind == 'Additive' ? {L.DEFAULT_ADDITIVE_FRAC_COUNT} : 1))"
    )
    return batches, fracs, "self.sweep.repeats"


def _cel_sweep_cells_rule() -> Any:
    # A static message: CEL's cost estimate of string(int) in a messageExpression is unbounded.
    b, f, r = _cel_sweep_counts()
    return cel_rule(f"!has(self.sweep) || {b} * {f} * {r} <= {L.MAX_SWEEP_CELLS}", MSG_SWEEP_CELLS)


class TableSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.kind == 'Additive' || !has(self.sweep) || !has(self.sweep.fracs)",
                    MSG_FRACS_DIAGONAL,
                ),
                _cel_sweep_cells_rule(),
            ]
        }
    )
    kind: TableKind = Field(
        default=TableKind.DIAGONAL,
        description="Diagonal (SpsCostTable, one static-mode sweep) or Additive "
        "(SpsAdditiveCostTable: a diagonal phase, then an off-diagonal phase in compact mode).",
    )
    sweep: SweepSpec = Field(default_factory=SweepSpec, description="What to measure.")

    @model_validator(mode="after")
    def _fracs_only_additive(self) -> TableSpec:
        if self.kind == TableKind.DIAGONAL and self.sweep.fracs is not None:
            raise ValueError(MSG_FRACS_DIAGONAL)
        counts = self.sweep.counts(self.kind)
        check(L.sweep_cells(*counts) <= L.MAX_SWEEP_CELLS, MSG_SWEEP_CELLS)
        return self


class ServerSource(StrEnum):
    CLONE = "Clone"
    EXTERNAL = "External"


class ServerSpec(ApiModel):
    """Where the profiling server comes from."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.source != 'External' || (has(self.url) && size(self.url) > 0)",
                    MSG_EXTERNAL_URL,
                ),
                cel_rule("self.source == 'External' || !has(self.url)", MSG_CLONE_URL),
            ]
        }
    )
    source: ServerSource = Field(
        default=ServerSource.CLONE,
        description="Clone: the Job runs a copy of the target's server container as a native "
        "sidecar in profiling mode, on the same GPU product. External: profile the server at url.",
    )
    url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://",
        description="External only: base URL of a DSpark server already in profiling mode. "
        "The operator's policy decides which hosts (default: a Service of this namespace, "
        "http://<service>.<namespace>.svc.cluster.local:<port>); never a link-local, "
        "metadata or loopback address.",
    )
    sglang_version: str | None = Field(
        default=None,
        max_length=64,
        pattern=SGLANG_VERSION_PATTERN,
        description="The SGLang release the target servers run (e.g. 0.5.17), or unknown. "
        "Decides which version-bound inputs count in the fingerprint (docs/fingerprint.md). "
        "Default: the image tag when it is a release tag of an image named sglang, else "
        "unknown (every input counts). Set unknown for a fork tagged like a release.",
    )

    @model_validator(mode="after")
    def _url(self) -> ServerSpec:
        if self.source == ServerSource.EXTERNAL and not self.url:
            raise ValueError(MSG_EXTERNAL_URL)
        if self.source == ServerSource.CLONE and self.url:
            raise ValueError(MSG_CLONE_URL)
        return self


class CapacityMode(StrEnum):
    WAIT = "Wait"
    BORROW_REPLICA = "BorrowReplica"


class CapacitySpec(ApiModel):
    """How a Clone profiling Job gets GPUs of the target's product when none is free."""

    mode: CapacityMode = Field(
        default=CapacityMode.WAIT,
        description="Wait: the Job waits for a free GPU (at most waitTimeoutSeconds), and "
        "status says why. BorrowReplica: when the Job cannot be scheduled for "
        "borrowAfterSeconds, the operator takes one replica out of the target Deployment for "
        "the run and gives it back when the run ends, whatever the outcome (after the new "
        "table's rollout when that rollout needs the slot as its surge slot); never below "
        "minAvailable ready replicas, against a PodDisruptionBudget, "
        "while the Deployment rolls out, when a HorizontalPodAutoscaler or another "
        "server-side-apply manager owns its replicas, or twice at once on one GPU product.",
    )
    wait_timeout_seconds: int = Field(
        default=3600,
        ge=60,
        le=7 * 24 * 3600,
        description="A run whose Job has waited this long for GPUs fails (WaitingForGPUs).",
    )
    borrow_after_seconds: int = Field(
        default=60,
        ge=0,
        le=24 * 3600,
        description="BorrowReplica: how long the Job may wait before a replica is borrowed.",
    )
    min_available: int | None = Field(
        default=None,
        ge=0,
        le=100000,
        description="BorrowReplica: ready replicas that must remain while one is borrowed "
        "(default: replicas - 1, never below 1).",
    )
    allow_downtime: bool = Field(
        default=False,
        description="BorrowReplica: a single-replica Deployment may be scaled to zero for the "
        "run (the server is down meanwhile; the event says how long).",
    )


class RolloutMode(StrEnum):
    INJECT = "Inject"
    ANNOTATE_ONLY = "AnnotateOnly"
    DISABLED = "Disabled"


_TABLE_DIR_CEL = (
    "(self.tablePath.lastIndexOf('/') == 0 ? '/' : "
    "self.tablePath.substring(0, self.tablePath.lastIndexOf('/')))"
)


def table_path_system_message(directory: str) -> str:
    return (
        f"rollout.tablePath: the table's ConfigMap volume would be mounted on {directory} and "
        "hide the image's files there; use a dedicated directory such as /etc/sps/table"
    )


MAX_CONCURRENT_COUNT = 100_000
# A share from 1% to 100%, in at most 3 ASCII digits (leading zeros allowed, as "007%"):
# the one test of both the pydantic check and the CRD's CEL rule; no longer text matches.
MAX_CONCURRENT_SHARE_PATTERN = r"^(0{0,2}[1-9]|0?[1-9][0-9]|100)%$"
MAX_CONCURRENT_SHARE_LENGTH = len("100%")
MSG_MAX_CONCURRENT = (
    "rollout.maxConcurrent: a count of at least 1 (at most 100000) or a percentage of the "
    "profile's targets from 1% to 100%, such as 25%"
)


def max_concurrent_count(asked: int | str, targets: int) -> int | None:
    """`rollout.maxConcurrent` as a count for `targets` targets: an int as is, a percentage
    "N%" of them rounded up (as a Deployment's maxSurge); None when it is neither."""
    if isinstance(asked, bool):
        return None
    if isinstance(asked, int):
        return asked if 1 <= asked <= MAX_CONCURRENT_COUNT else None
    text = str(asked)
    if not full_match(MAX_CONCURRENT_SHARE_PATTERN, text):
        return None
    return math.ceil(int(text[:-1]) * max(targets, 0) / 100)


def _cel_max_concurrent_rule() -> Any:
    """`max_concurrent_count(...) is not None` in CEL. The field is int-or-string: the
    string test first, so that a number (an integral JSON number the API server keeps as a
    double included) is compared as one, as pydantic reads it."""
    return cel_rule(
        "!has(self.maxConcurrent) || (type(self.maxConcurrent) == string ? "
        f"self.maxConcurrent.matches({cel_string(MAX_CONCURRENT_SHARE_PATTERN)}) : "
        f"self.maxConcurrent >= 1 && self.maxConcurrent <= {MAX_CONCURRENT_COUNT})",
        MSG_MAX_CONCURRENT,
    )


class RolloutSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "self.mode != 'AnnotateOnly' || "
                    "(has(self.tableConfigMap) && size(self.tableConfigMap) > 0)",
                    MSG_ANNOTATE_ONLY_CM,
                ),
                cel_rule(
                    "!has(self.tableConfigMap) || "
                    f"!self.tableConfigMap.matches({cel_string(SYSTEM_CONFIG_MAP_PATTERN)})",
                    MSG_SYSTEM_CONFIG_MAP,
                ),
                cel_rule(
                    f"self.tablePath.matches({cel_string(TABLE_PATH_PATTERN)})", MSG_TABLE_PATH
                ),
                cel_rule(
                    f"!self.tablePath.matches({cel_string(TABLE_PATH_DOT_SEGMENT_PATTERN)})",
                    MSG_TABLE_PATH_DOTS,
                ),
                cel_rule(
                    f"!self.tablePath.matches({cel_string(TABLE_PATH_PATTERN)}) || "
                    f"!self.tablePath.matches({cel_string(TABLE_PATH_IN_SYSTEM_DIR_PATTERN)})",
                    MSG_TABLE_PATH_SYSTEM,
                    "'rollout.tablePath: the table\\'s ConfigMap volume would be mounted on ' + "
                    f"{_TABLE_DIR_CEL} + ' and hide the image\\'s files there; use a dedicated "
                    "directory such as /etc/sps/table'",
                ),
                _cel_max_concurrent_rule(),
            ]
        }
    )
    mode: RolloutMode = Field(
        default=RolloutMode.INJECT,
        description="Inject: add the table volume, mount and --speculative-dspark-sps-table-path "
        "(server-side apply, field manager sps-operator). AnnotateOnly (GitOps): Git mounts "
        "tableConfigMap at tablePath; the operator updates that ConfigMap and a pod-template "
        "annotation only. Disabled: publish tables, touch no Deployment.",
    )
    table_config_map: str | None = Field(
        default=None,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="AnnotateOnly: the stable ConfigMap the Deployment mounts; the operator "
        "writes the live table into it.",
    )
    table_path: str = Field(
        default=DEFAULT_TABLE_PATH,
        max_length=MAX_TABLE_PATH,
        description="Where the server reads the table; the file name is the ConfigMap key. Its "
        "directory is where the table's ConfigMap is mounted, so it must be a dedicated one "
        "(not /, /etc, /usr, /tmp, ...).",
    )

    max_concurrent: int | str = Field(
        default="25%",
        # The schema's bound on the text (an int-or-string: the API server applies it to a
        # string only); the pattern above holds no longer text.
        json_schema_extra={"maxLength": MAX_CONCURRENT_SHARE_LENGTH},
        description="How many of the profile's targets may be mid-rollout at once (from the "
        "operator's patch of a Deployment's template until its rollout completed and every "
        "ready pod runs the table, or the rollout failed): a count, or a percentage of the "
        "targets rounded up, at least 1. The others wait in line (reason RolloutQueued), the "
        "longest waiting first, then by name. Capped by the operator's ceiling (chart value "
        "rollout.maxConcurrent, default 10). A rollback is never held.",
    )

    @field_validator("max_concurrent", mode="before")
    @classmethod
    def _no_int_in_disguise(cls, value: Any) -> Any:
        # The API server refuses a JSON 3.0 (no int-or-string to the CEL rule) that pydantic
        # would read as 3, and a true it would read as 1 (2.5 fails pydantic's own check).
        integral = isinstance(value, float) and value.is_integer()
        check(not isinstance(value, bool) and not integral, MSG_MAX_CONCURRENT)
        return value

    @model_validator(mode="after")
    def _checks(self) -> RolloutSpec:
        check(max_concurrent_count(self.max_concurrent, 1) is not None, MSG_MAX_CONCURRENT)
        if self.mode == RolloutMode.ANNOTATE_ONLY and not self.table_config_map:
            raise ValueError(MSG_ANNOTATE_ONLY_CM)
        if self.table_config_map and full_match(SYSTEM_CONFIG_MAP_PATTERN, self.table_config_map):
            raise ValueError(MSG_SYSTEM_CONFIG_MAP)
        path = self.table_path
        check(full_match(TABLE_PATH_PATTERN, path), MSG_TABLE_PATH)
        check(not full_match(TABLE_PATH_DOT_SEGMENT_PATTERN, path), MSG_TABLE_PATH_DOTS)
        if full_match(TABLE_PATH_IN_SYSTEM_DIR_PATTERN, path):
            raise ValueError(table_path_system_message(path.rsplit("/", 1)[0] or "/"))
        return self


_CRON_RULES: Any = cron.cel_rules()


class RefreshSpec(ApiModel):
    """When to re-profile. `schedule` is checked field by field at admission (see
    `sps_operator.api.cron`): minute 0-59, hour 0-23, day-of-month 1-31, month 1-12 or
    jan-dec, weekday 0-7 or sun-sat; `*`, lists, ranges a-b with a <= b, steps /n; or a
    macro (@hourly, @daily, @weekly, @monthly, @yearly)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _CRON_RULES})
    schedule: str | None = Field(
        default=None,
        max_length=128,
        description="Cron schedule (UTC) for routine re-profiling, e.g. '0 3 * * 0'.",
    )
    token: str | None = Field(
        default=None,
        max_length=253,
        description="Change this value (e.g. in Git) to force a new profile.",
    )
    on_gpu_change: bool = Field(
        default=True,
        description="Profile when the target runs on a GPU product with no table yet.",
    )
    on_server_change: bool = Field(
        default=True,
        description="Re-profile when anything the cost depends on changes (image, model, tp/dp, "
        "draft width, capture config, max running requests, verify mode). Otherwise the "
        "table is only marked Stale.",
    )
    min_interval_seconds: int | None = Field(
        default=None,
        ge=0,
        le=L.MAX_REFRESH_INTERVAL_SECONDS,
        description="Minimum time between two scheduled runs, and between two rollouts of a "
        "scheduled refresh's table onto one Deployment that already runs a table measured for "
        "it (each rollout restarts every server). It may only lengthen the operator's own "
        "minimum (chart value refresh.minIntervalSeconds, default 1 h); a first table, a table "
        "for a changed server, a table a user asked for (a new token, `kubectl sps "
        "reprofile`) and a rollback are never held back.",
    )

    @model_validator(mode="after")
    def _cron(self) -> RefreshSpec:
        if self.schedule is not None:
            error = cron.schedule_error(self.schedule)
            if error is not None:
                raise ValueError(error)
        return self


class GatesSpec(ApiModel):
    """Acceptance gates: a table that fails one is kept for inspection, never rolled out."""

    max_error_bound: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="Largest accepted predicted relative error of the table against the true "
        "step time anywhere on the grid (0.05 = 5 %): the table's honest quality figure "
        "(status.tables[].quality.errorBoundRel, from leave-one-out interpolation error at the "
        "probes and each round's confidence interval). A table above it is kept for "
        "inspection, never rolled.",
    )
    max_rms_ms: float | None = Field(
        default=None,
        gt=0.0,
        description="Largest RMS fit error (milliseconds) accepted. A Diagonal table with "
        "repeats 1 passes through its medians (RMS 0), so this only bites with repeats >= 2 or "
        "Additive; use maxErrorBound for an honest figure.",
    )
    min_r2: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="Smallest fit R² accepted. A Diagonal table with repeats 1 passes through "
        "its medians (R² 1), so this only bites with repeats >= 2 or Additive; use "
        "maxErrorBound for an honest figure.",
    )
    max_change: float | None = Field(
        default=None,
        gt=0.0,
        description="Largest relative change of any probe against the live table for the same "
        "GPU product (0.5 = 50 %). Needs a live table of the same kind.",
    )


class SpsProfileSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_optional_match("serverContainer", DNS_LABEL_PATTERN, MSG_SERVER_CONTAINER),
                cel_rule(cel_label_key("self.gpuProductLabel"), MSG_GPU_PRODUCT_LABEL),
            ]
        }
    )
    selector: LabelSelector = Field(
        description="Workloads (in this namespace: Deployments, StatefulSets, "
        "LeaderWorkerSets) whose SGLang server gets the table."
    )
    target_kinds: list[WorkloadKind] | None = Field(
        default=None,
        max_length=3,
        description="The kinds of workload the selector selects (default: every kind the "
        "cluster serves). A kind listed here that the cluster does not serve (the "
        "LeaderWorkerSet CRD not installed) makes the profile Degraded with reason "
        "KindNotInstalled.",
    )
    server_container: str | None = Field(
        default=None,
        max_length=63,
        description="Name of the SGLang server container (default: the first container).",
    )
    table: TableSpec = Field(default_factory=TableSpec, description="Table kind and sweep.")
    server: ServerSpec = Field(default_factory=ServerSpec, description="Profiling server.")
    job: JobOverrides = Field(default_factory=JobOverrides, description="Profiling Job overrides.")
    capacity: CapacitySpec = Field(
        default_factory=CapacitySpec, description="How the profiling Job gets its GPUs."
    )
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="How tables go live.")
    refresh: RefreshSpec = Field(default_factory=RefreshSpec, description="When to re-profile.")
    gates: GatesSpec = Field(default_factory=GatesSpec, description="Acceptance gates.")
    history_limit: int = Field(
        default=3,
        ge=1,
        le=50,
        description=(
            "Tables kept per GPU product, across server fingerprints (image upgrades "
            "included), newest first. Never deleted, and counted within the limit: a table "
            "a target runs or is being given, the one it would roll back to, the table of "
            "each fingerprint a target has now, the rejected table, and any table a "
            "Deployment of the namespace mounts."
        ),
    )
    suspend: bool = Field(
        default=False, description="Start no new profiling run (a running one finishes)."
    )
    gpu_product_label: str = Field(
        default=GPU_PRODUCT_LABEL,
        min_length=1,
        max_length=MAX_LABEL_KEY,
        description="Node label naming the GPU product.",
    )

    @model_validator(mode="after")
    def _checks(self) -> SpsProfileSpec:
        check_optional_match(self.server_container, DNS_LABEL_PATTERN, MSG_SERVER_CONTAINER)
        check(label_key_ok(self.gpu_product_label), MSG_GPU_PRODUCT_LABEL)
        return self
