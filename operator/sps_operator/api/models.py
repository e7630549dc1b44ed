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
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from sps_operator.api import cron
from sps_operator.api import limits as L
from sps_operator.api.kinds import RunPhase, TableKind  # re-exported
from sps_operator.constants import API_GROUP, API_VERSION, GPU_PRODUCT_LABEL, KIND

API_VERSION_FULL = f"{API_GROUP}/{API_VERSION}"
DEFAULT_TABLE_PATH = "/etc/sps/table/table.json"
DEFAULT_ADDITIVE_FRACS = [0.25, 0.5, 0.75, 1.0]
DEFAULT_SERVER_PORT = 30000
MAX_PROFILE_NAME = L.MAX_PROFILE_NAME

# --------------------------------------------------------------------------- syntax
# Anchored regexes that RE2 (CEL `matches`, the API server) and Python's `re` (pydantic,
# via `_full`) read the same way: no \d, \s, \w, lookaround or backreferences.

LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
# A label key: an optional DNS-subdomain prefix and '/', then a name (<= 63 characters);
# the prefix is at most 253 characters (the second pattern).
LABEL_KEY_PATTERN = rf"^({DNS_SUBDOMAIN}/)?{LABEL_NAME}$"
LABEL_KEY_LENGTH_PATTERN = r"^([^/]{1,253}/)?[^/]{1,63}$"
LABEL_VALUE_PATTERN = rf"^({LABEL_NAME})?$"
NONEMPTY_LABEL_VALUE_PATTERN = rf"^{LABEL_NAME}$"
DNS_LABEL_PATTERN = rf"^{DNS_LABEL}$"
DNS_SUBDOMAIN_PATTERN = rf"^{DNS_SUBDOMAIN}$"
MAX_LABEL_KEY = 317  # 253 + '/' + 63
MAX_LABEL_VALUE = 63

