"""The SpsProfile's label selector: Kubernetes' own (matchLabels, matchExpressions) with
its rules checked at admission and by the model."""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field, model_validator

from sps_operator.api.validation import (
    MAX_LABEL_KEY,
    MSG_EXPRESSION_KEY,
    MSG_EXPRESSION_VALUE,
    MSG_EXPRESSION_VALUES_FORBIDDEN,
    MSG_EXPRESSION_VALUES_REQUIRED,
    MSG_MATCH_LABELS_KEY,
    MSG_MATCH_LABELS_VALUE,
    MSG_SELECTOR_EMPTY,
    NONEMPTY_LABEL_VALUE_PATTERN,
    ApiModel,
    LabelMap,
    LabelValue,
    cel_label_key,
    cel_map_rules,
    cel_rule,
    cel_string,
    check,
    check_label_map,
    full_match,
    label_key_ok,
)


class LabelSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


class LabelSelectorRequirement(ApiModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(cel_label_key("self.key"), MSG_EXPRESSION_KEY),
                cel_rule(
                    "!(self.operator in ['In', 'NotIn']) || "
                    "(has(self.values) && size(self.values) > 0)",
                    MSG_EXPRESSION_VALUES_REQUIRED,
                ),
                cel_rule(
                    "!(self.operator in ['Exists', 'DoesNotExist']) || "
                    "!has(self.values) || size(self.values) == 0",
                    MSG_EXPRESSION_VALUES_FORBIDDEN,
                ),
                cel_rule(
                    "!has(self.values) || "
                    f"self.values.all(v, v.matches({cel_string(NONEMPTY_LABEL_VALUE_PATTERN)}))",
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
        check(label_key_ok(self.key), MSG_EXPRESSION_KEY)
        if self.operator in (LabelSelectorOperator.IN, LabelSelectorOperator.NOT_IN):
            check(bool(self.values), MSG_EXPRESSION_VALUES_REQUIRED)
        else:
            check(not self.values, MSG_EXPRESSION_VALUES_FORBIDDEN)
        for value in self.values or []:
            check(full_match(NONEMPTY_LABEL_VALUE_PATTERN, value), MSG_EXPRESSION_VALUE)
        return self


class LabelSelector(ApiModel):
    """A standard label selector; picks Deployments in the SpsProfile's namespace. Keys,
    values and operators are checked at admission, so the operator's LIST never fails on
    them."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel_rule(
                    "(has(self.matchLabels) && size(self.matchLabels) > 0) || "
                    "(has(self.matchExpressions) && size(self.matchExpressions) > 0)",
                    MSG_SELECTOR_EMPTY,
                ),
                *cel_map_rules("matchLabels", MSG_MATCH_LABELS_KEY, MSG_MATCH_LABELS_VALUE),
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
        check_label_map(self.match_labels, MSG_MATCH_LABELS_KEY, MSG_MATCH_LABELS_VALUE)
        return self
