"""The SpsProfile API (`sps.dev/v1alpha1`): pydantic models are the source of truth.

The CRD's OpenAPI schema (`api/crd.py`), the reference docs (`docs/api.md`) and
the operator's parsing of live objects all come from these classes. Cross-field
rules are written twice on purpose: as CEL (`x-kubernetes-validations`, checked
by the API server at admission) and as pydantic validators (checked when the
operator or the plugin parses an object), with the same messages.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any, ClassVar

from croniter import croniter
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sps_operator.constants import API_GROUP, API_VERSION, GPU_PRODUCT_LABEL, KIND

API_VERSION_FULL = f"{API_GROUP}/{API_VERSION}"
DEFAULT_TABLE_PATH = "/etc/sps/table/table.json"
DEFAULT_ADDITIVE_FRACS = [0.25, 0.5, 0.75, 1.0]
DEFAULT_SERVER_PORT = 30000

# Messages shared by CEL rules and pydantic validators: they say what to fix.
MSG_FRACS = "sweep.fracs: every fraction must be in (0, 1], e.g. [0.25, 0.5, 1.0]"
MSG_BATCH_EXCLUSIVE = "sweep: set batchSizes or maxBatchSize, not both"
MSG_FRACS_DIAGONAL = (
    "sweep.fracs applies only to kind Additive; remove it or set table.kind: Additive"
)
MSG_EXTERNAL_URL = (
    "server.url is required when server.source is External "
    "(the URL of a DSpark server already in profiling mode, e.g. http://sglang-prof:30000)"
)
MSG_CLONE_URL = "server.url is only used with source External; remove it or set source: External"
MSG_SELECTOR_EMPTY = (
    "selector must not be empty: set matchLabels or matchExpressions to pick the SGLang "
    "Deployments in this namespace"
)
MSG_CRON = (
    "refresh.schedule must be a cron expression with 5 fields (minute hour day month weekday), "
    "e.g. '0 3 * * 0', or a macro such as @daily"
)
MSG_ANNOTATE_ONLY_CM = (
    "rollout.tableConfigMap is required for mode AnnotateOnly: name the ConfigMap that the "
    "Deployment in Git mounts at rollout.tablePath"
)
MSG_TABLE_PATH = "rollout.tablePath must be an absolute file path, e.g. /etc/sps/table/table.json"

# A cron field is digits, names, and the operators `* , - / ?`; five of them, or a macro.
CRON_FIELD = r"[0-9A-Za-z*,/?-]+"
CRON_PATTERN = (
    r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)"
    rf"|({CRON_FIELD}\s+){{4}}{CRON_FIELD})$"
)


def _cel(rule: str, message: str) -> Any:  # a JSON dict; Any keeps pydantic's JsonValue happy
    return {"rule": rule, "message": message}


class ApiModel(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
    )

    def to_k8s(self) -> dict[str, Any]:
        """The wire form: camelCase, no unset/None fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class StatusModel(ApiModel):
    # Status is written by the operator and may gain fields; tolerate unknown ones when
    # reading an object written by a newer operator.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=True
    )


# --------------------------------------------------------------------------- spec


class LabelSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(ApiModel):
    key: str = Field(min_length=1, max_length=317, description="The label key.")
    operator: LabelSelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[str] | None = Field(
        default=None,
        max_length=64,
        description="Values for In/NotIn; must be empty for Exists/DoesNotExist.",
    )