# An image reference: [registry[:port]/]path[:tag][@digest] (the distribution grammar; as
# Docker reads it, a first component is a registry only with a '.', a port or localhost).
_DOMAIN_PART = r"([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = rf"((localhost|{_DOMAIN_PART}(\.{_DOMAIN_PART})+)(:[0-9]+)?|{_DOMAIN_PART}:[0-9]+)"
_PATH_PART = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (
    rf"^({_REGISTRY}/)?{_PATH_PART}(/{_PATH_PART})*"
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
MAX_IMAGE = 512

# spec.server.sglangVersion: a release as SGLang's package reports it, or unknown.
SGLANG_VERSION_PATTERN = (
    r"^(unknown|v?[0-9]+[.][0-9]+[.][0-9]+"
    r"([.]?(dev|rc|a|b)[0-9]*)?([.]post[0-9]+)?([+][A-Za-z0-9.]+)?)$"
)

# tablePath: an absolute path of safe characters, no '//', no trailing '/'.
TABLE_PATH_PATTERN = r"^(/[A-Za-z0-9._-]+)+$"
TABLE_PATH_DOT_SEGMENT_PATTERN = r"^(.*/)?[.][.]?(/.*)?$"
MAX_TABLE_PATH = 255
# A ConfigMap volume mounted on one of these hides the image's own files there.
SYSTEM_DIRECTORIES = (
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib64",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/usr/bin",
    "/usr/lib",
    "/usr/local",
    "/usr/local/bin",
    "/usr/local/lib",
    "/opt",
    "/home",
)
TABLE_PATH_IN_SYSTEM_DIR_PATTERN = (
    "^(" + "|".join(re.escape(d) for d in SYSTEM_DIRECTORIES if d != "/") + ")?/[^/]+$"
)


def _full(pattern: str, text: str) -> bool:
    """`text.matches(pattern)` as the API server evaluates our anchored patterns."""
    assert pattern.startswith("^") and pattern.endswith("$"), pattern
    return re.fullmatch(pattern[1:-1], text) is not None


def _raw(pattern: str) -> str:
    """A pattern as a CEL raw string literal (RE2 gets it unchanged)."""
    assert "'" not in pattern and "\n" not in pattern, pattern
    return f"r'{pattern}'"


# Messages shared by CEL rules and pydantic validators: they say what to fix.
MSG_FRACS = "sweep.fracs: every fraction must be in (0, 1], e.g. [0.25, 0.5, 1.0]"
MSG_BATCH_EXCLUSIVE = "sweep: set batchSizes or maxBatchSize, not both"
MSG_FRACS_DIAGONAL = (
    "sweep.fracs applies only to kind Additive; remove it or set table.kind: Additive"
)
MSG_ONE_PROBE = (
    f"sweep.batchSizes needs at least {L.MIN_PROBES} distinct batch sizes: SGLang treats a "
    "table with a single probe as uninitialized and serves verify-all"
)
MSG_MAX_BATCH_ONE_PROBE = (
    f"sweep.maxBatchSize must be at least {L.MAX_BATCH_SIZE_MIN}: a sweep up to 1 measures a "
    "single probe, which SGLang treats as an uninitialized table (verify-all)"
)
MSG_SWEEP_CELLS = (
    f"table.sweep: batch sizes x fracs x repeats must be at most {L.MAX_SWEEP_CELLS} cells "
    "(each cell is a profiling round, and the rounds must fit a 1 MiB ConfigMap); "
    "measure fewer batch sizes, fracs or repeats"
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
_LABEL_KEY_RULE = (
    "an optional DNS subdomain prefix of at most 253 characters and '/', then a name of at "
    "most 63 letters, digits, '-', '_' or '.' that starts and ends with a letter or digit, "
    "e.g. app or app.kubernetes.io/name"
)
_LABEL_VALUE_RULE = (
    "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
)
MSG_MATCH_LABELS_KEY = f"selector.matchLabels: every key must be a label key: {_LABEL_KEY_RULE}"
MSG_MATCH_LABELS_VALUE = (
    f"selector.matchLabels: every value must be a label value ({_LABEL_VALUE_RULE}) or empty"
)
MSG_EXPRESSION_KEY = f"selector.matchExpressions: key must be a label key: {_LABEL_KEY_RULE}"
MSG_EXPRESSION_VALUES_REQUIRED = (
    "selector.matchExpressions: operators In and NotIn need at least one value in values"
)
MSG_EXPRESSION_VALUES_FORBIDDEN = (
    "selector.matchExpressions: operators Exists and DoesNotExist take no values; remove values"
)
MSG_EXPRESSION_VALUE = (
    f"selector.matchExpressions: every value must be a label value ({_LABEL_VALUE_RULE})"
)
MSG_NODE_SELECTOR_KEY = f"job.nodeSelector: every key must be a label key: {_LABEL_KEY_RULE}"
MSG_JOB_LABEL_KEY = f"job.labels: every key must be a label key: {_LABEL_KEY_RULE}"
MSG_JOB_LABEL_VALUE = (
    f"job.labels: every value must be a label value ({_LABEL_VALUE_RULE}) or empty"
)
MSG_PRIORITY_CLASS = "job.priorityClassName must be a PriorityClass name (a DNS subdomain)"
MSG_NODE_SELECTOR_VALUE = (
    f"job.nodeSelector: every value must be a label value ({_LABEL_VALUE_RULE}) or empty"
)
MSG_GPU_PRODUCT_LABEL = f"gpuProductLabel must be a label key: {_LABEL_KEY_RULE}"
MSG_SERVER_CONTAINER = (
    "serverContainer must be a container name: at most 63 lowercase letters, digits and '-', "
    "starting and ending with a letter or digit"
)
MSG_IMAGE = (
    "job.image must be an image reference [registry[:port]/]path[:tag][@digest], e.g. "
    "ghcr.io/sps-dev/sps-operator:0.1.0"
)
MSG_SERVICE_ACCOUNT = (
    "job.serviceAccountName must be a ServiceAccount name: lowercase letters, digits, '-' and "
    "'.', starting and ending with a letter or digit"
)
MSG_RESOURCE_NAME = "job.resources: every resource name must be at most 253 characters"
MSG_RESOURCE_QUANTITY = (
    "job.resources: every quantity must be at most 64 characters, e.g. 500m or 1Gi"
)
MSG_TOLERATION_KEY = f"job.tolerations: key must be empty or a label key: {_LABEL_KEY_RULE}"
MSG_TOLERATION_VALUE = (
    f"job.tolerations: value must be empty or a label value ({_LABEL_VALUE_RULE})"
)
MSG_ANNOTATE_ONLY_CM = (
    "rollout.tableConfigMap is required for mode AnnotateOnly: name the ConfigMap that the "
    "Deployment in Git mounts at rollout.tablePath"
)
MSG_TABLE_PATH = (
    "rollout.tablePath must be an absolute file path of letters, digits, '.', '_', '-' and '/' "
    "(no '//', no trailing '/'), e.g. /etc/sps/table/table.json"
)
MSG_TABLE_PATH_DOTS = "rollout.tablePath must not contain '.' or '..' path segments"
MSG_TABLE_PATH_SYSTEM = (
    "rollout.tablePath must not lie directly in a system directory ("
    + ", ".join(SYSTEM_DIRECTORIES)
    + "): the table's ConfigMap volume is mounted on that directory and hides the image's "
    "files there; use a dedicated directory such as /etc/sps/table"
)
MSG_PROFILE_NAME = (
    f"metadata.name must be at most {L.MAX_PROFILE_NAME} characters: the operator derives Job, "
    "pod and label names from it, which must stay within 63 characters"
)
MSG_CRON = cron.MSG_SHAPE


def _cel(rule: str, message: str, message_expression: str | None = None) -> Any:
    """A CEL rule (a JSON dict; Any keeps pydantic's JsonValue happy)."""
    out = {"rule": rule, "message": message}
    if message_expression is not None:
        out["messageExpression"] = message_expression
    return out


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _truncate(limit: int) -> Any:
    """A before-validator that cuts text to `limit` characters (marking the cut), so status
    text from a Job or an exception always fits the schema, old objects included."""

    def cut(value: Any) -> Any:
        if isinstance(value, str) and len(value) > limit:
            return value[: limit - 1] + "…"
        return value

    return BeforeValidator(cut)


# `str` that keeps at most so many characters: longer input is cut, never refused.
ProgressText = Annotated[
    str, _truncate(L.MAX_PROGRESS_LENGTH), Field(max_length=L.MAX_PROGRESS_LENGTH)
]
ReportLine = Annotated[
    str, _truncate(L.MAX_REPORT_LINE_LENGTH), Field(max_length=L.MAX_REPORT_LINE_LENGTH)
]
MessageText = Annotated[
    str, _truncate(L.MAX_MESSAGE_LENGTH), Field(max_length=L.MAX_MESSAGE_LENGTH)
]
ConditionMessage = Annotated[
    str,
    _truncate(L.MAX_CONDITION_MESSAGE_LENGTH),
    Field(max_length=L.MAX_CONDITION_MESSAGE_LENGTH),
]


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


def _label_key_ok(key: str) -> bool:
    return _full(LABEL_KEY_PATTERN, key) and _full(LABEL_KEY_LENGTH_PATTERN, key)


def _cel_label_key(expr: str) -> str:
    return (
        f"{expr}.matches({_raw(LABEL_KEY_PATTERN)}) && "
        f"{expr}.matches({_raw(LABEL_KEY_LENGTH_PATTERN)})"
    )


def _cel_map_rules(field: str, key_message: str, value_message: str) -> list[Any]:
    """CEL rules for a string map (matchLabels, nodeSelector): label keys and values."""
    return [
        _cel(f"!has(self.{field}) || self.{field}.all(k, {_cel_label_key('k')})", key_message),
        _cel(
            f"!has(self.{field}) || "
            f"self.{field}.all(k, self.{field}[k].matches({_raw(LABEL_VALUE_PATTERN)}))",
            value_message,
        ),
    ]


def _check_map(labels: dict[str, str] | None, key_message: str, value_message: str) -> None:
    for key, value in (labels or {}).items():
        _check(_label_key_ok(key), key_message)
        _check(_full(LABEL_VALUE_PATTERN, value), value_message)


LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE)]
LabelMap = Annotated[
    dict[str, LabelValue],
    Field(
        max_length=64,
        json_schema_extra={
            # Map keys cannot carry maxLength in a structural schema: a cheap CEL size bound
            # refuses a huge key plainly (the key syntax rule sits on the parent).
            "x-kubernetes-validations": [
                _cel(
                    f"self.all(k, size(k) <= {MAX_LABEL_KEY})",
                    f"label keys must be at most {MAX_LABEL_KEY} characters",
                )
            ]
        },
    ),
]


