"""The profiling Job's overrides in the spec (`spec.job`): placement, resources, labels."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from sps_operator.api.validation import (
    DNS_SUBDOMAIN_PATTERN,
    IMAGE_PATTERN,
    LABEL_VALUE_PATTERN,
    MAX_IMAGE,
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MSG_IMAGE,
    MSG_JOB_LABEL_KEY,
    MSG_JOB_LABEL_VALUE,
    MSG_NODE_SELECTOR_KEY,
    MSG_NODE_SELECTOR_VALUE,
    MSG_PRIORITY_CLASS,
    MSG_RESOURCE_NAME,
    MSG_RESOURCE_QUANTITY,
    MSG_SERVICE_ACCOUNT,
    MSG_TOLERATION_KEY,
    MSG_TOLERATION_VALUE,
    ApiModel,
    LabelMap,
    cel_label_key,
    cel_map_rules,
    cel_rule,
    cel_string,
    check,
    check_label_map,
    full_match,
    label_key_ok,
)


class Toleration(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    f"!has(self.key) || size(self.key) == 0 || ({cel_label_key('self.key')})",
                    MSG_TOLERATION_KEY,
                ),
                cel_rule(
                    f"!has(self.value) || self.value.matches({cel_string(LABEL_VALUE_PATTERN)})",
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
        check(not self.key or label_key_ok(self.key), MSG_TOLERATION_KEY)
        check(
            self.value is None or full_match(LABEL_VALUE_PATTERN, self.value), MSG_TOLERATION_VALUE
        )
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
                cel_rule(f"self.all(k, size(k) <= {MAX_RESOURCE_NAME})", MSG_RESOURCE_NAME),
                cel_rule(
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
                check(len(name) <= MAX_RESOURCE_NAME, MSG_RESOURCE_NAME)
                check(
                    isinstance(quantity, int) or len(quantity) <= MAX_QUANTITY,
                    MSG_RESOURCE_QUANTITY,
                )
        return self


class JobOverrides(ApiModel):
    """Overrides for the profiling Job (the profiler container and the pod)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    f"!has(self.image) || self.image.matches({cel_string(IMAGE_PATTERN)})",
                    MSG_IMAGE,
                ),
                cel_rule(
                    "!has(self.serviceAccountName) || "
                    f"self.serviceAccountName.matches({cel_string(DNS_SUBDOMAIN_PATTERN)})",
                    MSG_SERVICE_ACCOUNT,
                ),
                *cel_map_rules("nodeSelector", MSG_NODE_SELECTOR_KEY, MSG_NODE_SELECTOR_VALUE),
                *cel_map_rules("labels", MSG_JOB_LABEL_KEY, MSG_JOB_LABEL_VALUE),
                cel_rule(
                    "!has(self.priorityClassName) || "
                    f"self.priorityClassName.matches({cel_string(DNS_SUBDOMAIN_PATTERN)})",
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
        check(self.image is None or full_match(IMAGE_PATTERN, self.image), MSG_IMAGE)
        check(
            self.service_account_name is None
            or full_match(DNS_SUBDOMAIN_PATTERN, self.service_account_name),
            MSG_SERVICE_ACCOUNT,
        )
        check_label_map(self.node_selector, MSG_NODE_SELECTOR_KEY, MSG_NODE_SELECTOR_VALUE)
        check_label_map(self.labels, MSG_JOB_LABEL_KEY, MSG_JOB_LABEL_VALUE)
        check(
            self.priority_class_name is None
            or full_match(DNS_SUBDOMAIN_PATTERN, self.priority_class_name),
            MSG_PRIORITY_CLASS,
        )
        return self