class LabelSelector(ApiModel):
    """A standard label selector; picks Deployments in the SpsProfile's namespace."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                    "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                    MSG_SELECTOR_EMPTY,
                )
            ]
        }
    )
    match_labels: dict[str, str] | None = Field(
        default=None, description="Labels a Deployment must carry (ANDed)."
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, max_length=16, description="Set-based requirements (ANDed)."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> LabelSelector:
        if not self.match_labels and not self.match_expressions:
            raise ValueError(MSG_SELECTOR_EMPTY)
        return self


class TableKind(StrEnum):
    DIAGONAL = "Diagonal"
    ADDITIVE = "Additive"


class SweepSpec(ApiModel):
    """What the profiler measures. Defaults follow SGLang's reference profiler, except
    the stopping rule: a round ends when the median step time is known well enough."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel("!(has(self.batchSizes) && has(self.maxBatchSize))", MSG_BATCH_EXCLUSIVE),
                _cel("!has(self.fracs) || self.fracs.all(f, f > 0.0 && f <= 1.0)", MSG_FRACS),
            ]
        }
    )
    batch_sizes: list[int] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Explicit batch sizes per DP rank (`--batch-size`). "
        "Exclusive with maxBatchSize.",
        json_schema_extra={"items": {"type": "integer", "minimum": 1, "maximum": 4096}},
    )
    max_batch_size: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="Tapered sweep up to this batch size per DP rank (`--max-batch-size`). "
        "When neither is set, the profiler derives the sweep from the server.",
    )
    fracs: list[float] | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        description="Additive only: forced verify-budget fractions in (0, 1] (`--fracs`). "
        f"Default {DEFAULT_ADDITIVE_FRACS}.",
    )
    input_len: int = Field(default=16, ge=1, le=65536, description="Prompt length in tokens.")
    repeats: int = Field(default=1, ge=1, le=16, description="Repeats of the whole sweep.")
    ci_rel_width: float = Field(
        default=0.02,
        gt=0.0,
        le=1.0,
        description="Stopping rule: a round ends when the confidence interval of the median "
        "step time is narrower than this fraction of the median.",
    )
    min_steady_steps: int | None = Field(
        default=None, ge=1, le=100000, description="Floor on steady steps per round."
    )
    min_steady_seconds: float | None = Field(
        default=None, ge=0.0, le=3600.0, description="Floor on steady seconds per round."
    )
    vocab_size: int | None = Field(
        default=None,
        ge=2,
        le=10_000_000,
        description="Vocabulary size for random prompts (`--vocab-size`). Needed only when the "
        "profiler cannot read the tokenizer (Clone mounts the server's volumes into the "
        "profiler at the same paths, so a local tokenizer_path usually resolves).",
    )
    round_timeout_seconds: float = Field(
        default=300.0, gt=0.0, le=7200.0, description="Give up on a round after this long."
    )

    @model_validator(mode="after")
    def _checks(self) -> SweepSpec:
        if self.batch_sizes is not None and self.max_batch_size is not None:
            raise ValueError(MSG_BATCH_EXCLUSIVE)
        if self.batch_sizes is not None and any(b < 1 for b in self.batch_sizes):
            raise ValueError("sweep.batchSizes: every batch size must be >= 1")
        if self.fracs is not None and not all(0.0 < f <= 1.0 for f in self.fracs):
            raise ValueError(MSG_FRACS)
        return self


class TableSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.kind == 'Additive' || !has(self.sweep) || !has(self.sweep.fracs)",
                    MSG_FRACS_DIAGONAL,
                )
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
        return self


class ServerSource(StrEnum):
    CLONE = "Clone"
    EXTERNAL = "External"