class LabelSelectorRequirement(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(_cel_label_key("self.key"), MSG_EXPRESSION_KEY),
                _cel(
                    "!(self.operator in ['In', 'NotIn']) || "
                    "(has(self.values) && size(self.values) > 0)",
                    MSG_EXPRESSION_VALUES_REQUIRED,
                ),
                _cel(
                    "!(self.operator in ['Exists', 'DoesNotExist']) || "
                    "!has(self.values) || size(self.values) == 0",
                    MSG_EXPRESSION_VALUES_FORBIDDEN,
                ),
                _cel(
                    "!has(self.values) || "
                    f"self.values.all(v, v.matches({_raw(NONEMPTY_LABEL_VALUE_PATTERN)}))",
                    MSG_EXPRESSION_VALUE,
                ),
            ]
        }
    )
    key: str = Field(min_length=1, max_length=MAX_LABEL_KEY, description="The label key.")
    operator: LabelSelectorOperator = Field(description="In, NotIn, Exists or DoesNotExist.")
    values: list[LabelValue] | None = Field(
        default=None,
        max_length=64,
        description="Values for In/NotIn (at least one); must be empty for Exists/DoesNotExist.",
    )

    @model_validator(mode="after")
    def _checks(self) -> LabelSelectorRequirement:
        _check(_label_key_ok(self.key), MSG_EXPRESSION_KEY)
        if self.operator in (LabelSelectorOperator.IN, LabelSelectorOperator.NOT_IN):
            _check(bool(self.values), MSG_EXPRESSION_VALUES_REQUIRED)
        else:
            _check(not self.values, MSG_EXPRESSION_VALUES_FORBIDDEN)
        for value in self.values or []:
            _check(_full(NONEMPTY_LABEL_VALUE_PATTERN, value), MSG_EXPRESSION_VALUE)
        return self


