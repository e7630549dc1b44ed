"""The result ConfigMap contract (`api/result.py`): what the profiler writes, and what the
operator accepts from a Job that runs the user's image (untrusted input)."""

from __future__ import annotations

import base64
import gzip
import json
import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_tables_clockramp import ramp_rounds

from round_lines import round_line
from sps_operator.api.kinds import TableKind
from sps_operator.api.limits import MAX_STEP_SECONDS, MIN_STEP_SECONDS
from sps_operator.api.result import (
    INLINE_ROUNDS_LIMIT,
    KEY_ROUNDS,
    KEY_ROUNDS_GZ,
    MAX_MESSAGE_CHARS,
    MAX_PROGRESS_CHARS,
    MAX_RAMP_CHUNKS,
    MAX_ROUNDS_BYTES,
    ResultError,
    build_patch,
    clean_text,
    read_result,
)
from sps_operator.tables.fit import fit_from_rounds
from strategies import json_values


def to_api(patch: dict) -> tuple[dict, dict]:
    """What the API server would hold after applying the merge patch to an empty ConfigMap."""
    data = {k: v for k, v in patch.get("data", {}).items() if v is not None}
    binary = {k: v for k, v in patch.get("binaryData", {}).items() if v is not None}
    return data, binary


def succeeded(rounds: list[dict[str, Any]]) -> tuple[dict, dict]:
    return to_api(build_patch(status="succeeded", rounds=rounds))


def gz(text: str) -> str:
    return base64.b64encode(gzip.compress(text.encode())).decode()


HUGE_INT_LINE = '{"batch_size_per_rank":1,"batch_tokens":8,"steps_per_sec":' + "7" * 5000 + "}\n"


# --------------------------------------------------------------------------- round trips


def test_small_result_round_trips_inline() -> None:
    rounds = [round_line(1, 8, 90.0), round_line(2, 16, 85.0)]
    patch = build_patch(
        status="succeeded",
        message="ok",
        progress="2/2",
        manifest={"fingerprint": "abc", "round_summaries": rounds},
        rounds=rounds,
    )
    assert patch["binaryData"] == {KEY_ROUNDS_GZ: None}  # removes a stale gz
    result = read_result(*to_api(patch))
    assert result.status == "succeeded" and result.done
    assert result.progress == "2/2"
    assert result.rounds == rounds
    assert result.manifest == {"fingerprint": "abc"}  # rounds travel once


def test_large_result_is_gzipped_and_unknown_round_fields_are_dropped() -> None:
    rng = random.Random(0)
    rounds = [
        {**round_line(bs, bs * 8, 50.0), "noise": [rng.random() for _ in range(30)]}
        for bs in range(1, 400)
    ]
    assert len(json.dumps(rounds)) > INLINE_ROUNDS_LIMIT
    patch = build_patch(status="succeeded", progress="399/399", rounds=rounds)
    assert patch["data"][KEY_ROUNDS] is None
    raw = gzip.decompress(base64.b64decode(patch["binaryData"][KEY_ROUNDS_GZ]))
    assert raw.decode().count("\n") == len(rounds)
    result = read_result(*to_api(patch))
    assert result.rounds == [{k: v for k, v in r.items() if k != "noise"} for r in rounds]


def test_a_running_or_failed_result_carries_no_rounds_and_keeps_its_message() -> None:
    garbage = {"status": "failed", "message": "pin did not take", KEY_ROUNDS: "{oops\n"}
    failed = read_result(garbage, {})
    assert failed.done and failed.message == "pin did not take" and failed.rounds == []
    running = read_result({"status": "running", "progress": "3/9"}, {})
    assert not running.done and running.progress == "3/9"


