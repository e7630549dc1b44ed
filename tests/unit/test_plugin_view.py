"""Pure views of `kubectl sps`: states, rows, ages, table text, export manifest."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sps_operator.api import labels as L
from sps_operator.api.validation import NONEMPTY_LABEL_VALUE_PATTERN, full_match
from sps_operator.plugin import view
from sps_operator.plugin.view import PluginError
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
H100 = "NVIDIA-H100-80GB-HBM3"
H200 = "NVIDIA-H200"


def cond(type_: str, status: str, reason: str = "Ok", message: str = "") -> dict[str, str]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-02T11:00:00Z",
    }


def table_entry(gpu: str, cm: str) -> dict[str, Any]:
    return {
        "gpuProduct": gpu,
        "fingerprint": "fp1234",
        "kind": "Diagonal",
        "configMap": cm,
        "hash": "0123456789abcdef",
        "quality": {"rmsMs": 0.0421, "r2": 0.99871, "maxRelErr": 0.0312},
        "profiledAt": "2026-12-02T11:30:00Z",
        "run": "llama-abc",
    }


def profile(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sps.dev/v1alpha1",
        "kind": "SpsProfile",
        "metadata": {
            "name": "llama",
            "namespace": "serving",
            "creationTimestamp": "2026-12-02T11:56:40Z",
            "generation": 1,
        },
        "spec": {"selector": {"matchLabels": {"app": "llama"}}, **spec},
        "status": status or {},
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (119, "119s"),
        (200, "3m20s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (5 * 3600 + 12 * 60, "5h12m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (120 * 86400, "120d"),
        (-5, "0s"),
        # each rung's edges
        (120, "2m"),
        (9 * 60 + 59, "9m59s"),
        (10 * 60 + 59, "10m"),
        (180 * 60, "3h"),
        (7 * 3600 + 59 * 60, "7h59m"),
        (8 * 3600 + 59 * 60, "8h"),
        (48 * 3600, "2d"),
        (7 * 86400 + 23 * 3600, "7d23h"),
        (8 * 86400 + 3600, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
    ],
)
def test_human_duration_matches_kubectl(seconds: float, text: str) -> None:
    assert view.human_duration(seconds) == text


def test_age_of_unparsable_timestamp() -> None:
    assert view.age("yesterday", NOW) == "<unknown>"
    assert view.age(None, NOW) == "<unknown>"
    assert view.age("2026-12-02T11:59:00Z", NOW) == "60s"


@pytest.mark.parametrize(
    ("status", "spec", "state"),
    [
        ({}, {}, "Pending"),
        ({"currentRun": {"phase": "OffDiagonal"}}, {}, "Profiling/OffDiagonal"),
        ({"conditions": [cond("Ready", "True")]}, {}, "Ready"),
        ({"conditions": [cond("Ready", "True"), cond("Stale", "True")]}, {}, "Stale"),
        ({"conditions": [cond("Ready", "False", "GateFailed")]}, {}, "GateFailed"),
        ({"lastFailure": {"run": "r", "reason": "X", "message": "m", "at": "t"}}, {}, "Failed"),
        ({"conditions": [cond("Ready", "True")]}, {"suspend": True}, "Suspended"),
    ],
)
def test_profile_state(status: dict[str, Any], spec: dict[str, Any], state: str) -> None:
    assert view.profile_state(profile(status, **spec)) == state


def test_get_wide_shows_the_live_tables_gpu_seconds_bound_and_the_queue_position() -> None:
    older = {"gpuProduct": H100, "configMap": "llama-table-0", "gpuSeconds": 99.0,
             "quality": {"errorBoundRel": 0.5}}  # fmt: skip
    table = {"gpuProduct": H100, "configMap": "llama-table-1", "gpuSeconds": 412.5,
             "quality": {"errorBoundRel": 0.0234}}  # fmt: skip
    waiting = {"reason": "QueuedInKueue", "message": "m", "since": "2026-03-01T11:59:00Z",
               "queuePosition": 3}  # fmt: skip
    p = profile({"liveTable": "llama-table-1", "tables": [older, table],
                 "currentRun": {"waiting": waiting}})  # fmt: skip
    row = view.get_row(p, NOW)
    assert (row["gpuSeconds"], row["errorBound"], row["queue"]) == ("412", "2.3%", "#3")
    header, line = view.render_get([row], all_namespaces=False, wide=True).splitlines()
    assert header.split()[-4:] == ["GPU-SECONDS", "ERROR-BOUND", "QUEUE", "AGE"]
    assert line.split()[-4:] == ["412", "2.3%", "#3", "3m20s"]
    # A bound that is no number (a hand-edited status), or none recorded, is not shown.
    for quality in ({"errorBoundRel": "small"}, {"errorBoundRel": True}, None):
        table["quality"] = quality
        assert view.get_row(p, NOW)["errorBound"] == "-"
    # A position that is no position (a hand-edited status) is not shown.
    p["status"]["currentRun"]["waiting"]["queuePosition"] = "first"
    assert view.get_row(p, NOW)["queue"] == "-"


def test_get_row_and_render_columns() -> None:
    p = profile(
        {
            "gpuProduct": H100,
            "liveTable": "llama-table-0123456789",
            "currentRun": {"phase": "Diagonal", "progress": "7/19 rounds"},
        },
        table={"kind": "Additive"},
    )
    row = view.get_row(p, NOW)
    assert row == {
        "namespace": "serving",
        "name": "llama",
        "kind": "Additive",
        "gpu": H100,
        "table": "llama-table-0123456789",
        "state": "Profiling/Diagonal",
        "progress": "7/19 rounds",
        "age": "3m20s",
        # -o wide's columns
        "targets": "0/0",
        "workloads": "-",
        "reason": "-",
        "run": "-",
        "lastFailure": "-",
        "gpuSeconds": "-",
        "errorBound": "-",
        "queue": "-",
    }
    text = view.render_get([row], all_namespaces=False).splitlines()
    assert text[0].split() == ["NAME", "KIND", "GPU", "TABLE", "STATE", "PROGRESS", "AGE"]
    assert text[1].split() == [
        "llama",
        "Additive",
        H100,
        "llama-table-0123456789",
        "Profiling/Diagonal",
        "7/19",
        "rounds",
        "3m20s",
    ]
    # Columns line up: every header starts where its values start.
    assert text[0].index("GPU") == text[1].index(H100)
    with_ns = view.render_get([row], all_namespaces=True).splitlines()
    assert with_ns[0].startswith("NAMESPACE")
    assert view.render_get([], all_namespaces=False) == "No SpsProfiles found."


def test_table_for_gpu_picks_live_then_explicit() -> None:
    status = {
        "liveTable": "llama-table-h200",
        "tables": [table_entry(H100, "llama-table-h100"), table_entry(H200, "llama-table-h200")],
    }
    p = profile(status)
    assert view.table_for_gpu(p, None)["configMap"] == "llama-table-h200"
    assert view.table_for_gpu(p, H100)["configMap"] == "llama-table-h100"
    with pytest.raises(
        PluginError, match=r"no table for GPU 'A100'.*NVIDIA-H100-80GB-HBM3, NVIDIA-H200"
    ):
        view.table_for_gpu(p, "A100")
    status.pop("liveTable")
    with pytest.raises(PluginError, match=r"several GPUs.*--gpu"):
        view.table_for_gpu(profile(status), None)
    with pytest.raises(PluginError, match=r"no table yet.*explain llama"):
        view.table_for_gpu(profile({}), None)


def test_render_diagonal_table() -> None:
    table = SpsCostTable([8, 16], [1000.0, 500.0], 32)
    text = view.render_table_values(table)
    lines = text.splitlines()
    assert lines[0].split() == ["BATCH", "TOKENS", "STEPS/S", "STEP", "MS"]
    assert lines[1].split() == ["8", "1000.00", "1.000"]
    assert lines[2].split() == ["16", "500.00", "2.000"]
    assert lines[-1] == "max_batch_tokens: 32"
    data = view.table_data(table)
    assert data["probes"][1] == {"batchTokens": 16, "stepsPerSec": 500.0, "stepMs": 2.0}


def test_render_additive_table_and_header() -> None:
    table = SpsAdditiveCostTable(0.010, [1, 8], [0.0, 0.002], [0, 64], [0.0, 0.004])
    text = view.render_table_values(table)
    assert "bias = 10.000 ms" in text
    assert "8  " in text and "2.000" in text and "4.000" in text
    data = view.table_data(table)
    assert data["biasMs"] == pytest.approx(10.0)
    assert data["theta"][1] == {"verifyTokens": 64, "ms": pytest.approx(4.0)}
    header = view.render_table_header("llama", table_entry(H100, "cm"))
    assert "RMS 0.042 ms, R² 0.9987, max rel. error 3.1 %" in header
    assert f"GPU product:  {H100}" in header


def test_export_strips_ownership_and_keeps_data() -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "llama-table-0123456789",
            "namespace": "serving",
            "uid": "u",
            "resourceVersion": "42",
            "creationTimestamp": "2026-12-02T11:00:00Z",
            "managedFields": [{"manager": "sps-operator"}],
            "ownerReferences": [{"kind": "SpsProfile", "name": "llama"}],
            "labels": {
                "sps.dev/profile": "llama",
                "sps.dev/gpu-product": H100,
                "sps.dev/fingerprint": "fp1234",
                "sps.dev/table-hash": "0123456789abcdef",
                "app.kubernetes.io/managed-by": "sps-operator",
            },
            "annotations": {"sps.dev/gpu-product": H100},
        },
        "immutable": True,
        "data": {"table.json": '{"a":1}', "meta.json": '{"fingerprint": "fp1234"}'},
    }
    out = view.exportable_config_map(cm, "llama")
    meta = out["metadata"]
    assert meta["name"] == "llama-pinned-0123456789"
    assert set(meta) == {"name", "labels", "annotations"}
    assert "sps.dev/profile" not in meta["labels"]
    assert "app.kubernetes.io/managed-by" not in meta["labels"]
    assert meta["annotations"] == {
        "sps.dev/exported-from": "serving/llama-table-0123456789",
        "sps.dev/table-hash": "0123456789abcdef",
        "sps.dev/gpu-product": H100,
        "sps.dev/fingerprint": "fp1234",
    }
    assert out["data"] == cm["data"] and out["immutable"] is True
    assert view.exportable_config_map(cm, "llama", "mine")["metadata"]["name"] == "mine"
    with pytest.raises(PluginError, match=r"no table\.json"):
        view.exportable_config_map({**cm, "data": {}}, "llama")


V1_KEY = "5a5a5a5a5a5a5a5a"  # a version-1 fingerprint: 16 hex digits, no prefix
V2_KEY = "v2-fedcba9876543210"


def measured_table_cm(label: str, meta_text: str) -> dict[str, Any]:
    """A table ConfigMap as the operator publishes it, labelled `label` (for 0.1.0 the
    measured server's version-1 key, api/legacy_tables.py) with `meta_text` as meta.json."""
    return {
        "metadata": {
            "name": "llama-table-0123456789",
            "namespace": "serving",
            "labels": {
                "sps.dev/profile": "llama",
                "sps.dev/gpu-product": H100,
                "sps.dev/fingerprint": label,
                "sps.dev/table-hash": "0123456789abcdef",
            },
        },
        "data": {"table.json": '{"a":1}', "meta.json": meta_text},
    }


def test_export_records_the_fingerprint_measured_for_not_the_version1_label() -> None:
    # Labelled with the server's version-1 key so that 0.1.0 finds it after a rollback;
    # meta.json keeps the fingerprint the table was measured for. The pinned copy is no
    # profile's table (0.1.0 never reads it), so only the measured one is recorded.
    cm = measured_table_cm(V1_KEY, json.dumps({"fingerprint": V2_KEY, "run": "llama-abc"}))
    out = view.exportable_config_map(cm, "llama")
    assert out["metadata"]["annotations"]["sps.dev/fingerprint"] == V2_KEY
    assert V1_KEY not in json.dumps(out["metadata"])
    assert out["data"] == cm["data"]  # meta.json travels as it is


@pytest.mark.parametrize(
    "meta_text",
    [
        "{}",
        "not json",
        json.dumps({"fingerprint": 42}),
        json.dumps({"fingerprint": ""}),
        json.dumps({"fingerprint": "v2-" + "a" * 61}),  # longer than a label value
        json.dumps({"fingerprint": "v2-abc\n\u001b[2J"}),  # a line break, a terminal escape
        json.dumps({"fingerprint": ["v2-abc"]}),
        json.dumps(["fingerprint", V2_KEY]),
        "[" * 10_000 + "]" * 10_000,
    ],
    ids=[
        "no fingerprint",
        "not JSON",
        "a number",
        "empty",
        "64 characters",
        "control characters",
        "a list",
        "not an object",
        "nested",
    ],
)
def test_export_without_a_readable_measured_fingerprint_records_none(meta_text: str) -> None:
    # Neither a malformed value nor the label (which may be the version-1 key) stands in.
    cm = measured_table_cm(V1_KEY, meta_text)
    annotations = view.exportable_config_map(cm, "llama")["metadata"]["annotations"]
    assert "sps.dev/fingerprint" not in annotations
    assert annotations["sps.dev/table-hash"] == "0123456789abcdef"


def test_export_reads_meta_json_within_the_operators_bound() -> None:
    # The bound the operator reads meta.json with (api/labels.py), not a larger one.
    fitting = {"fingerprint": V2_KEY, "pad": ""}
    fitting["pad"] = "x" * (L.MAX_META_BYTES - len(json.dumps(fitting)))
    over = {**fitting, "pad": fitting["pad"] + "x"}
    for meta, recorded in [(fitting, V2_KEY), (over, None)]:
        cm = measured_table_cm(V1_KEY, json.dumps(meta))
        annotations = view.exportable_config_map(cm, "llama")["metadata"]["annotations"]
        assert annotations.get("sps.dev/fingerprint") == recorded


@settings(max_examples=200, deadline=None)
@given(
    value=st.one_of(
        st.text(max_size=80),
        st.from_regex(r"\Av2-[0-9a-f]{16}\Z"),
        st.integers(),
        st.none(),
        st.lists(st.text(max_size=5), max_size=3),
    ),
    label=st.sampled_from([V1_KEY, V2_KEY, "fp01"]),
)
def test_export_fingerprint_is_the_measured_one_or_none(value: object, label: str) -> None:
    cm = measured_table_cm(label, json.dumps({"fingerprint": value}))
    recorded = view.exportable_config_map(cm, "llama")["metadata"]["annotations"].get(
        "sps.dev/fingerprint"
    )
    if recorded is not None:
        assert recorded == value
        assert full_match(NONEMPTY_LABEL_VALUE_PATTERN, recorded)
    elif isinstance(value, str) and re.fullmatch(r"v2-[0-9a-f]{16}", value):
        pytest.fail(f"a well-formed fingerprint {value!r} was not recorded")


def test_watch_lines_line_up_with_the_header() -> None:
    first = view.get_row(profile({}), NOW)
    layout = view.watch_layout([first])
    header, line0 = view.render_get([first], False, layout).splitlines()
    later = view.get_row(
        profile(
            {
                "gpuProduct": H100,
                "liveTable": "llama-table-0123456789",
                "currentRun": {"phase": "OffDiagonal", "progress": "12/40 rounds"},
            }
        ),
        NOW,
    )
    line1 = view.render_get([later], False, layout).splitlines()[1]
    for column, value in (("STATE", "Profiling/OffDiagonal"), ("AGE", "3m20s")):
        assert header.index(column) == line1.index(value)
    assert header.index("STATE") == line0.index("Pending")


def waiting_run(reason: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "llama-abc",
        "phase": "Diagonal",
        "waiting": {
            "reason": reason,
            "message": "no node can take it now: 0/2 nodes are available: 2 Insufficient "
            "nvidia.com/gpu.",
            "since": "2026-12-02T11:58:00Z",
        },
        **extra,
    }


@pytest.mark.parametrize(
    "reason",
    ["WaitingForGPUs", "QueuedInKueue", "LocalQueueMissing", "BorrowBlocked", "KueueManagedTarget"],
)
def test_get_shows_why_a_run_waits_and_for_how_long(reason: str) -> None:
    row = view.get_row(profile({"gpuProduct": H100, "currentRun": waiting_run(reason)}), NOW)
    assert row["state"] == reason
    assert row["progress"] == "waiting 2m"
    # -o json/yaml: the scheduler's (or Kueue's, or the refusal's) words and since when.
    assert row["waitingSince"] == "2026-12-02T11:58:00Z"
    assert row["waitingMessage"].startswith("no node can take it now: 0/2 nodes")
    line = view.render_get([row], all_namespaces=False).splitlines()[1].split()
    assert line[4:7] == [reason, "waiting", "2m"]


def test_get_shows_a_borrowed_replica() -> None:
    run = {
        "phase": "Diagonal",
        "progress": "7/19 rounds",
        "borrow": {"deployment": "llama", "replicas": 2, "at": "2026-12-02T11:59:00Z"},
    }
    row = view.get_row(profile({"currentRun": run}), NOW)
    assert row["state"] == "Profiling/Diagonal"
    assert row["progress"] == "7/19 rounds (borrowed 1 of 2 from llama)"
    assert "waitingSince" not in row


def test_watch_key_ignores_the_wait_clock_ticking() -> None:
    early = view.get_row(profile({"currentRun": waiting_run("WaitingForGPUs")}), NOW)
    later = view.get_row(
        profile({"currentRun": waiting_run("WaitingForGPUs")}), NOW.replace(minute=5)
    )
    assert early["progress"] != later["progress"]
    assert view.watch_key(early) == view.watch_key(later)
    blocked = view.get_row(profile({"currentRun": waiting_run("BorrowBlocked")}), NOW)
    assert view.watch_key(blocked) != view.watch_key(early)