class LabelSelector(ApiModel):
    """A standard label selector; picks Deployments in the SpsProfile's namespace. Keys,
    values and operators are checked at admission, so the operator's LIST never fails on
    them."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                    "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                    MSG_SELECTOR_EMPTY,
                ),
                *_cel_map_rules("matchLabels", MSG_MATCH_LABELS_KEY, MSG_MATCH_LABELS_VALUE),
            ]
        }
    )
    match_labels: LabelMap | None = Field(
        default=None, description="Labels a Deployment must carry (ANDed)."
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, max_length=16, description="Set-based requirements (ANDed)."
    )

    @model_validator(mode="after")
    def _not_empty(self) -> LabelSelector:
        if not self.match_labels and not self.match_expressions:
            raise ValueError(MSG_SELECTOR_EMPTY)
        _check_map(self.match_labels, MSG_MATCH_LABELS_KEY, MSG_MATCH_LABELS_VALUE)
        return self


BatchSize = Annotated[int, Field(ge=L.BATCH_SIZE_MIN, le=L.BATCH_SIZE_MAX)]


class SweepSpec(ApiModel):
    """What the profiler measures. Defaults follow SGLang's reference profiler, except
    the stopping rule: a round ends when the median step time is known well enough. The
    bounds are the profiler's own (`sps_operator.api.limits`): what the API admits, the
    profiler runs."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel("!(has(self.batchSizes) && has(self.maxBatchSize))", MSG_BATCH_EXCLUSIVE),
                _cel(
                    "!has(self.fracs) || self.fracs.all(f, "
                    f"f > {L.FRAC_MIN_EXCLUSIVE} && f <= {L.FRAC_MAX})",
                    MSG_FRACS,
                ),
                _cel(
                    "!has(self.batchSizes) || self.batchSizes.exists(b, b != self.batchSizes[0])",
                    MSG_ONE_PROBE,
                ),
                _cel(
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
            _check(len(set(self.batch_sizes)) >= L.MIN_PROBES, MSG_ONE_PROBE)
        if self.max_batch_size is not None:
            _check(self.max_batch_size >= L.MAX_BATCH_SIZE_MIN, MSG_MAX_BATCH_ONE_PROBE)
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
    return _cel(f"!has(self.sweep) || {b} * {f} * {r} <= {L.MAX_SWEEP_CELLS}", MSG_SWEEP_CELLS)


class TableSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
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
        _check(L.sweep_cells(*counts) <= L.MAX_SWEEP_CELLS, MSG_SWEEP_CELLS)
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


class Toleration(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    f"!has(self.key) || size(self.key) == 0 || ({_cel_label_key('self.key')})",
                    MSG_TOLERATION_KEY,
                ),
                _cel(
                    f"!has(self.value) || self.value.matches({_raw(LABEL_VALUE_PATTERN)})",
                    MSG_TOLERATION_VALUE,
                ),
            ]
        }
    )
    key: str | None = Field(default=None, max_length=MAX_LABEL_KEY)
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal."
    )
    value: str | None = Field(default=None, max_length=MAX_LABEL_VALUE)
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="NoSchedule, PreferNoSchedule, NoExecute (empty: all)."
    )
    toleration_seconds: int | None = None

    @model_validator(mode="after")
    def _checks(self) -> Toleration:
        _check(not self.key or _label_key_ok(self.key), MSG_TOLERATION_KEY)
        _check(self.value is None or _full(LABEL_VALUE_PATTERN, self.value), MSG_TOLERATION_VALUE)
        return self


