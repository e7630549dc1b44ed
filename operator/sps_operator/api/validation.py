"""How SpsProfile input is checked: syntax, refusal messages, CEL and pydantic helpers.

Cross-field rules are written twice on purpose: as CEL (`x-kubernetes-validations`,
checked by the API server at admission) and as pydantic validators (checked when the
operator or the plugin parses an object), with the same messages, all defined here. The
base models (`ApiModel`, `StatusModel`) fix the wire form: camelCase, unknown spec fields
refused.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sps_operator.api import limits as L

MAX_PROFILE_NAME = L.MAX_PROFILE_NAME

# --------------------------------------------------------------------------- syntax
# Anchored regexes that RE2 (CEL `matches`, the API server) and Python's `re` (pydantic,
# via `full_match`) read the same way: no \d, \s, \w, lookaround or backreferences.

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
MAX_OBJECT_NAME = 253

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


def full_match(pattern: str, text: str) -> bool:
    """`text.matches(pattern)` as the API server evaluates our anchored patterns."""
    assert pattern.startswith("^") and pattern.endswith("$"), pattern
    return re.fullmatch(pattern[1:-1], text) is not None


def cel_string(pattern: str) -> str:
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
# ConfigMaps the cluster itself writes in every namespace (kube-controller-manager's root
# CA, kubeadm's, the API server's, a service mesh's CA): an AnnotateOnly table written into
# one would be fought over by its publisher forever.
SYSTEM_CONFIG_MAP_PATTERN = (
    r"^(kube-.*|extension-apiserver-authentication|cluster-info|kubeadm-config|"
    r"kubelet-config|coredns|istio-ca-root-cert|openshift-service-ca\.crt)$"
)
MSG_SYSTEM_CONFIG_MAP = (
    "rollout.tableConfigMap names a ConfigMap the cluster writes itself (kube-root-ca.crt, "
    "kube-*, cluster-info, ...): its publisher would overwrite the table and the two would "
    "fight; name a ConfigMap of your own"
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


def cel_rule(rule: str, message: str, message_expression: str | None = None) -> Any:
    """A CEL rule (a JSON dict; Any keeps pydantic's JsonValue happy)."""
    out = {"rule": rule, "message": message}
    if message_expression is not None:
        out["messageExpression"] = message_expression
    return out


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def truncate(limit: int) -> Any:
    """A before-validator that cuts text to `limit` characters (marking the cut), so status
    text from a Job or an exception always fits the schema, old objects included."""

    def cut(value: Any) -> Any:
        if isinstance(value, str) and len(value) > limit:
            return value[: limit - 1] + "…"
        return value

    return BeforeValidator(cut)


# `str` that keeps at most so many characters: longer input is cut, never refused.
ProgressText = Annotated[
    str, truncate(L.MAX_PROGRESS_LENGTH), Field(max_length=L.MAX_PROGRESS_LENGTH)
]
ReportLine = Annotated[
    str, truncate(L.MAX_REPORT_LINE_LENGTH), Field(max_length=L.MAX_REPORT_LINE_LENGTH)
]
MessageText = Annotated[str, truncate(L.MAX_MESSAGE_LENGTH), Field(max_length=L.MAX_MESSAGE_LENGTH)]
ConditionMessage = Annotated[
    str,
    truncate(L.MAX_CONDITION_MESSAGE_LENGTH),
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


# --------------------------------------------------------------------------- label maps


def label_key_ok(key: str) -> bool:
    return full_match(LABEL_KEY_PATTERN, key) and full_match(LABEL_KEY_LENGTH_PATTERN, key)


def cel_label_key(expr: str) -> str:
    return (
        f"{expr}.matches({cel_string(LABEL_KEY_PATTERN)}) && "
        f"{expr}.matches({cel_string(LABEL_KEY_LENGTH_PATTERN)})"
    )


def cel_map_rules(field: str, key_message: str, value_message: str) -> list[Any]:
    """CEL rules for a string map (matchLabels, nodeSelector): label keys and values."""
    return [
        cel_rule(f"!has(self.{field}) || self.{field}.all(k, {cel_label_key('k')})", key_message),
        cel_rule(
            f"!has(self.{field}) || "
            f"self.{field}.all(k, self.{field}[k].matches({cel_string(LABEL_VALUE_PATTERN)}))",
            value_message,
        ),
    ]


def check_label_map(labels: dict[str, str] | None, key_message: str, value_message: str) -> None:
    for key, value in (labels or {}).items():
        check(label_key_ok(key), key_message)
        check(full_match(LABEL_VALUE_PATTERN, value), value_message)


def cel_optional_match(field: str, pattern: str, message: str) -> Any:
    """CEL: the string `field`, when set, matches `pattern` (`check_optional_match`)."""
    return cel_rule(f"!has(self.{field}) || self.{field}.matches({cel_string(pattern)})", message)


def check_optional_match(value: str | None, pattern: str, message: str) -> None:
    check(value is None or full_match(pattern, value), message)


_DATE_TIME: Any = {"format": "date-time"}
# An RFC 3339 time (format date-time in the CRD). Required: `at: Timestamp`, so type checkers
# see no default; optional: `optional_timestamp(...)` (as an alias inside `| None` it would
# move the format into the schema's non-null branch).
Timestamp = Annotated[str, Field(json_schema_extra=_DATE_TIME)]


def optional_timestamp(description: str | None = None) -> Any:
    """An RFC 3339 time that may be absent (format date-time in the CRD)."""
    return Field(default=None, description=description, json_schema_extra=_DATE_TIME)


LabelValue = Annotated[str, Field(max_length=MAX_LABEL_VALUE)]
# The name of a Kubernetes object that DNS-subdomain rules name (a ServiceAccount, a
# PriorityClass); its syntax is a CEL rule with a message (`cel_optional_match`).
ObjectName = Annotated[str, Field(max_length=MAX_OBJECT_NAME)]
LabelMap = Annotated[
    dict[str, LabelValue],
    Field(
        max_length=64,
        json_schema_extra={
            # Map keys cannot carry maxLength in a structural schema: a cheap CEL size bound
            # refuses a huge key plainly (the key syntax rule sits on the parent).
            "x-kubernetes-validations": [
                cel_rule(
                    f"self.all(k, size(k) <= {MAX_LABEL_KEY})",
                    f"label keys must be at most {MAX_LABEL_KEY} characters",
                )
            ]
        },
    ),
]
