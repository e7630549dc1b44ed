"""Generate the SpsProfile CRD from the pydantic models (`sps-operator crd`).

Pydantic's JSON schema is turned into a Kubernetes *structural* schema: `$ref`s
are inlined, `Optional[X]` becomes X (absence means unset), `int | str` becomes
`x-kubernetes-int-or-string`, titles and `additionalProperties: false` go (the
API server prunes unknown fields instead), CEL rules stay.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from sps_operator.api.models import ROOT_RULES
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.api.status import SpsProfileStatus
from sps_operator.constants import API_GROUP, API_VERSION, KIND, PLURAL

SHORT_NAMES = ["sps"]
CATEGORIES = ["sglang", "sps"]
CRD_NAME = f"{PLURAL}.{API_GROUP}"

PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "GPU", "type": "string", "jsonPath": ".status.gpuProduct"},
    {"name": "Table", "type": "string", "jsonPath": ".status.liveTable"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    # `kubectl get sps -o wide`: what Ready's reason means for this profile.
    {
        "name": "Message",
        "type": "string",
        "priority": 1,
        "jsonPath": '.status.conditions[?(@.type=="Ready")].message',
    },
]

_DROP_KEYS = {"title"}


def _is_null(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null"


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Convert one pydantic JSON-schema node (recursively) into a structural schema node."""
    node = dict(schema)
    if "$ref" in node:
        ref = node.pop("$ref")
        target = defs[ref.split("/")[-1]]
        # Field-level keys (description, default) win over the referenced definition's.
        node = {**target, **node}
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if not _is_null(o)]
        if node.get("default", 0) is None:
            node.pop("default")
        types = sorted(structural(o, defs).get("type", "") for o in options)
        if len(options) == 1:
            inner = structural(options[0], defs)
            # The field's own keys (description, extras) override the inner ones.
            node = {**inner, **node}
        elif types == ["integer", "string"]:
            node["x-kubernetes-int-or-string"] = True
        else:
            raise ValueError(f"cannot express anyOf {options!r} as a structural schema")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "additionalProperties" and value is False:
            continue
        if key == "description" and isinstance(value, str):
            out[key] = " ".join(value.split())
        elif key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = structural(value, defs)
        elif key == "$defs":
            continue
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020 numbers -> OpenAPI v3.0 bounds with boolean flags.
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        else:
            out[key] = value
    if "x-kubernetes-int-or-string" in out:
        out.pop("type", None)
    elif "type" not in out and "properties" in out:
        out["type"] = "object"
    if out.get("type") == "array":
        # Server-side apply replaces a list whole unless a model says it is a map or a set.
        out.setdefault("x-kubernetes-list-type", "atomic")
    if "x-kubernetes-validations" in out:
        out["x-kubernetes-validations"] = [
            _located(rule, out.get("properties", {})) for rule in out["x-kubernetes-validations"]
        ]
    return out


_SELF_FIELD = re.compile(r"\bself\.([A-Za-z_][A-Za-z0-9_]*)")


def _located(rule: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """A CEL rule with the `reason` and `fieldPath` the API server reports a refusal with:
    a rule that reads one field of its object is about that field (so `kubectl apply` and
    `status.details.causes` name `spec.job.image`, not `spec.job`); a rule over several
    fields stays on the object. A model's own reason or fieldPath wins."""
    out = {"reason": "FieldValueInvalid", **rule}
    fields = set(_SELF_FIELD.findall(str(rule.get("rule", ""))))
    if "fieldPath" not in out and len(fields) == 1 and next(iter(fields)) in properties:
        out["fieldPath"] = f".{next(iter(fields))}"
    return out


def model_schema(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return structural(raw, defs)


def build_crd() -> dict[str, Any]:
    spec_schema = model_schema(SpsProfileSpec)
    status_schema = model_schema(SpsProfileStatus)
    root: dict[str, Any] = {
        "type": "object",
        "description": "SpsProfile keeps a current SGLang DSpark SPS cost table under every "
        "Deployment it selects: it profiles per GPU product, fits, gates, publishes and rolls out.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
    }
    root["x-kubernetes-validations"] = [_located(r, root["properties"]) for r in ROOT_RULES]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/name": "sps-operator"},
        },
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


class _NoAliasDumper(yaml.SafeDumper):
    """Write repeated sub-schemas out in full (anchors confuse readers and some tools)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_crd() -> str:
    header = "# Generated by `sps-operator crd` from sps_operator.api.models. Do not edit.\n"
    body = yaml.dump(
        build_crd(), Dumper=_NoAliasDumper, sort_keys=False, width=100, allow_unicode=True
    )
    return header + body


# The chart's CRD template (charts/sps-operator/templates/crd-spsprofiles.yaml): the same
# spec, behind `crds.enabled`, kept on uninstall with `crds.keep` (as cert-manager does), so
# `helm upgrade` upgrades it and a vendored chart needs no symlink.
CHART_TEMPLATE_HEAD = """\
{{- /* Generated by `sps-operator crd --helm` from sps_operator.api.models. Do not edit. */}}
{{- if .Values.crds.enabled }}
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %s
  labels:
    {{- include "sps-operator.labels" . | nindent 4 }}
  {{- if .Values.crds.keep }}
  annotations:
    # helm uninstall leaves the CRD, and so every SpsProfile, in place.
    helm.sh/resource-policy: keep
  {{- end }}
"""


def render_crd_template() -> str:
    """The CRD as the chart's template: its spec verbatim, Go template actions escaped."""
    spec = yaml.dump(
        {"spec": build_crd()["spec"]},
        Dumper=_NoAliasDumper,
        sort_keys=False,
        width=100,
        allow_unicode=True,
    )
    spec = spec.replace("{{", '{{ "{{" }}')  # literal braces in a description stay text
    return CHART_TEMPLATE_HEAD % CRD_NAME + spec + "{{- end }}\n"