MAX_RESOURCE_NAME = 253
MAX_QUANTITY = 64
ResourceMap = Annotated[
    dict[str, int | str],
    Field(
        max_length=16,
        json_schema_extra={
            "additionalProperties": {"x-kubernetes-int-or-string": True},
            "x-kubernetes-validations": [
                _cel(f"self.all(k, size(k) <= {MAX_RESOURCE_NAME})", MSG_RESOURCE_NAME),
                _cel(
                    f"self.all(k, type(self[k]) == int || size(self[k]) <= {MAX_QUANTITY})",
                    MSG_RESOURCE_QUANTITY,
                ),
            ],
        },
    ),
]


class ResourceRequirements(ApiModel):
    limits: ResourceMap | None = Field(
        default=None, description="Quantities, e.g. {cpu: '1', memory: 1Gi}."
    )
    requests: ResourceMap | None = Field(default=None)

    @model_validator(mode="after")
    def _checks(self) -> ResourceRequirements:
        for quantities in (self.limits or {}, self.requests or {}):
            for name, quantity in quantities.items():
                _check(len(name) <= MAX_RESOURCE_NAME, MSG_RESOURCE_NAME)
                _check(
                    isinstance(quantity, int) or len(quantity) <= MAX_QUANTITY,
                    MSG_RESOURCE_QUANTITY,
                )
        return self