def test_too_large_to_publish_fails_clearly() -> None:
    rng = random.Random(1)
    rounds = [
        {"x": "".join(rng.choice("abcdef0123456789") for _ in range(4000))} for _ in range(400)
    ]
    with pytest.raises(ResultError, match="above the ConfigMap limit"):
        build_patch(status="succeeded", rounds=rounds)
    with pytest.raises(ValueError, match="status must be"):
        build_patch(status="done")


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("data", "binary", "match"),
    [
        ({"status": "weird"}, {}, "unknown status"),
        ({"status": "running", "manifest.json": "{"}, {}, r"manifest\.json is not JSON"),
        ({"status": "running", "manifest.json": "[1]"}, {}, "not a JSON object"),
        ({"status": "succeeded", KEY_ROUNDS: '{"a":1}\n{oops\n'}, {}, "line 2 is not JSON"),
        ({"status": "succeeded"}, {KEY_ROUNDS_GZ: "bm90IGd6aXA="}, "not gzip"),
        ({"status": "succeeded"}, {KEY_ROUNDS_GZ: "***"}, "not base64"),
        ({"status": "succeeded", KEY_ROUNDS: "[1,2]\n"}, {}, "line 1 is not a JSON object"),
        ({"status": "succeeded", KEY_ROUNDS: "[" * 100_00 + "\n"}, {}, "line 1"),
        ({"status": ["succeeded"]}, {}, "status is not a string"),
        # Issue 18 #23: Python's int-string limit raises a bare ValueError inside json.loads.
        ({"status": "succeeded", KEY_ROUNDS: HUGE_INT_LINE}, {}, "line 1 .* 4300 digits"),
        ({"status": "succeeded"}, {KEY_ROUNDS_GZ: gz(HUGE_INT_LINE)}, "4300 digits"),
        ({"status": "running", "manifest.json": '{"a":' + "1" * 5000 + "}"}, {}, "manifest"),
        (
            {"status": "failed", "manifest.json": '{"a":' + "[" * 2000 + "]" * 2000 + "}"},
            {},
            "deep",
        ),
        ({"status": "succeeded", KEY_ROUNDS: '{"w":' + "[" * 40 + "]" * 40 + "}\n"}, {}, "deep"),
    ],
)
def test_malformed_results_are_refused_with_what_is_wrong(
    data: dict, binary: dict, match: str
) -> None:
    with pytest.raises(ResultError, match=match):
        read_result(data, binary)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"steps_per_sec": 1e8}, "decode step of 1e-05 ms"),
        # Issue 18 #8: step_cpu_ms in seconds (0.0105 "ms" for a 10.5 ms step).
        ({"steps_per_sec": 95_000.0}, "decode step of 0.0105263 ms; a real step takes 0.1"),
        ({"median_step_time": 1.0 / 95_000, "steps_per_sec": 95_000.0}, "decode step"),
        ({"steps_per_sec": 20_000.0}, "decode step of 0.05 ms"),  # a 50 ms step, in seconds
        ({"steps_per_sec": 0.0}, "decode step"),
        ({"steps_per_sec": -5.0}, "decode step"),
        ({"steps_per_sec": 0.5}, "decode step of 2000 ms"),
        ({"steps_per_sec": math.inf}, "finite"),
        ({"steps_per_sec": math.nan}, "finite"),
        ({"steps_per_sec": "fast"}, "steps_per_sec"),
        ({"batch_size_per_rank": 0}, "batch_size_per_rank"),
        ({"batch_tokens": 10**12}, "batch_tokens"),
        ({"frac": 1.5}, "frac"),
        ({"median_step_time": 0.5}, "disagrees"),
        ({"median_step_time": 1e12}, "outside"),
        ({"step_time_se": 1.0}, "exceeds the step time"),
        ({"ci_low": 0.02, "ci_high": 0.03}, "outside its own confidence interval"),
        ({"graph_tiers": [8, 4]}, "strictly increasing"),
        ({"batch_tokens": 4 * 2000}, "verify tokens per request"),
    ],
)
def test_implausible_rounds_are_refused(change: dict[str, Any], match: str) -> None:
    bad = {**round_line(4, 16, 80.0), **change}
    text = json.dumps(round_line(1, 4, 90.0)) + "\n" + json.dumps(bad, allow_nan=True) + "\n"
    with pytest.raises(ResultError, match=match) as info:
        read_result({"status": "succeeded", KEY_ROUNDS: text}, {})
    assert "line 2" in str(info.value)


