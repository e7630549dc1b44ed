"""SpsProfile models: defaults, validation messages, wire form."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sps_operator.api import cron, validation
from sps_operator.api.models import SpsProfile
from sps_operator.api.spec import GatesSpec, SpsProfileSpec
from sps_operator.api.status import (
    Condition,
    FailureRecord,
    FitQuality,
    RunStatus,
    SpsProfileStatus,
    TableRef,
)


def spec(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"selector": {"matchLabels": {"app": "sglang"}}}
    base.update(overrides)
    return base


def test_defaults_are_the_documented_ones() -> None:
    parsed = SpsProfileSpec.model_validate(spec())
    assert parsed.table.kind == "Diagonal"
    assert parsed.server.source == "Clone"
    assert parsed.rollout.mode == "Inject"
    assert parsed.rollout.table_path == "/etc/sps/table/table.json"
    assert parsed.refresh.on_gpu_change is True
    assert parsed.history_limit == 3
    assert parsed.gpu_product_label == "nvidia.com/gpu.product"
    assert parsed.job.active_deadline_seconds == 3600


def test_wire_form_is_camel_case_without_nulls() -> None:
    parsed = SpsProfileSpec.model_validate(
        spec(table={"kind": "Additive", "sweep": {"batchSizes": [1, 2], "fracs": [0.5, 1.0]}})
    )
    wire = parsed.to_k8s()
    assert wire["table"]["sweep"]["batchSizes"] == [1, 2]
    assert "batch_sizes" not in wire["table"]["sweep"]
    assert "maxBatchSize" not in wire["table"]["sweep"]
    assert SpsProfileSpec.model_validate(wire) == parsed


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"selector": {}}, validation.MSG_SELECTOR_EMPTY),
        ({"selector": {"matchLabels": {}}}, validation.MSG_SELECTOR_EMPTY),
        (
            {"table": {"kind": "Additive", "sweep": {"fracs": [0.0, 0.5]}}},
            validation.MSG_FRACS,
        ),
        (
            {"table": {"kind": "Additive", "sweep": {"fracs": [1.5]}}},
            validation.MSG_FRACS,
        ),
        ({"table": {"sweep": {"fracs": [0.5]}}}, validation.MSG_FRACS_DIAGONAL),
        (
            {"table": {"sweep": {"batchSizes": [1, 2], "maxBatchSize": 8}}},
            validation.MSG_BATCH_EXCLUSIVE,
        ),
        ({"server": {"source": "External"}}, validation.MSG_EXTERNAL_URL),
        ({"server": {"url": "http://x:1"}}, validation.MSG_CLONE_URL),
        ({"refresh": {"schedule": "every day"}}, cron.MSG_SHAPE),
        ({"refresh": {"schedule": "0 3 * *"}}, cron.MSG_SHAPE),
        (
            {"refresh": {"schedule": "99 3 * * *"}},
            "refresh.schedule: minute 99 is out of range 0-59",
        ),
        ({"rollout": {"mode": "AnnotateOnly"}}, validation.MSG_ANNOTATE_ONLY_CM),
        ({"rollout": {"tablePath": "relative/table.json"}}, validation.MSG_TABLE_PATH),
    ],
)
def test_invalid_specs_say_what_to_fix(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as info:
        SpsProfileSpec.model_validate(spec(**overrides))
    assert message in str(info.value)


@pytest.mark.parametrize("schedule", ["0 3 * * 0", "*/5 * * * *", "@daily", "0 0 1 jan *"])
def test_valid_schedules_pass(schedule: str) -> None:
    parsed = SpsProfileSpec.model_validate(spec(refresh={"schedule": schedule}))
    assert parsed.refresh.schedule == schedule


def test_unknown_spec_field_is_rejected() -> None:
    with pytest.raises(ValidationError, match="tabel"):
        SpsProfileSpec.model_validate(spec(tabel={"kind": "Diagonal"}))


def test_whole_object_parses_with_status() -> None:
    obj = {
        "apiVersion": "sps.dev/v1alpha1",
        "kind": "SpsProfile",
        "metadata": {"name": "p", "namespace": "ns", "generation": 2},
        "spec": spec(),
        "status": {
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "TableLive",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "futureField": 1,
        },
    }
    parsed = SpsProfile.model_validate(obj)
    assert parsed.status.observed_generation == 1
    assert parsed.status.conditions[0].status == "True"


# --------------------------------------------------------------------------- issue 9


def _error(overrides: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        SpsProfileSpec.model_validate(spec(**overrides))
    return str(info.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        # Selectors the API server would answer with 400 on the operator's LIST.
        (
            {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}},
            validation.MSG_EXPRESSION_VALUES_REQUIRED,
        ),
        (
            {"selector": {"matchExpressions": [{"key": "app", "operator": "NotIn"}]}},
            validation.MSG_EXPRESSION_VALUES_REQUIRED,
        ),
        (
            {
                "selector": {
                    "matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]
                }
            },
            validation.MSG_EXPRESSION_VALUES_FORBIDDEN,
        ),
        (
            {"selector": {"matchExpressions": [{"key": "a b", "operator": "Exists"}]}},
            validation.MSG_EXPRESSION_KEY,
        ),
        (
            {
                "selector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["a,b"]}]
                }
            },
            validation.MSG_EXPRESSION_VALUE,
        ),
        ({"selector": {"matchLabels": {"-app": "x"}}}, validation.MSG_MATCH_LABELS_KEY),
        ({"selector": {"matchLabels": {"a" * 254 + "/n": "x"}}}, validation.MSG_MATCH_LABELS_KEY),
        ({"selector": {"matchLabels": {"app": "sg lang"}}}, validation.MSG_MATCH_LABELS_VALUE),
        # One-probe sweeps.
        ({"table": {"sweep": {"batchSizes": [8]}}}, validation.MSG_ONE_PROBE),
        ({"table": {"sweep": {"batchSizes": [8, 8, 8]}}}, validation.MSG_ONE_PROBE),
        ({"table": {"sweep": {"maxBatchSize": 1}}}, validation.MSG_MAX_BATCH_ONE_PROBE),
        # Sweeps whose rounds cannot fit the result ConfigMap.
        (
            {
                "table": {
                    "kind": "Additive",
                    "sweep": {
                        "batchSizes": list(range(1, 19)),
                        "fracs": [0.125] * 8,
                        "repeats": 10,
                    },
                }
            },
            validation.MSG_SWEEP_CELLS,
        ),
        (
            {"table": {"kind": "Additive", "sweep": {"maxBatchSize": 512, "repeats": 3}}},
            validation.MSG_SWEEP_CELLS,
        ),
        # tablePath must not shadow system directories, nor escape with '..'.
        ({"rollout": {"tablePath": "/table.json"}}, "would be mounted on / and hide"),
        ({"rollout": {"tablePath": "/etc/table.json"}}, "would be mounted on /etc and hide"),
        ({"rollout": {"tablePath": "/usr/local/bin/t.json"}}, "mounted on /usr/local/bin and"),
        ({"rollout": {"tablePath": "/etc/sps/../t.json"}}, validation.MSG_TABLE_PATH_DOTS),
        ({"rollout": {"tablePath": "/etc/sps//t.json"}}, validation.MSG_TABLE_PATH),
        ({"rollout": {"tablePath": "/etc/sps/t.json/"}}, validation.MSG_TABLE_PATH),
        ({"rollout": {"tablePath": "/etc/sps/t $x.json"}}, validation.MSG_TABLE_PATH),
        ({"rollout": {"tablePath": "/etc/" + "a" * 300}}, "at most 255 characters"),
        # Everything else that is text has a bound and a syntax.
        ({"job": {"image": "ghcr.io/x/y:1 ; rm -rf /"}}, validation.MSG_IMAGE),
        ({"job": {"image": "UPPER/case"}}, validation.MSG_IMAGE),
        ({"job": {"image": "x" * 600}}, "at most 512 characters"),
        ({"job": {"serviceAccountName": "Bad_Name"}}, validation.MSG_SERVICE_ACCOUNT),
        ({"job": {"nodeSelector": {"pool": "a b"}}}, validation.MSG_NODE_SELECTOR_VALUE),
        ({"job": {"resources": {"limits": {"cpu": "1" * 65}}}}, validation.MSG_RESOURCE_QUANTITY),
        ({"job": {"tolerations": [{"key": "a b"}]}}, validation.MSG_TOLERATION_KEY),
        ({"job": {"tolerations": [{"operator": "Maybe"}]}}, "Exists"),
        ({"serverContainer": "SGLang"}, validation.MSG_SERVER_CONTAINER),
        ({"gpuProductLabel": "nvidia.com/"}, validation.MSG_GPU_PRODUCT_LABEL),
        ({"refresh": {"token": "t" * 32768}}, "at most 253 characters"),
        ({"gates": {"maxErrorBound": 0}}, "greater than 0"),
        ({"gates": {"maxErrorBound": 1.5}}, "less than or equal to 1"),
    ],
)
def test_what_the_operator_cannot_use_is_refused(overrides: dict[str, Any], message: str) -> None:
    assert message in _error(overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["a"]}]}},
        {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": []}]}},
        {"selector": {"matchLabels": {"app.kubernetes.io/name": "", "a" * 253 + "/n": "v"}}},
        {"table": {"sweep": {"batchSizes": [8, 16]}}},
        {"table": {"sweep": {"maxBatchSize": 2}}},
        {"table": {"kind": "Additive", "sweep": {"maxBatchSize": 256, "repeats": 3}}},  # 228
        {"table": {"sweep": {"batchSizes": list(range(1, 65)), "repeats": 4}}},  # 256 cells
        {"rollout": {"tablePath": "/etc/sps/table/table.json"}},
        {"rollout": {"tablePath": "/opt/sps/table.json"}},
        {"rollout": {"tablePath": "/var/lib/sps/t.json"}},
        {"job": {"image": "ghcr.io/sps-dev/sps-operator:0.1.0"}},
        {"job": {"image": "localhost:5000/a/b_c__d-e@sha256:" + "a" * 64}},
        {"job": {"image": "busybox"}},
        {"job": {"tolerations": [{"operator": "Exists"}, {"key": "gpu", "effect": ""}]}},
        {"job": {"resources": {"limits": {"cpu": 1, "memory": "1Gi", "nvidia.com/gpu": "1"}}}},
        {"serverContainer": "sglang-0"},
        {"gates": {"maxErrorBound": 0.05, "maxRmsMs": 1.0, "minR2": 0.9}},
    ],
)
def test_usable_specs_pass(overrides: dict[str, Any]) -> None:
    SpsProfileSpec.model_validate(spec(**overrides))


def test_sweep_counts_follow_the_profiler() -> None:
    parsed = SpsProfileSpec.model_validate(spec(table={"kind": "Additive"}))
    assert parsed.table.sweep.counts(parsed.table.kind) == (19, 4, 1)  # default: up to 256
    diag = SpsProfileSpec.model_validate(spec(table={"sweep": {"batchSizes": [1, 2, 2]}}))
    assert diag.table.sweep.counts(diag.table.kind) == (3, 1, 1)  # raw entries, as CEL counts


def test_profile_name_is_bounded_so_derived_names_stay_valid() -> None:
    obj = {"metadata": {"name": "p" * validation.MAX_PROFILE_NAME}, "spec": spec()}
    SpsProfile.model_validate(obj)
    obj["metadata"]["name"] = "p" * (validation.MAX_PROFILE_NAME + 1)
    with pytest.raises(ValidationError, match="at most 40 characters"):
        SpsProfile.model_validate(obj)
    # <name>-<10 hex>-p2 plus a pod's -xxxxx suffix stays within a 63-character label value.
    assert len("p" * validation.MAX_PROFILE_NAME + "-0123456789-p2" + "-abcde") <= 63


def test_status_text_from_jobs_is_cut_to_the_schema_bound_never_refused() -> None:
    long = "x" * 40000
    run = RunStatus(
        name="r",
        job="j",
        phase="Diagonal",
        gpu_product="H100",
        fingerprint="f",
        target="d",
        trigger="NoTable",
        started_at="2026-01-01T00:00:00Z",
        progress=long,
    )
    assert run.progress is not None and len(run.progress) == 256
    failure = FailureRecord(run="r", reason="Failed", message=long, at="2026-01-01T00:00Z")
    assert len(failure.message) == 4096 and failure.message.endswith("…")
    ref = TableRef.model_validate(
        {
            "gpuProduct": "H100",
            "fingerprint": "f",
            "kind": "Diagonal",
            "configMap": "c",
            "hash": "h",
            "message": long,
        }
    )
    assert ref.message is not None and len(ref.message) == 4096
    cond = Condition.model_validate(
        {
            "type": "Ready",
            "status": "False",
            "reason": "Failed",
            "message": long,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    )
    assert len(cond.message) == 32768
    # ...and the CRD says the same bounds, so the API server takes what the operator writes.
    schema = RunStatus.model_json_schema(by_alias=True)
    assert schema["properties"]["progress"]["anyOf"][0]["maxLength"] == 256


def test_old_status_objects_still_parse() -> None:
    """Status models tolerate what an older operator wrote: a negative maxRelErr, unknown
    fields, over-long text."""
    status = SpsProfileStatus.model_validate(
        {
            "tables": [
                {
                    "gpuProduct": "H100",
                    "fingerprint": "f",
                    "kind": "Diagonal",
                    "configMap": "c",
                    "hash": "h",
                    "quality": {"rmsMs": 0.0, "r2": 1.0, "maxRelErr": -0.02, "newFigure": 1},
                    "message": "m" * 10000,
                }
            ],
            "lastFailure": {"run": "r", "reason": "X", "message": "y" * 9000, "at": "t"},
        }
    )
    quality = status.tables[0].quality
    assert quality is not None and quality.max_rel_err == -0.02
    assert quality.error_bound_rel is None


def test_fit_quality_has_the_honest_figures_and_gates_can_use_them() -> None:
    q = FitQuality.model_validate(
        {"looRelRms": 0.01, "looRelMax": 0.03, "ciRelMax": 0.01, "errorBoundRel": 0.04}
    )
    assert (q.loo_rel_rms, q.loo_rel_max, q.ci_rel_max, q.error_bound_rel) == (
        0.01,
        0.03,
        0.01,
        0.04,
    )
    gates = GatesSpec.model_validate({"maxErrorBound": 0.05})
    assert gates.max_error_bound == 0.05
    for name in ("max_rms_ms", "min_r2"):
        assert "repeats 1" in (GatesSpec.model_fields[name].description or "")
    assert "ABSOLUTE" not in (FitQuality.model_fields["max_rel_err"].description or "")
    assert "absolute" in (FitQuality.model_fields["max_rel_err"].description or "")