class ServerSpec(ApiModel):
    """Where the profiling server comes from."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.source != 'External' || (has(self.url) && size(self.url) > 0)",
                    MSG_EXTERNAL_URL,
                ),
                _cel("self.source == 'External' || !has(self.url)", MSG_CLONE_URL),
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
        description="External only: base URL of a DSpark server already in profiling mode.",
    )

    @model_validator(mode="after")
    def _url(self) -> ServerSpec:
        if self.source == ServerSource.EXTERNAL and not self.url:
            raise ValueError(MSG_EXTERNAL_URL)
        if self.source == ServerSource.CLONE and self.url:
            raise ValueError(MSG_CLONE_URL)
        return self


class Toleration(ApiModel):
    key: str | None = None
    operator: str | None = Field(default=None, description="Exists or Equal.")
    value: str | None = None
    effect: str | None = Field(default=None, description="NoSchedule, PreferNoSchedule, NoExecute.")
    toleration_seconds: int | None = None


class ResourceRequirements(ApiModel):
    limits: dict[str, int | str] | None = Field(
        default=None,
        description="Quantities, e.g. {cpu: '1', memory: 1Gi}.",
        json_schema_extra={"additionalProperties": {"x-kubernetes-int-or-string": True}},
    )
    requests: dict[str, int | str] | None = Field(
        default=None,
        json_schema_extra={"additionalProperties": {"x-kubernetes-int-or-string": True}},
    )


class JobOverrides(ApiModel):
    """Overrides for the profiling Job (the profiler container and the pod)."""

    image: str | None = Field(
        default=None,
        max_length=1024,
        description="Image of the profiler container (default: the operator's own image).",
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Resources of the profiler container."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=64, description="Added to the tolerations copied from the target."
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Added to the target's nodeSelector and the GPU-product pin."
    )
    active_deadline_seconds: int = Field(
        default=3600, ge=60, le=7 * 24 * 3600, description="Deadline of one profiling Job."
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        description="Run the Job under this ServiceAccount instead of the per-run one the "
        "operator creates (it then needs write access to the run's result ConfigMap).",
    )


class RolloutMode(StrEnum):
    INJECT = "Inject"
    ANNOTATE_ONLY = "AnnotateOnly"
    DISABLED = "Disabled"


class RolloutSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.mode != 'AnnotateOnly' || "
                    "(has(self.tableConfigMap) && size(self.tableConfigMap) > 0)",
                    MSG_ANNOTATE_ONLY_CM,
                ),
                _cel(
                    "self.tablePath.startsWith('/') && !self.tablePath.endsWith('/')",
                    MSG_TABLE_PATH,
                ),
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
        max_length=1024,
        description="Where the server reads the table; the file name is the ConfigMap key.",
    )

    @model_validator(mode="after")
    def _checks(self) -> RolloutSpec:
        if self.mode == RolloutMode.ANNOTATE_ONLY and not self.table_config_map:
            raise ValueError(MSG_ANNOTATE_ONLY_CM)
        if not self.table_path.startswith("/") or self.table_path.endswith("/"):
            raise ValueError(MSG_TABLE_PATH)
        return self


class RefreshSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                # A CEL raw string: the regex goes to RE2 unchanged.
                _cel(f"!has(self.schedule) || self.schedule.matches(r'{CRON_PATTERN}')", MSG_CRON)
            ]
        }
    )
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

    @model_validator(mode="after")
    def _cron(self) -> RefreshSpec:
        if self.schedule is not None and (
            not re.match(CRON_PATTERN, self.schedule) or not croniter.is_valid(self.schedule)
        ):
            raise ValueError(MSG_CRON)
        return self


class GatesSpec(ApiModel):
    """Acceptance gates: a table that fails one is kept for inspection, never rolled out."""

    max_rms_ms: float | None = Field(
        default=None, gt=0.0, description="Largest RMS fit error (milliseconds) accepted."
    )
    min_r2: float | None = Field(
        default=None, ge=0.0, le=1.0, description="Smallest fit R² accepted."
    )
    max_change: float | None = Field(
        default=None,
        gt=0.0,
        description="Largest relative change of any probe against the live table for the same "
        "GPU product (0.5 = 50 %). Needs a live table of the same kind.",
    )


class SpsProfileSpec(ApiModel):
    selector: LabelSelector = Field(
        description="Deployments (in this namespace) whose SGLang server gets the table."
    )
    server_container: str | None = Field(
        default=None,
        max_length=63,
        description="Name of the SGLang server container (default: the first container).",
    )
    table: TableSpec = Field(default_factory=TableSpec, description="Table kind and sweep.")
    server: ServerSpec = Field(default_factory=ServerSpec, description="Profiling server.")
    job: JobOverrides = Field(default_factory=JobOverrides, description="Profiling Job overrides.")
    rollout: RolloutSpec = Field(default_factory=RolloutSpec, description="How tables go live.")
    refresh: RefreshSpec = Field(default_factory=RefreshSpec, description="When to re-profile.")
    gates: GatesSpec = Field(default_factory=GatesSpec, description="Acceptance gates.")
    history_limit: int = Field(
        default=3, ge=1, le=50, description="Tables kept per GPU product (live one included)."
    )
    suspend: bool = Field(
        default=False, description="Start no new profiling run (a running one finishes)."
    )
    gpu_product_label: str = Field(
        default=GPU_PRODUCT_LABEL,
        min_length=1,
        max_length=317,
        description="Node label naming the GPU product.",
    )


# --------------------------------------------------------------------------- status


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
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    message: str = Field(default="", max_length=32768)


class FitQuality(StatusModel):
    rms_ms: float | None = Field(default=None, description="RMS fit error, milliseconds.")
    r2: float | None = Field(default=None, description="Coefficient of determination.")
    max_rel_err: float | None = Field(default=None, description="Largest per-probe relative error.")


class TableRef(StatusModel):
    """A published table (an immutable ConfigMap)."""

    gpu_product: str
    fingerprint: str = Field(description="Hash of what the cost depends on.")
    kind: TableKind
    config_map: str = Field(description="Immutable ConfigMap holding the table.")
    hash: str = Field(description="sha256 of the table JSON (first 16 hex digits).")
    quality: FitQuality | None = None
    profiled_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    run: str | None = Field(default=None, description="The run that measured it.")
    previous: str | None = Field(
        default=None, description="The table it replaced (rollback target on a failed rollout)."
    )
    message: str | None = Field(default=None, description="Why it was rejected, if it was.")


class RunPhase(StrEnum):
    DIAGONAL = "Diagonal"
    OFF_DIAGONAL = "OffDiagonal"


class RunStatus(StatusModel):
    """The profiling run in progress (at most one per SpsProfile)."""

    name: str = Field(description="Run name; also the name of its result ConfigMap.")
    job: str = Field(description="The Job of the current phase.")
    phase: RunPhase
    gpu_product: str
    fingerprint: str
    target: str = Field(description="The Deployment whose server is cloned.")
    trigger: str = Field(description="Why it runs: NoTable, Schedule, Token, Reprofile, ...")
    started_at: str = Field(json_schema_extra={"format": "date-time"})
    diagonal_table: str | None = Field(
        default=None, description="Additive: ConfigMap of the phase-1 diagonal table."
    )
    progress: str | None = None
    trigger_key: str | None = Field(default=None, description="Identifies the trigger.")
    attempt: int = Field(default=1, ge=1, description="Attempt number for this trigger.")


class TargetState(StrEnum):
    LIVE = "Live"
    ROLLING = "Rolling"
    PUBLISHED = "Published"
    STALE = "Stale"
    NO_TABLE = "NoTable"
    WAITING = "Waiting"
    REFUSED = "Refused"


class TargetStatus(StatusModel):
    deployment: str
    gpu_product: str | None = None
    fingerprint: str | None = None
    table: str | None = Field(
        default=None,
        description="Table ConfigMap it runs: measured for it (state Live, Rolling, "
        "Published) or, with state Stale, for a previous server or GPU product.",
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
    reason: str | None = Field(default=None, description="Why it is refused (CamelCase).")
    owner: str | None = Field(default=None, description="The SpsProfile that serves it.")
    message: str | None = None


class FailureRecord(StatusModel):
    run: str
    reason: str
    message: str
    at: str = Field(json_schema_extra={"format": "date-time"})
    gpu_product: str | None = None
    fingerprint: str | None = None
    attempts: int = 1
    trigger_key: str | None = Field(
        default=None, description="The trigger this failure belongs to (retries share it)."
    )
    retryable: bool = Field(
        default=True, description="False for gate failures: only a new trigger runs again."
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
    rejected_table: TableRef | None = Field(
        default=None, description="Last table that failed a gate (kept for inspection)."
    )
    current_run: RunStatus | None = None
    last_failure: FailureRecord | None = None
    last_schedule_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    next_schedule_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    refresh_requested_at: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Tables profiled before this time are refreshed (token, annotation, schedule).",
    )
    refresh_reason: str | None = Field(default=None, description="Why a refresh was requested.")
    observed_token: str | None = Field(default=None, description="refresh.token last acted on.")
    observed_reprofile: str | None = Field(
        default=None, description="sps.dev/reprofile annotation value last acted on."
    )
    targets: list[TargetStatus] = Field(default_factory=list)


class SpsProfile(BaseModel):
    """The whole object, for parsing (metadata stays a plain dict)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    KIND: ClassVar[str] = KIND
    api_version: str = API_VERSION_FULL
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpsProfileSpec
    status: SpsProfileStatus = Field(default_factory=SpsProfileStatus)