class JobOverrides(ApiModel):
    """Overrides for the profiling Job (the profiler container and the pod)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(f"!has(self.image) || self.image.matches({_raw(IMAGE_PATTERN)})", MSG_IMAGE),
                _cel(
                    "!has(self.serviceAccountName) || "
                    f"self.serviceAccountName.matches({_raw(DNS_SUBDOMAIN_PATTERN)})",
                    MSG_SERVICE_ACCOUNT,
                ),
                *_cel_map_rules("nodeSelector", MSG_NODE_SELECTOR_KEY, MSG_NODE_SELECTOR_VALUE),
                *_cel_map_rules("labels", MSG_JOB_LABEL_KEY, MSG_JOB_LABEL_VALUE),
                _cel(
                    "!has(self.priorityClassName) || "
                    f"self.priorityClassName.matches({_raw(DNS_SUBDOMAIN_PATTERN)})",
                    MSG_PRIORITY_CLASS,
                ),
            ]
        }
    )
    image: str | None = Field(
        default=None,
        max_length=MAX_IMAGE,
        description="Image of the profiler container (default: the operator's own image).",
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Resources of the profiler container."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=64, description="Added to the tolerations copied from the target."
    )
    node_selector: LabelMap | None = Field(
        default=None,
        description="Added to the target's nodeSelector; the GPU-product pin always wins (a "
        "different value for spec.gpuProductLabel is refused: GpuPinConflict).",
    )
    active_deadline_seconds: int = Field(
        default=3600,
        ge=60,
        le=7 * 24 * 3600,
        description="Deadline of one profiling Job (at most the operator's policy maximum, "
        "by default one day).",
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        description="Run the Job under this ServiceAccount instead of the per-run one the "
        "operator creates (it then needs write access to the run's result ConfigMap).",
    )
    labels: LabelMap | None = Field(
        default=None,
        description="Labels for the Job and its pod (e.g. kueue.x-k8s.io/queue-name: a Job "
        "naming a Kueue queue is created suspended, and Kueue admits it). Keys and queues "
        "are subject to the operator's policy (by default no sps.dev, kubernetes.io, k8s.io "
        "or other kueue.x-k8s.io keys); labels that a Deployment's, Service's or "
        "PodDisruptionBudget's selector would match are refused.",
    )
    annotations: dict[str, Annotated[str, Field(max_length=4096)]] | None = Field(
        default=None,
        max_length=64,
        description="Annotations for the Job and its pod (keys subject to the operator's "
        "policy, as for labels).",
    )
    priority_class_name: str | None = Field(
        default=None,
        max_length=253,
        description="PriorityClass of the Job's pod (default: the target's), for preemption "
        "policies and Kueue's priorities; the operator's policy refuses system-* classes "
        "unless the cluster admin allows them.",
    )

    @model_validator(mode="after")
    def _checks(self) -> JobOverrides:
        _check(self.image is None or _full(IMAGE_PATTERN, self.image), MSG_IMAGE)
        _check(
            self.service_account_name is None
            or _full(DNS_SUBDOMAIN_PATTERN, self.service_account_name),
            MSG_SERVICE_ACCOUNT,
        )
        _check_map(self.node_selector, MSG_NODE_SELECTOR_KEY, MSG_NODE_SELECTOR_VALUE)
        _check_map(self.labels, MSG_JOB_LABEL_KEY, MSG_JOB_LABEL_VALUE)
        _check(
            self.priority_class_name is None
            or _full(DNS_SUBDOMAIN_PATTERN, self.priority_class_name),
            MSG_PRIORITY_CLASS,
        )
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


class RolloutSpec(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.mode != 'AnnotateOnly' || "
                    "(has(self.tableConfigMap) && size(self.tableConfigMap) > 0)",
                    MSG_ANNOTATE_ONLY_CM,
                ),
                _cel(f"self.tablePath.matches({_raw(TABLE_PATH_PATTERN)})", MSG_TABLE_PATH),
                _cel(
                    f"!self.tablePath.matches({_raw(TABLE_PATH_DOT_SEGMENT_PATTERN)})",
                    MSG_TABLE_PATH_DOTS,
                ),
                _cel(
                    f"!self.tablePath.matches({_raw(TABLE_PATH_PATTERN)}) || "
                    f"!self.tablePath.matches({_raw(TABLE_PATH_IN_SYSTEM_DIR_PATTERN)})",
                    MSG_TABLE_PATH_SYSTEM,
                    "'rollout.tablePath: the table\\'s ConfigMap volume would be mounted on ' + "
                    f"{_TABLE_DIR_CEL} + ' and hide the image\\'s files there; use a dedicated "
                    "directory such as /etc/sps/table'",
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
        max_length=MAX_TABLE_PATH,
        description="Where the server reads the table; the file name is the ConfigMap key. Its "
        "directory is where the table's ConfigMap is mounted, so it must be a dedicated one "
        "(not /, /etc, /usr, /tmp, ...).",
    )

    @model_validator(mode="after")
    def _checks(self) -> RolloutSpec:
        if self.mode == RolloutMode.ANNOTATE_ONLY and not self.table_config_map:
            raise ValueError(MSG_ANNOTATE_ONLY_CM)
        path = self.table_path
        _check(_full(TABLE_PATH_PATTERN, path), MSG_TABLE_PATH)
        _check(not _full(TABLE_PATH_DOT_SEGMENT_PATTERN, path), MSG_TABLE_PATH_DOTS)
        if _full(TABLE_PATH_IN_SYSTEM_DIR_PATTERN, path):
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
        "new table onto one Deployment that already runs a table measured for it (each "
        "rollout restarts every server). It may only lengthen the operator's own minimum "
        "(chart value refresh.minIntervalSeconds, default 1 h); a first table, a table for a "
        "changed server and a rollback are never held back.",
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
                _cel(
                    f"!has(self.serverContainer) || "
                    f"self.serverContainer.matches({_raw(DNS_LABEL_PATTERN)})",
                    MSG_SERVER_CONTAINER,
                ),
                _cel(_cel_label_key("self.gpuProductLabel"), MSG_GPU_PRODUCT_LABEL),
            ]
        }
    )
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
        _check(
            self.server_container is None or _full(DNS_LABEL_PATTERN, self.server_container),
            MSG_SERVER_CONTAINER,
        )
        _check(_label_key_ok(self.gpu_product_label), MSG_GPU_PRODUCT_LABEL)
        return self


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
    profiled_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    run: str | None = Field(default=None, description="The run that measured it.")
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
    adopted_from: str | None = Field(
        default=None,
        max_length=63,
        description="The fingerprint (version 1) it was stored under before an operator "
        "upgrade re-keyed it: the previous fingerprint function gave the same value for the "
        "server as it is now (docs/fingerprint.md, Upgrading).",
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
    since: str = Field(
        description="When the wait began (the run fails after capacity.waitTimeoutSeconds).",
        json_schema_extra={"format": "date-time"},
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
    at: str = Field(
        description="When it was borrowed (serving capacity is reduced since).",
        json_schema_extra={"format": "date-time"},
    )
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
    held_since: str | None = Field(
        default=None,
        description="status.rolloutBorrow: when the run ended and the slot was kept for the "
        "rollout.",
        json_schema_extra={"format": "date-time"},
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
    phase: RunPhase
    gpu_product: str
    fingerprint: str
    target: str = Field(description="The Deployment whose server is cloned.")
    trigger: str = Field(description="Why it runs: NoTable, Schedule, Token, Reprofile, ...")
    started_at: str = Field(json_schema_extra={"format": "date-time"})
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
    running_since: str | None = Field(
        default=None,
        description="When the Job's pod started running: the run's own deadline "
        "(spec.job.activeDeadlineSeconds) counts from here, not from its wait for GPUs.",
        json_schema_extra={"format": "date-time"},
    )
    result_wait_since: str | None = Field(
        default=None,
        description="When the Job was seen complete while its result ConfigMap did not hold "
        "the final result yet (the run waits a bounded time for that write).",
        json_schema_extra={"format": "date-time"},
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
    observed_since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
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
    unfingerprinted: list[ReportLine] | None = Field(
        default=None,
        max_length=L.MAX_REPORT_LINES,
        description="Inputs that look like cost inputs but are not in the fingerprint (a "
        "change there reprofiles nothing), and what could set one unseen.",
    )
    rolled_at: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When the operator last rolled a new table onto it (the minimum interval "
        "between rollouts counts from here).",
    )
    held_until: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="A newer table for it waits for the minimum interval between rollouts "
        "until then (nextTable).",
    )
    next_table: str | None = Field(
        default=None, description="The newer table that waits (see heldUntil)."
    )
    blocked_since: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Since when its rollout has been blocked (reason RolloutBlocked).",
    )


class FailureRecord(StatusModel):
    run: str
    reason: str
    message: MessageText
    at: str = Field(json_schema_extra={"format": "date-time"})
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
    rejected_table: TableRef | None = Field(
        default=None, description="Last table that failed a gate (kept for inspection)."
    )
    current_run: RunStatus | None = None
    last_failure: FailureRecord | None = None
    last_schedule_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    next_schedule_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    schedule_held_back: MessageText | None = Field(
        default=None,
        description="Set while refresh.schedule fires more often than the minimum interval "
        "between scheduled runs: which fire times are skipped, and when the next run is.",
    )
    refresh_requested_at: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
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
        "completes (or fails, or takes longer than the Deployment's progress deadline).",
    )


# Rules at the root of the CRD schema, where CEL may read metadata.name.
ROOT_RULES: list[dict[str, str]] = [
    _cel(f"size(self.metadata.name) <= {L.MAX_PROFILE_NAME}", MSG_PROFILE_NAME)
]


class SpsProfile(BaseModel):
    """The whole object, for parsing (metadata stays a plain dict)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    KIND: ClassVar[str] = KIND
    api_version: str = API_VERSION_FULL
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: SpsProfileSpec
    status: SpsProfileStatus = Field(default_factory=SpsProfileStatus)

    @model_validator(mode="after")
    def _name(self) -> SpsProfile:
        _check(len(str(self.metadata.get("name") or "")) <= L.MAX_PROFILE_NAME, MSG_PROFILE_NAME)
        return self
