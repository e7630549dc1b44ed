"""The effects that make a simulated step differ from the truth, and the truth staying exact."""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import replace

import pytest

from sps_operator import dspark_arith
from sps_sim import costmodel
from sps_sim.costmodel import GPU_H100, PRESETS, NoiseSource, without_effects
from sps_sim.engine import Engine, EngineConfig
from sps_sim.settings import build_settings
from sps_sim.truth import truth_grid

H100 = PRESETS[GPU_H100]
QUIET = without_effects(H100)
CAPTURE = tuple(dspark_arith.default_decode_capture_bs(256))
RECORDING = frozenset({"core", "step_cpu_time"})
DSPARK = ["--speculative-algorithm", "DSPARK"]


def step_times(preset: costmodel.CostPreset, bs: int, steps: int, input_len: int = 16) -> list:
    cfg = EngineConfig(capture_bs=CAPTURE, components=RECORDING, simulate_acc_len=1.0, seed=5)
    engine = Engine(cfg, preset)
    engine.submit([(None, input_len, steps + 1)] * bs, 0.0)
    t = 0.0
    while (nxt := engine.next_event_time()) is not None:
        t = nxt
        engine.advance(t)
    return [r["step_cpu_ms"] / 1e3 for r in engine.records(0) if "step_cpu_ms" in r]


def test_kv_growth_makes_each_step_slower_by_the_new_kv_reads() -> None:
    preset = replace(QUIET, kv_per_token_s=2e-7)
    times = step_times(preset, bs=8, steps=40)
    deltas = [b - a for a, b in itertools.pairwise(times)]
    # every step each of the 8 requests holds one more KV token
    assert deltas == pytest.approx([8 * 2e-7] * len(deltas), abs=1e-7)
    # at the reference context the step costs exactly the truth
    at_reference = preset.decode_seconds_at_context(8, 64, 8 * preset.kv_reference_tokens)
    assert at_reference == pytest.approx(preset.decode_seconds(8, 64))


def test_a_short_context_never_makes_a_step_nearly_free() -> None:
    preset = replace(QUIET, kv_per_token_s=1e-4)
    assert preset.decode_seconds_at_context(48, 384, 0) == pytest.approx(
        0.5 * preset.decode_seconds(48, 384)
    )


def test_ar1_noise_is_autocorrelated_with_the_marginal_cv_kept() -> None:
    preset = replace(QUIET, noise_cv=0.05, noise_ar1=0.8)
    noise = NoiseSource(preset, seed=11)
    logs = [math.log(noise.factor(1e9)) for _ in range(20000)]
    mean = statistics.fmean(logs)
    var = statistics.pvariance(logs)
    lag1 = statistics.fmean((a - mean) * (b - mean) for a, b in itertools.pairwise(logs))
    assert lag1 / var == pytest.approx(0.8, abs=0.03)
    assert math.sqrt(math.expm1(var)) == pytest.approx(0.05, rel=0.1)
    iid = NoiseSource(replace(preset, noise_ar1=0.0), seed=11)
    logs = [math.log(iid.factor(1e9)) for _ in range(20000)]
    lag1 = statistics.fmean((a * b) for a, b in itertools.pairwise(logs))
    assert abs(lag1 / statistics.pvariance(logs)) < 0.03


def test_dp_ranks_have_their_own_noise_streams() -> None:
    noise = NoiseSource(replace(QUIET, noise_cv=0.05, noise_ar1=0.99), seed=1)
    a = [noise.factor(1e9, stream=0) for _ in range(200)]
    b = [noise.factor(1e9, stream=1) for _ in range(200)]
    assert statistics.fmean(abs(x - y) for x, y in zip(a, b, strict=True)) > 0.01


def test_throttling_slows_the_end_of_every_period() -> None:
    preset = replace(QUIET, throttle_amplitude=0.2, throttle_period_s=10.0, throttle_duration_s=2.0)
    assert costmodel.throttle_factor(preset, 1.0) == 1.0
    assert costmodel.throttle_factor(preset, 8.5) == pytest.approx(1.2)
    assert costmodel.throttle_factor(preset, 11.0) == 1.0
    assert costmodel.throttle_factor(QUIET, 9.0) == 1.0


def test_stalls_add_seconds_within_their_range() -> None:
    noise = NoiseSource(replace(QUIET, stall_prob=0.5, stall_s_min=0.05, stall_s_max=0.1), seed=2)
    stalls = [noise.stall_seconds() for _ in range(1000)]
    hit = [s for s in stalls if s]
    assert 400 < len(hit) < 600
    assert all(0.05 <= s <= 0.1 for s in hit)
    assert NoiseSource(QUIET, seed=2).stall_seconds() == 0.0


def test_ramp_throttle_and_stalls_only_ever_slow_a_step() -> None:
    preset = replace(
        QUIET,
        warmup_amplitude=0.3,
        warmup_tau_s=5.0,
        throttle_amplitude=0.1,
        throttle_period_s=1.0,
        throttle_duration_s=0.5,
        stall_prob=0.05,
    )
    times = step_times(preset, bs=4, steps=300)
    truth = preset.decode_seconds(4, 32)
    assert min(times) >= truth - 1e-6
    assert max(times) > truth * 1.3


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("noise_ar1", 1.0),
        ("kv_per_token_s", -1e-7),
        ("stall_prob", 1.5),
        ("outlier_factor_min", 5.0),
        ("throttle_duration_s", 100.0),
    ],
)
def test_bad_effect_knobs_are_refused(field: str, value: float) -> None:
    base = replace(H100, throttle_amplitude=0.1)
    with pytest.raises(ValueError, match=field):
        costmodel.validate_preset(replace(base, **{field: value}))


def test_truth_grid_is_the_reference_context_and_can_give_another() -> None:
    capture = list(range(1, 17))
    rows = truth_grid(H100, gamma=7, batch_sizes=[8], capture_bs=capture, max_running_per_dp=48)
    longer = truth_grid(
        H100, gamma=7, batch_sizes=[8], capture_bs=capture, max_running_per_dp=48, context=800
    )
    for row, far in zip(rows, longer, strict=True):
        assert row["seconds"] == pytest.approx(H100.decode_seconds(8, row["tier"]))
        extra = H100.kv_per_token_s * 8 * (800 - H100.kv_reference_tokens)
        assert far["seconds"] == pytest.approx(row["seconds"] + extra)


def test_noise_differs_per_run_unless_a_seed_is_given() -> None:
    drawn = {build_settings(DSPARK, {}).seed for _ in range(5)}
    assert len(drawn) > 1
    assert not build_settings(DSPARK, {}).seed_given
    given = build_settings([*DSPARK, "--seed", "4"], {})
    assert (given.seed, given.seed_given) == (4, True)
    assert build_settings(DSPARK, {"SPS_SIM_SEED": "9"}).seed == 9