def test_the_clock_ramp_record_reaches_the_operators_fit() -> None:
    # The operator fits the validated rounds. When validation dropped the clock fields it
    # fitted the raw medians of rounds measured on a ramp (11 % slow here, their intervals
    # none the wiser), not the corrected ones the profiler fitted.
    rounds = ramp_rounds()
    text = "".join(json.dumps(r) + "\n" for r in rounds)
    accepted = read_result({"status": "succeeded", KEY_ROUNDS: text}, {}).rounds
    profiler = fit_from_rounds(rounds, TableKind.DIAGONAL, diagonal_probes="measured")
    operator = fit_from_rounds(accepted, TableKind.DIAGONAL, diagonal_probes="measured")
    assert operator.clock_ramp is not None and operator.clock_ramp == profiler.clock_ramp
    assert operator.table.to_dict() == profiler.table.to_dict()


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"clock_s": [5.0, 1.0]}, "clock_s"),
        ({"clock_s": [0.0, math.inf]}, "clock_s"),
        ({"clock_run": "x" * 65}, "clock_run"),
        ({"ar1": 2.0}, "ar1"),
        ({"ar1": math.nan}, "ar1"),
        ({"clock_ramp": {"probe": [[1.0, 2.0, math.nan]], "anchor": []}}, "clock_ramp"),
        ({"clock_ramp": {"probe": [[1.0, 2.0, 5.0]], "anchor": []}}, "log step time"),
        ({"clock_ramp": {"probe": [[-1.0, 2.0, -4.0]], "anchor": []}}, "run clock"),
        ({"clock_ramp": {"probe": [[1.0, 2.0]], "anchor": []}}, "clock_ramp"),
        (
            {"clock_ramp": {"probe": [], "anchor": [[1.0, 1.0, -4.0]] * (MAX_RAMP_CHUNKS + 1)}},
            "anchor",
        ),
    ],
)
def test_implausible_clock_fields_are_refused(change: dict[str, Any], match: str) -> None:
    bad = {**round_line(4, 16, 80.0), **change}
    text = json.dumps(bad, allow_nan=True) + "\n"
    with pytest.raises(ResultError, match=match):
        read_result({"status": "succeeded", KEY_ROUNDS: text}, {})


def test_a_decompression_bomb_is_refused_before_it_is_expanded() -> None:
    bomb = gzip.compress(b"\n" * (MAX_ROUNDS_BYTES * 3), compresslevel=9)
    packed = base64.b64encode(bomb).decode()
    assert len(packed) < 64 * 1024  # ~13 KB for 12 MiB of newlines
    with pytest.raises(ResultError, match="expands beyond"):
        read_result({"status": "succeeded"}, {KEY_ROUNDS_GZ: packed})


