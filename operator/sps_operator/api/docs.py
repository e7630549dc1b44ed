"""Render `docs/api.md` (the SpsProfile API reference) from the pydantic models.

`sps-operator crd --docs > docs/api.md`; a unit test keeps the file in sync.
"""

from __future__ import annotations

import inspect
import json
from enum import Enum
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from sps_operator.api import job, label_selector, limits, models, spec, status
from sps_operator.api.crd import CATEGORIES, PRINTER_COLUMNS, SHORT_NAMES
from sps_operator.constants import API_GROUP, API_VERSION, KIND, PLURAL

SPEC_MODELS: list[type[BaseModel]] = [
    spec.SpsProfileSpec,
    label_selector.LabelSelector,
    label_selector.LabelSelectorRequirement,
    spec.TableSpec,
    spec.SweepSpec,
    spec.ServerSpec,
    job.JobOverrides,
    job.Toleration,
    job.ResourceRequirements,
    spec.CapacitySpec,
    spec.RolloutSpec,
    spec.RefreshSpec,
    spec.GatesSpec,
]
STATUS_MODELS: list[type[BaseModel]] = [
    status.SpsProfileStatus,
    status.Condition,
    status.TableRef,
    status.FitQuality,
    status.RunStatus,
    status.RunWaiting,
    status.BorrowRecord,
    status.TargetStatus,
    status.FailureRecord,
    status.CostRecord,
]


def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Union or (origin is not None and type(None) in args):
        inner = [a for a in args if a is not type(None)]
        return " | ".join(_type_name(a) for a in inner)
    if str(origin) == "types.UnionType":
        return " | ".join(_type_name(a) for a in args if a is not type(None))
    if origin is list:
        return f"[]{_type_name(args[0])}"
    if origin is dict:
        return f"map[{_type_name(args[0])}]{_type_name(args[1])}"
    if inspect.isclass(annotation):
        if issubclass(annotation, Enum):
            return " \\| ".join(f"`{m.value}`" for m in annotation)
        if issubclass(annotation, BaseModel):
            return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
        return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(
            annotation, annotation.__name__
        )
    return str(annotation)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return ""
    if field.default is PydanticUndefined:
        return "**required**"
    if field.default is None:
        return ""
    value = field.default.value if isinstance(field.default, Enum) else field.default
    return f"`{json.dumps(value)}`"


def _model_section(model: type[BaseModel]) -> list[str]:
    lines = [f"### {model.__name__}", ""]
    doc = inspect.getdoc(model)
    if doc and model.__doc__:
        lines += [" ".join(doc.split()), ""]
    lines += ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        alias = field.alias or name
        desc = " ".join((field.description or "").split()).replace("|", "\\|")
        lines.append(f"| `{alias}` | {_type_name(field.annotation)} | {_default(field)} | {desc} |")
    extra: Any = model.model_config.get("json_schema_extra")
    rules: list[dict[str, str]] = (
        list(extra.get("x-kubernetes-validations", [])) if isinstance(extra, dict) else []
    )
    if rules:
        lines += ["", "Validation (CEL, checked by the API server):", ""]
        lines += [f"- {rule['message']}" for rule in rules]
    lines.append("")
    return lines


# (bound, what it limits) for the Validation section; values come from api/limits.py.
BOUNDS: list[tuple[str, str]] = [
    ("MAX_PROFILE_NAME", "characters of `metadata.name`"),
    ("BATCH_SIZE_MIN", "smallest batch size (requests per DP rank)"),
    ("BATCH_SIZE_MAX", "largest batch size and `maxBatchSize`"),
    ("BATCH_SIZES_MAX_COUNT", "entries of `batchSizes`"),
    ("MIN_PROBES", "distinct `batchSizes` (and smallest `maxBatchSize`)"),
    ("FRACS_MAX_COUNT", "entries of `fracs`"),
    ("REPEATS_MAX", "`repeats`"),
    ("INPUT_LEN_MAX", "`inputLen`"),
    ("CI_REL_WIDTH_MIN", "smallest `ciRelWidth`"),
    ("CI_REL_WIDTH_MAX", "largest `ciRelWidth`"),
    ("VOCAB_SIZE_MIN", "smallest `vocabSize` (prompt ids are drawn from [1000, vocab - 1000))"),
    ("VOCAB_SIZE_MAX", "largest `vocabSize`"),
    ("MIN_STEADY_STEPS_MAX", "`minSteadySteps`"),
    ("MIN_STEADY_SECONDS_MAX", "`minSteadySeconds`"),
    ("ROUND_TIMEOUT_SECONDS_MIN", "smallest `roundTimeoutSeconds`"),
    ("ROUND_TIMEOUT_SECONDS_MAX", "largest `roundTimeoutSeconds`"),
    ("MAX_SWEEP_CELLS", "batch sizes x fracs (1 for Diagonal) x repeats"),
    ("MAX_PROGRESS_LENGTH", "characters of `status.currentRun.progress` (longer text is cut)"),
    ("MAX_MESSAGE_LENGTH", "characters of status messages from a run (longer text is cut)"),
]


