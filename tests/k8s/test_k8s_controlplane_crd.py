"""CRDs on the local control plane: structural schema, CEL rules, pruning, status; and the
real SpsProfile CRD as generated from the models, whose admission must decide exactly what
the pydantic models decide, with the same messages (issue 9)."""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient
from pydantic import ValidationError

from sps_operator.api import limits
from sps_operator.api.crd import build_crd
from sps_operator.api.models import SpsProfile
from sps_operator.api.spec import MSG_MAX_CONCURRENT
from sps_operator.api.status import SpsProfileStatus
from sps_operator.api.validation import MAX_PROFILE_NAME, MSG_PROFILE_NAME
from sps_operator.constants import API_VERSION
from waiting import wait_for

pytestmark = pytest.mark.k8s

GROUP = "cptest.sps.dev"


def _crd(plural: str, kind: str) -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "required": ["minReplicas", "maxReplicas"],
        "properties": {
            "minReplicas": {"type": "integer", "minimum": 0},
            "maxReplicas": {"type": "integer"},
            "mode": {"type": "string", "enum": ["Diagonal", "Additive"]},
        },
        "x-kubernetes-validations": [
            {
                "rule": "self.minReplicas <= self.maxReplicas",
                "message": "minReplicas must not exceed maxReplicas",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": spec_schema,
                                "status": {
                                    "type": "object",
                                    "properties": {"phase": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


@contextlib.contextmanager
def _installed(k8s_api: ApiClient, body: dict[str, Any]) -> Iterator[None]:
    """Create a CRD, wait until it is Established, delete it afterwards."""
    ext = client.ApiextensionsV1Api(k8s_api)
    ext.create_custom_resource_definition(body)
    name = body["metadata"]["name"]

    def established() -> bool:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conds)

    wait_for(f"CRD {name} Established", established, timeout=30, interval=0.1)
    try:
        yield
    finally:
        ext.delete_custom_resource_definition(name)


@pytest.fixture
def crd(k8s_api: ApiClient) -> Iterator[tuple[str, str]]:
    """A fresh CRD (unique name, so reruns in one session never collide); deleted after."""
    suffix = secrets.token_hex(3)
    plural, kind = f"widgets{suffix}", f"Widget{suffix}"
    with _installed(k8s_api, _crd(plural, kind)):
        yield plural, kind


def _message(err: client.ApiException) -> str:
    message: str = json.loads(err.body)["message"]
    return message


def _obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def test_k8s_controlplane_crd_schema_and_cel(
    k8s_api: ApiClient, namespace: str, crd: tuple[str, str]
) -> None:
    plural, kind = crd
    custom = client.CustomObjectsApi(k8s_api)

    def create(name: str, spec: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = custom.create_namespaced_custom_object(
            GROUP, "v1", namespace, plural, _obj(kind, name, spec)
        )
        return obj

    # CEL rule across two fields: rejected with the rule's message.
    with pytest.raises(client.ApiException) as cel:
        create("bad-range", {"minReplicas": 3, "maxReplicas": 1})
    assert cel.value.status == 422
    assert "minReplicas must not exceed maxReplicas" in _message(cel.value)

    # Structural schema: wrong type, value outside the enum, missing required field.
    with pytest.raises(client.ApiException) as typed:
        create("bad-type", {"minReplicas": "three", "maxReplicas": 1})
    assert typed.value.status == 422
    assert "spec.minReplicas" in _message(typed.value)
    with pytest.raises(client.ApiException) as enum:
        create("bad-enum", {"minReplicas": 0, "maxReplicas": 1, "mode": "Sideways"})
    assert 'Unsupported value: "Sideways"' in _message(enum.value)
    with pytest.raises(client.ApiException) as required:
        create("missing", {"minReplicas": 0})
    assert "spec.maxReplicas: Required value" in _message(required.value)

    # A valid object is stored, with unknown fields pruned by the structural schema.
    stored = create("good", {"minReplicas": 1, "maxReplicas": 2, "unknownField": "x"})
    assert stored["spec"] == {"minReplicas": 1, "maxReplicas": 2}


def test_k8s_controlplane_crd_status_subresource(
    k8s_api: ApiClient, namespace: str, crd: tuple[str, str]
) -> None:
    plural, kind = crd
    custom = client.CustomObjectsApi(k8s_api)
    body = _obj(kind, "w", {"minReplicas": 0, "maxReplicas": 1})
    body["status"] = {"phase": "Ignored"}
    created = custom.create_namespaced_custom_object(GROUP, "v1", namespace, plural, body)
    # With the status subresource, status written through the main resource is dropped...
    assert "status" not in created or created["status"].get("phase") is None
    generation = created["metadata"]["generation"]
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, "v1", namespace, plural, "w", {"status": {"phase": "Ready"}}
    )
    # ...and status writes go through /status without bumping the generation.
    assert patched["status"]["phase"] == "Ready"
    assert patched["metadata"]["generation"] == generation


# --------------------------------------------------------------------------- SpsProfile

SPS_GROUP = "apitest.sps.dev"


@pytest.fixture
def sps_crd(k8s_api: ApiClient) -> Iterator[tuple[str, str]]:
    """The generated SpsProfile CRD, schema and CEL rules unchanged, under a test group and a
    unique name (the real `spsprofiles.sps.dev` belongs to the chart and e2e tests)."""
    body = copy.deepcopy(build_crd())
    suffix = secrets.token_hex(3)
    plural, kind = f"spsprofiles{suffix}", f"SpsProfile{suffix}"
    body["metadata"]["name"] = f"{plural}.{SPS_GROUP}"
    body["spec"]["group"] = SPS_GROUP
    body["spec"]["names"] = {
        "plural": plural,
        "singular": kind.lower(),
        "kind": kind,
        "listKind": f"{kind}List",
    }
    with _installed(k8s_api, body):
        yield plural, kind


SELECTOR = {"matchLabels": {"app": "sglang"}}


def _sps(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{SPS_GROUP}/{API_VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"selector": SELECTOR, **spec},
    }


def _pydantic_verdict(body: dict[str, Any]) -> tuple[bool, str | None]:
    """(admitted, our message or None when pydantic's own bound message applies)."""
    try:
        SpsProfile.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        ours = first["type"] == "value_error"
        return False, str(first["msg"]).removeprefix("Value error, ") if ours else None
    return True, None


# (id, spec, a fragment the refusal must contain; None: admitted). The API server's
# message must also contain pydantic's exact message whenever that is one of ours.
SPEC_CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("defaults", {}, None),
    # Cron: issue 9 item 10, and the grammar around it.
    ("cron-minute-75", {"refresh": {"schedule": "75 3 * * 0"}}, "minute 75 is out of range 0-59"),
    ("cron-ok", {"refresh": {"schedule": "0 3 * * 0"}}, None),
    ("cron-padded", {"refresh": {"schedule": "00 03 * * sun"}}, None),
    ("cron-names", {"refresh": {"schedule": "*/15 1-5 1,15 JAN-jun mon-fri"}}, None),
    ("cron-steps", {"refresh": {"schedule": "0-59/7 0-23/2 1-31/3 1-12/5 0-7/2"}}, None),
    ("cron-macro", {"refresh": {"schedule": "@weekly"}}, None),
    ("cron-hour-24", {"refresh": {"schedule": "0 24 * * *"}}, "hour 24 is out of range 0-23"),
    ("cron-dom-0", {"refresh": {"schedule": "0 3 0 * *"}}, "day-of-month 0 is out of range"),
    ("cron-month-13", {"refresh": {"schedule": "0 3 * 13 *"}}, "month 13 is out of range 1-12"),
    ("cron-weekday-8", {"refresh": {"schedule": "0 3 * * 8"}}, "weekday 8 is out of range 0-7"),
    ("cron-list", {"refresh": {"schedule": "5,75 * * * *"}}, "minute '5,75' is not valid"),
    ("cron-reversed", {"refresh": {"schedule": "0 3 * * mon-sun"}}, "weekday 'mon-sun'"),
    ("cron-step-0", {"refresh": {"schedule": "*/0 * * * *"}}, "minute '*/0' is not valid"),
    ("cron-quartz", {"refresh": {"schedule": "0 3 ? * *"}}, "day-of-month '?' is not valid"),
    ("cron-never", {"refresh": {"schedule": "0 0 30 2 *"}}, "never occurs in month 2"),
    ("cron-never-31", {"refresh": {"schedule": "0 0 31 4,jun *"}}, "never occurs in month 4,jun"),
    ("cron-or-days", {"refresh": {"schedule": "0 0 30 2 1"}}, None),
    ("cron-4-fields", {"refresh": {"schedule": "0 3 * *"}}, "cron expression of 5 fields"),
    ("cron-newline", {"refresh": {"schedule": "0 3 * * *\n"}}, "cron expression of 5 fields"),
    ("cron-reboot", {"refresh": {"schedule": "@reboot"}}, "cron expression of 5 fields"),
    # Selectors: issue 9 item 6 (the API answered the operator's LIST with 400).
    (
        "in-empty",
        {"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}},
        "In and NotIn need at least one value",
    ),
    (
        "notin-none",
        {"selector": {"matchExpressions": [{"key": "a", "operator": "NotIn"}]}},
        "In and NotIn need at least one value",
    ),
    (
        "exists-values",
        {"selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
        "Exists and DoesNotExist take no values",
    ),
    (
        "expr-key",
        {"selector": {"matchExpressions": [{"key": "a b", "operator": "Exists"}]}},
        "key must be a label key",
    ),
    (
        "expr-value",
        {"selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x,y"]}]}},
        "every value must be a label value",
    ),
    ("labels-key", {"selector": {"matchLabels": {"-a": "x"}}}, "every key must be a label key"),
    (
        "labels-prefix-254",
        {"selector": {"matchLabels": {"p" * 254 + "/n": "x"}}},
        "every key must be a label key",
    ),
    ("labels-prefix-253", {"selector": {"matchLabels": {"p" * 253 + "/n": ""}}}, None),
    (
        "labels-value",
        {"selector": {"matchLabels": {"a": "x y"}}},
        "every value must be a label value",
    ),
    ("labels-32k", {"selector": {"matchLabels": {"a": "v" * 32768}}}, "63"),
    # One-probe sweeps (item 5) and sweep size (item 15).
    ("one-batch", {"table": {"sweep": {"batchSizes": [8]}}}, "at least 2 distinct batch sizes"),
    ("same-batch", {"table": {"sweep": {"batchSizes": [8, 8]}}}, "at least 2 distinct batch sizes"),
    ("max-batch-1", {"table": {"sweep": {"maxBatchSize": 1}}}, "maxBatchSize must be at least 2"),
    ("two-batches", {"table": {"sweep": {"batchSizes": [8, 16]}}}, None),
    (
        "18x8x10",
        {
            "table": {
                "kind": "Additive",
                "sweep": {"batchSizes": list(range(1, 19)), "fracs": [0.125] * 8, "repeats": 10},
            }
        },
        "at most 256 cells",
    ),
    ("ci-width-0", {"table": {"sweep": {"ciRelWidth": 0.0}}}, "ciRelWidth"),
    ("vocab-2000", {"table": {"sweep": {"vocabSize": 2000}}}, "vocabSize"),
    # tablePath (item 15).
    ("path-etc", {"rollout": {"tablePath": "/etc/table.json"}}, "mounted on /etc and hide"),
    ("path-root", {"rollout": {"tablePath": "/table.json"}}, "mounted on / and hide"),
    (
        "path-usr-local",
        {"rollout": {"tablePath": "/usr/local/t.json"}},
        "mounted on /usr/local and",
    ),
    ("path-dots", {"rollout": {"tablePath": "/etc/sps/../t.json"}}, "'.' or '..' path segments"),
    ("path-slashes", {"rollout": {"tablePath": "/etc/sps//t.json"}}, "absolute file path"),
    ("path-chars", {"rollout": {"tablePath": "/etc/sps/$(x).json"}}, "absolute file path"),
    ("path-ok", {"rollout": {"tablePath": "/etc/sps/table/table.json"}}, None),
    ("path-opt-sub", {"rollout": {"tablePath": "/opt/sps/t.json"}}, None),
    # Every other string has a bound and, where there is one, a syntax (item 8).
    ("image-bad", {"job": {"image": "ghcr.io/x/y:1 ; rm -rf /"}}, "image reference"),
    ("image-upper", {"job": {"image": "UPPER/case"}}, "image reference"),
    ("image-ok", {"job": {"image": "localhost:5000/sps/op@sha256:" + "a" * 64}}, None),
    ("image-32k", {"job": {"image": "x" * 32768}}, "512"),
    ("sa-bad", {"job": {"serviceAccountName": "Bad_Name"}}, "ServiceAccount name"),
    (
        "node-selector",
        {"job": {"nodeSelector": {"pool": "a b"}}},
        "every value must be a label value",
    ),
    (
        "quantity-long",
        {"job": {"resources": {"limits": {"cpu": "1" * 65}}}},
        "at most 64 characters",
    ),
    ("quantity-ok", {"job": {"resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}}, None),
    ("toleration-op", {"job": {"tolerations": [{"operator": "Maybe"}]}}, "Maybe"),
    ("container", {"serverContainer": "SGLang"}, "container name"),
    ("gpu-label", {"gpuProductLabel": "nvidia.com/"}, "gpuProductLabel must be a label key"),
    ("token-32k", {"refresh": {"token": "t" * 32768}}, "253"),
    ("gates", {"gates": {"maxErrorBound": 0.05, "maxRmsMs": 0.5}}, None),
    ("gates-bound", {"gates": {"maxErrorBound": 2}}, "maxErrorBound"),
    # rollout.maxConcurrent: before, the API server took any of these (only the operator
    # refused them, as a condition after the fact).
    *[
        (f"max-concurrent-{value!r}", {"rollout": {"maxConcurrent": value}}, MSG_MAX_CONCURRENT)
        for value in ("0%", "abc", 0, -2, "101%", "000%", "25", "5 %", "١%", 100_001, 3.0)
    ],
    ("max-concurrent-2.5", {"rollout": {"maxConcurrent": 2.5}}, "must be of type integer,string"),
    *[
        (f"max-concurrent-{value!r}", {"rollout": {"maxConcurrent": value}}, None)
        for value in (1, 3, 100_000, "1%", "7%", "007%", "25%", "100%")
    ],
]


def _sweep_cell_cases() -> list[tuple[str, dict[str, Any], str | None]]:
    """The CEL formula for a tapered sweep's size, at both sides of the cell limit, for
    maximum batch sizes below, at and above 256 (in and between the tapered values)."""
    cases: list[tuple[str, dict[str, Any], str | None]] = []
    for m in (2, 3, 100, 224, 255, 256, 300, 320, 4096):
        count = limits.tapered_sweep_size(m)
        fracs = min(limits.FRACS_MAX_COUNT, limits.MAX_SWEEP_CELLS // count)
        repeats = limits.MAX_SWEEP_CELLS // (count * fracs)
        ok = {"maxBatchSize": m, "fracs": [0.5] * fracs, "repeats": repeats}
        cases.append((f"tapered-{m}-fits", {"table": {"kind": "Additive", "sweep": ok}}, None))
        over = {**ok, "repeats": repeats + 1} if repeats < limits.REPEATS_MAX else None
        if over is None and fracs < limits.FRACS_MAX_COUNT:
            over = {**ok, "fracs": [0.5] * (fracs + 1)}
        if over is not None:
            body = {"table": {"kind": "Additive", "sweep": over}}
            cases.append((f"tapered-{m}-over", body, "at most 256 cells"))
    return cases


def test_k8s_controlplane_crd_sps_admission_is_pydantic_validation(
    k8s_api: ApiClient, namespace: str, sps_crd: tuple[str, str]
) -> None:
    plural, kind = sps_crd
    custom = client.CustomObjectsApi(k8s_api)
    failures: list[str] = []
    for i, (case, spec, fragment) in enumerate(SPEC_CASES + _sweep_cell_cases()):
        body = _sps(kind, f"c{i}", spec)
        try:
            custom.create_namespaced_custom_object(SPS_GROUP, API_VERSION, namespace, plural, body)
            api_message = None
        except client.ApiException as err:
            assert err.status == 422, (case, err.body)
            api_message = _message(err)
        admitted, ours = _pydantic_verdict(body)
        if (api_message is None) != admitted:
            failures.append(f"{case}: API {api_message!r}, pydantic admitted={admitted} {ours!r}")
        elif api_message is not None:
            if ours is not None and ours not in api_message:
                failures.append(f"{case}: API {api_message!r} lacks pydantic's {ours!r}")
            if fragment is None or fragment not in api_message:
                failures.append(f"{case}: expected {fragment!r}, API said {api_message!r}")
        elif fragment is not None:
            failures.append(f"{case}: admitted, expected a refusal with {fragment!r}")
    assert not failures, "\n".join(failures)


def test_k8s_controlplane_crd_sps_name_bounds_derived_names(
    k8s_api: ApiClient, namespace: str, sps_crd: tuple[str, str]
) -> None:
    plural, kind = sps_crd
    custom = client.CustomObjectsApi(k8s_api)

    def create(body: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = custom.create_namespaced_custom_object(
            SPS_GROUP, API_VERSION, namespace, plural, body
        )
        return obj

    longest = "p" * MAX_PROFILE_NAME
    assert create(_sps(kind, longest, {}))["metadata"]["name"] == longest
    for body in (
        _sps(kind, "p" * (MAX_PROFILE_NAME + 1), {}),
        # generateName's random suffix is added before validation, and counts.
        {**_sps(kind, "", {}), "metadata": {"generateName": "g" * (MAX_PROFILE_NAME - 2)}},
    ):
        with pytest.raises(client.ApiException) as info:
            create(body)
        assert info.value.status == 422
        assert MSG_PROFILE_NAME in _message(info.value)
        assert not _pydantic_verdict({**body, "metadata": {"name": "p" * 41}})[0]


def _selector_string(selector: dict[str, Any]) -> str:
    """The string form of a label selector (what the operator passes to LIST)."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], ",".join(expr.get("values") or [])
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})"}.get(
                op, key if op == "Exists" else f"!{key}"
            )
        )
    return ",".join(parts)


def test_k8s_controlplane_crd_sps_admitted_selectors_can_be_listed(
    k8s_api: ApiClient, namespace: str, sps_crd: tuple[str, str]
) -> None:
    """Whatever selector admission lets through, the API server takes in a LIST; keys and
    values it refuses are ones LIST answers with 400 (issue 9 item 6)."""
    plural, kind = sps_crd
    custom = client.CustomObjectsApi(k8s_api)
    apps = client.AppsV1Api(k8s_api)
    # (selector, admitted, LIST status of its string form when refused: 400, or None when
    # the string form would silently mean something else, e.g. `tier in ()` selects nothing)
    selectors: list[tuple[dict[str, Any], bool, int | None]] = [
        (
            {"matchLabels": {"app": "s", "app.kubernetes.io/name": "", "p" * 253 + "/n": "v"}},
            True,
            None,
        ),
        (
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b-c.d_e"]}]},
            True,
            None,
        ),
        ({"matchExpressions": [{"key": "x/y", "operator": "NotIn", "values": ["z"]}]}, True, None),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": []}]}, True, None),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, True, None),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": []}]}, False, None),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": [""]}]}, False, None),
        (
            {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["x"]}]},
            False,
            None,
        ),
        ({"matchLabels": {"a b": "x"}}, False, 400),
        ({"matchLabels": {"app": "-x"}}, False, 400),
        ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["x y"]}]}, False, 400),
    ]
    for i, (selector, admitted, refused_list_status) in enumerate(selectors):
        body = _sps(kind, f"s{i}", {})
        body["spec"]["selector"] = selector
        assert _pydantic_verdict(body)[0] is admitted, selector
        try:
            custom.create_namespaced_custom_object(SPS_GROUP, API_VERSION, namespace, plural, body)
        except client.ApiException as err:
            assert not admitted and err.status == 422, err.body
            if refused_list_status is not None:
                with pytest.raises(client.ApiException) as listed:
                    apps.list_namespaced_deployment(
                        namespace, label_selector=_selector_string(selector)
                    )
                assert listed.value.status == refused_list_status
            continue
        assert admitted, selector
        apps.list_namespaced_deployment(namespace, label_selector=_selector_string(selector))


def test_k8s_controlplane_crd_sps_status_text_bounds_fit_what_the_operator_writes(
    k8s_api: ApiClient, namespace: str, sps_crd: tuple[str, str]
) -> None:
    """Job-supplied status text has a schema bound (a 32 KiB progress is refused), and the
    status models cut text to that bound, so what the operator writes is always taken."""
    plural, kind = sps_crd
    custom = client.CustomObjectsApi(k8s_api)
    custom.create_namespaced_custom_object(
        SPS_GROUP, API_VERSION, namespace, plural, _sps(kind, "st", {})
    )
    run = {
        "name": "r",
        "job": "j",
        "phase": "Diagonal",
        "gpuProduct": "H100",
        "fingerprint": "f",
        "target": "d",
        "trigger": "NoTable",
        "startedAt": "2026-01-01T00:00:00Z",
    }
    failure = {"run": "r", "reason": "Failed", "at": "2026-01-01T00:00:00Z"}
    huge = "x" * 32768

    def patch(status: dict[str, Any]) -> None:
        custom.patch_namespaced_custom_object_status(
            SPS_GROUP, API_VERSION, namespace, plural, "st", {"status": status}
        )

    for status in (
        {"currentRun": {**run, "progress": huge}},
        {"lastFailure": {**failure, "message": huge}},
    ):
        with pytest.raises(client.ApiException) as info:
            patch(status)
        assert info.value.status == 422 and "Too long" in _message(info.value)
    written = SpsProfileStatus.model_validate(
        {"currentRun": {**run, "progress": huge}, "lastFailure": {**failure, "message": huge}}
    )
    patch(written.to_k8s())
    stored = custom.get_namespaced_custom_object(SPS_GROUP, API_VERSION, namespace, plural, "st")
    assert len(stored["status"]["currentRun"]["progress"]) == limits.MAX_PROGRESS_LENGTH
    assert len(stored["status"]["lastFailure"]["message"]) == limits.MAX_MESSAGE_LENGTH


def test_k8s_controlplane_crd_sps_refusal_names_the_field_of_a_one_field_rule(
    k8s_api: ApiClient, namespace: str, sps_crd: tuple[str, str]
) -> None:
    """The CEL rules' fieldPath and reason reach the client: a bad `spec.job.image` is
    refused at `spec.job.image` with FieldValueInvalid (before: at `spec.job`)."""
    plural, kind = sps_crd
    custom = client.CustomObjectsApi(k8s_api)
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object(
            SPS_GROUP, API_VERSION, namespace, plural,
            _sps(kind, "bad-image", {"job": {"image": "Not An Image!"}}),
        )  # fmt: skip
    assert info.value.status == 422
    causes = json.loads(info.value.body)["details"]["causes"]
    assert {"reason": "FieldValueInvalid", "field": "spec.job.image"} in [
        {"reason": c.get("reason"), "field": c.get("field")} for c in causes
    ], causes
    assert "spec.job.image:" in _message(info.value)


def test_k8s_controlplane_crd_sps_max_concurrent_is_refused_at_its_field(
    k8s_api: ApiClient, namespace: str, sps_crd: tuple[str, str]
) -> None:
    """`kubectl apply` of a maxConcurrent that is neither a count nor a share is refused at
    `spec.rollout.maxConcurrent`, with the message the operator's own check gives; text
    longer than any share is refused by the schema's bound."""
    plural, kind = sps_crd
    custom = client.CustomObjectsApi(k8s_api)
    long = "9" * 5000 + "%"
    for i, value in enumerate(["0%", 0, "abc", long]):
        with pytest.raises(client.ApiException) as info:
            custom.create_namespaced_custom_object(
                SPS_GROUP, API_VERSION, namespace, plural,
                _sps(kind, f"mc{i}", {"rollout": {"maxConcurrent": value}}),
            )  # fmt: skip
        assert info.value.status == 422
        causes = json.loads(info.value.body)["details"]["causes"]
        # (with a schema error, the API server adds that it checked no CEL rule: no field)
        fields = {(c.get("field"), c.get("reason")) for c in causes if c.get("field") != "<nil>"}
        reason = "FieldValueTooLong" if value == long else "FieldValueInvalid"
        assert fields == {("spec.rollout.maxConcurrent", reason)}, causes
        words = "Too long: may not be more than 4 bytes" if value == long else MSG_MAX_CONCURRENT
        assert words in _message(info.value)