def test_truncated_gzip_and_too_many_rounds_are_refused() -> None:
    whole = base64.b64decode(gz(json.dumps(round_line(1, 4, 90.0)) + "\n"))
    torn = base64.b64encode(whole[: len(whole) // 2]).decode()
    with pytest.raises(ResultError, match=r"truncated|not gzip"):
        read_result({"status": "succeeded"}, {KEY_ROUNDS_GZ: torn})
    many = "".join(json.dumps(round_line(1, 4, 90.0)) + "\n" for _ in range(5000))
    with pytest.raises(ResultError, match="more than 4096"):
        read_result({"status": "succeeded"}, {KEY_ROUNDS_GZ: gz(many)})


def test_job_supplied_text_is_cleaned_and_bounded() -> None:
    evil = "\x1b[2J\x1b]0;pwned\x07ok\r\nnext" + "x" * 50_000
    result = read_result({"status": "failed", "message": evil, "progress": evil}, {})
    assert "\x1b" not in result.message and "\r" not in result.message
    assert result.message.startswith("[2J]0;pwnedok\nnext")
    assert len(result.message) == MAX_MESSAGE_CHARS and result.message.endswith("…")
    assert len(result.progress) == MAX_PROGRESS_CHARS
    assert clean_text("a\tb\u009bc", 10) == "a\tbc"


# --------------------------------------------------------------------------- properties


round_keys = st.sampled_from(
    [
        "repeat",
        "batch_size_per_rank",
        "frac",
        "batch_tokens",
        "steps_per_sec",
        "median_step_time",
        "step_time_se",
        "ci_low",
        "ci_high",
        "graph_tier",
        "graph_tiers",
        "warnings",
        "budget",
        "clock_s",
        "clock_run",
        "clock_on_ramp",
        "clock_ramp",
        "ar1",
    ]
)
fuzzed_round = st.one_of(
    st.dictionaries(round_keys, json_values, max_size=8),
    st.builds(
        lambda base, extra: {**base, **extra},
        st.builds(
            round_line,
            st.integers(1, 64),
            st.integers(1, 512),
            st.floats(0.1, 1e6),
            st.one_of(st.none(), st.floats(0.01, 1.0)),
        ),
        st.dictionaries(round_keys, json_values, max_size=2),
    ),
    json_values,
)
fuzzed_rounds = st.lists(fuzzed_round, max_size=6)


@given(rounds=fuzzed_rounds, gzipped=st.booleans())
def test_any_rounds_either_validate_within_bounds_or_are_refused(
    rounds: list[Any], gzipped: bool
) -> None:
    """Whatever a Job writes, `read_result` returns rounds the fit can trust or raises
    ResultError; never another exception."""
    text = "".join(json.dumps(r, allow_nan=True) + "\n" for r in rounds)
    data: dict[str, str] = {"status": "succeeded"}
    binary: dict[str, str] = {}
    if gzipped:
        binary[KEY_ROUNDS_GZ] = gz(text)
    else:
        data[KEY_ROUNDS] = text
    try:
        result = read_result(data, binary)
    except ResultError as exc:
        assert str(exc)
        return
    for r in result.rounds:
        step = 1.0 / r["steps_per_sec"]
        assert MIN_STEP_SECONDS <= step <= MAX_STEP_SECONDS
        assert 1 <= r["batch_size_per_rank"] <= 4096
        assert r.get("frac") is None or 0 < r["frac"] <= 1


# Text no json.dumps writes: integers past Python's int-string limit, nesting past the
# result's bound and past the parser's recursion limit, and torn or foreign lines.
hostile_lines = st.one_of(
    st.integers(4000, 6000).map(lambda n: '{"steps_per_sec":' + "9" * n + "}"),
    st.integers(4000, 6000).map(lambda n: '{"repeat":-' + "1" * n + "}"),
    st.integers(1, 3000).map(lambda d: '{"warnings":' + "[" * d + "]" * d + "}"),
    st.integers(1, 3000).map(lambda d: "{" + '"a":{' * d + "}" * (d + 1)),
    st.text(max_size=60),
)


@given(
    lines=st.lists(
        st.one_of(hostile_lines, fuzzed_round.map(lambda r: json.dumps(r, allow_nan=True))),
        max_size=6,
    ),
    manifest=st.one_of(st.none(), hostile_lines),
    gzipped=st.booleans(),
)
def test_any_text_in_the_result_reads_or_is_refused(
    lines: list[str], manifest: str | None, gzipped: bool
) -> None:
    """Huge integers and deep nesting anywhere in what a Job writes end as ResultError
    with a message; never a bare ValueError or RecursionError."""
    text = "".join(line.replace("\n", " ").replace("\r", " ") + "\n" for line in lines)
    data: dict[str, str] = {"status": "succeeded"}
    binary: dict[str, str] = {}
    if manifest is not None:
        data["manifest.json"] = manifest
    if gzipped:
        binary[KEY_ROUNDS_GZ] = gz(text)
    else:
        data[KEY_ROUNDS] = text
    try:
        read_result(data, binary)
    except ResultError as exc:
        assert str(exc)


finite = st.floats(allow_nan=False, allow_infinity=False)
chunks = st.lists(st.tuples(finite, finite, finite).map(list), max_size=40)


@given(
    probe=chunks,
    anchor=chunks,
    windows=st.lists(st.tuples(finite, finite).map(list), min_size=4, max_size=4),
    ar1=st.one_of(st.none(), finite),
)
def test_any_clock_ramp_record_is_refused_or_fits(
    probe: list[Any], anchor: list[Any], windows: list[Any], ar1: float | None
) -> None:
    """A Job's clock-ramp record either fails validation (ResultError) or the fit takes it
    (a table, or a ValueError saying what is wrong); never another exception."""
    rounds = ramp_rounds()
    for round_, window in zip(rounds, windows, strict=True):
        round_["clock_s"] = window
    rounds[-1]["clock_ramp"] = {"probe": probe, "anchor": anchor}
    rounds[-1]["ar1"] = ar1
    text = "".join(json.dumps(r, allow_nan=True) + "\n" for r in rounds)
    try:
        accepted = read_result({"status": "succeeded", KEY_ROUNDS: text}, {}).rounds
    except ResultError as exc:
        assert str(exc)
        return
    try:
        fit = fit_from_rounds(accepted, TableKind.DIAGONAL, diagonal_probes="measured")
    except (ValueError, ArithmeticError) as exc:
        assert str(exc)
        return
    assert all(v > 0 for v in fit.table.to_dict()["sample_steps_per_sec"])


@given(
    data=st.dictionaries(
        st.sampled_from(["status", "message", "progress", "manifest.json", "rounds.jsonl"]),
        st.one_of(st.text(max_size=200), st.sampled_from(["succeeded", "failed", "running"])),
    ),
    binary=st.dictionaries(st.just(KEY_ROUNDS_GZ), st.text(max_size=200)),
)
def test_any_configmap_content_reads_or_is_refused(
    data: dict[str, str], binary: dict[str, str]
) -> None:
    try:
        result = read_result(data, binary)
    except ResultError:
        return
    assert len(result.message) <= MAX_MESSAGE_CHARS
    assert all(ord(c) >= 32 or c in "\t\n" for c in result.message + result.progress)