def _validation_section() -> list[str]:
    lines = [
        "## Validation",
        "",
        "Every rule is checked twice with the same message: by the API server at admission "
        "(the CRD's OpenAPI bounds and CEL `x-kubernetes-validations`), and by the operator's "
        "pydantic models when it reads an object. What the API admits, the operator and the "
        "profiler accept: the sweep bounds are the profiler's own (`sps-profiler run` refuses "
        "the same values), from `sps_operator/api/limits.py`. The CEL rules of each type are "
        "listed under it below; at the root of the object:",
        "",
        *(f"- {rule['message']}" for rule in models.ROOT_RULES),
        "",
        "| bound | value | limits |",
        "| --- | --- | --- |",
        *(f"| `{name}` | {getattr(limits, name)} | {what} |" for name, what in BOUNDS),
        "",
    ]
    return lines


def _maturity_section() -> list[str]:
    return [
        "## Maturity",
        "",
        f"`{API_VERSION}`: the API may still change, under these rules until it is `v1beta1`:",
        "",
        "- A field is removed or its meaning changed only in a minor release (0.X.0) that "
        "says so in CHANGELOG.md under **Breaking**, never in a patch release; a field that "
        "goes is deprecated one minor release before (the operator then warns in an event "
        "when a profile sets it).",
        "- New optional fields and new status fields may come in any release; a client must "
        "ignore status fields it does not know.",
        "- Validation only widens within a minor release: what the API server admitted stays "
        "admitted, so a stored profile never becomes invalid on an upgrade.",
        "- Condition types and `reason` values (`kubectl sps explain`) are part of the API: "
        "renamed only as fields are.",
        "",
        "What `v1beta1` will keep: every `v1alpha1` field that is not deprecated by then, with "
        "the same meaning and defaults, served side by side with `v1alpha1` for at least "
        "one minor release (one stored version, a conversion with no loss, since the two "
        "carry the same fields); `v1alpha1` is then deprecated (the API server warns on "
        "each use) and removed no earlier than two minor releases later.",
        "",
        "## Compatibility",
        "",
        "Tested on Kubernetes **v1.36** (v1.36.3: the control plane and the real-node test "
        "bed run this one version), the only version the README claims. Older API servers "
        "that know every CRD feature it uses (CEL `x-kubernetes-validations` with `reason` "
        "and `fieldPath`, typed lists) may work, but nothing below 1.36 is tested. To widen "
        "the claim: build the control plane and node binaries of that "
        "version from the Go module proxy (pin `k8s.io/kubernetes` in the bed's `go.mod` "
        "beside v1.36.3, a second cache key), and run the unit, control-plane and real-node "
        "lanes on it; then the README names the range.",
        "",
    ]


def render_api_docs() -> str:
    lines = [
        "<!-- Generated by `sps-operator crd --docs` from sps_operator.api.models."
        " Do not edit. -->",
        "",
        f"# API reference: `{KIND}` (`{API_GROUP}/{API_VERSION}`)",
        "",
        f"- Resource: `{PLURAL}.{API_GROUP}`, namespaced, status subresource",
        f"- Short names: {', '.join(f'`{s}`' for s in SHORT_NAMES)}; "
        f"categories: {', '.join(f'`{c}`' for c in CATEGORIES)}",
        "- `kubectl get sps` columns: "
        + ", ".join(
            f"{c['name']} (`{c['jsonPath']}`{', with `-o wide`' if c.get('priority') else ''})"
            for c in PRINTER_COLUMNS
        ),
        "",
    ]
    lines += _maturity_section()
    lines += _validation_section()
    lines += ["## Spec", ""]
    for model in SPEC_MODELS:
        lines += _model_section(model)
    lines += ["## Status", ""]
    for model in STATUS_MODELS:
        lines += _model_section(model)
    return "\n".join(lines).rstrip() + "\n"
