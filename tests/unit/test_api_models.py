"""SpsProfile models: defaults, validation messages, wire form."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sps_operator.api import models
from sps_operator.api.models import SpsProfile, SpsProfileSpec


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
        ({"selector": {}}, models.MSG_SELECTOR_EMPTY),
        ({"selector": {"matchLabels": {}}}, models.MSG_SELECTOR_EMPTY),
        (
            {"table": {"kind": "Additive", "sweep": {"fracs": [0.0, 0.5]}}},
            models.MSG_FRACS,
        ),
        (
            {"table": {"kind": "Additive", "sweep": {"fracs": [1.5]}}},
            models.MSG_FRACS,
        ),
        ({"table": {"sweep": {"fracs": [0.5]}}}, models.MSG_FRACS_DIAGONAL),
        (
            {"table": {"sweep": {"batchSizes": [1, 2], "maxBatchSize": 8}}},
            models.MSG_BATCH_EXCLUSIVE,
        ),
        ({"server": {"source": "External"}}, models.MSG_EXTERNAL_URL),
        ({"server": {"url": "http://x:1"}}, models.MSG_CLONE_URL),
        ({"refresh": {"schedule": "every day"}}, models.MSG_CRON),
        ({"refresh": {"schedule": "0 3 * *"}}, models.MSG_CRON),
        ({"refresh": {"schedule": "99 3 * * *"}}, models.MSG_CRON),
        ({"rollout": {"mode": "AnnotateOnly"}}, models.MSG_ANNOTATE_ONLY_CM),
        ({"rollout": {"tablePath": "relative/table.json"}}, models.MSG_TABLE_PATH),
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
