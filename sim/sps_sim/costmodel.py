"""Ground-truth cost model of the simulated DSpark server (pure, no I/O but preset files).

Step time of one DP rank for a decode step that replays ``tokens`` verify tokens for ``bs``
requests whose contexts hold ``ctx_i`` KV tokens each:

    T = bias + a(bs) + t(tokens) + interaction * bs * tokens        (+ eager overhead)
        + kv_per_token * sum_i (ctx_i - kv_reference_tokens)

with ``a(bs) = per_request * bs`` and ``t`` a two-slope roofline: memory-bound up to
``knee_tokens``, then compute-bound with the extra ``per_token_above_knee`` slope. The last
line is attention reading each request's KV cache: steps get slower as requests age.

The truth (`truth_seconds`, what `sps-sim truth` prints and what a table should hold) is
``T`` at the reference context, warm clocks, no throttling, no stall, noise median 1. What
a step really costs is that, times (`NoiseSource`):

* lognormal noise with median 1 and CV ``noise_cv``, autocorrelated from step to step
  (AR(1) on the log scale with coefficient ``noise_ar1``; the marginal CV stays
  ``noise_cv``);
* a rare outlier (``outlier_prob``, × ``outlier_factor_min``–``outlier_factor_max``);
* a clock ramp after an idle gap longer than ``warmup_idle_threshold_s``: slower by
  ``warmup_amplitude`` decaying with ``warmup_tau_s``;
* periodic throttling: every ``throttle_period_s`` of model time, ``throttle_duration_s``
  of steps slower by ``throttle_amplitude``;

plus, with probability ``stall_prob`` per step, a stall adding ``stall_s_min``–``stall_s_max``
seconds (a host hiccup). Every effect is a preset field; 0 turns it off.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

# GPU products the simulator has presets for (values of nvidia.com/gpu.product): the test
# bed's nodes advertise these, and the tests and benchmarks name them.
GPU_H100 = "NVIDIA-H100-80GB-HBM3"
GPU_H200 = "NVIDIA-H200"
GPU_RTX_PRO_6000 = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


@dataclass(frozen=True)
class CostPreset:
    """Cost parameters of one GPU product (seconds, per DP rank)."""

    name: str
    bias_s: float
    per_request_s: float
    per_token_s: float
    knee_tokens: float
    per_token_above_knee_s: float
    interaction_s: float
    prefill_base_s: float
    prefill_per_token_s: float
    prefill_per_request_s: float
    eager_overhead_s: float
    noise_cv: float = 0.03
    noise_ar1: float = 0.3
    outlier_prob: float = 0.002
    outlier_factor_min: float = 1.5
    outlier_factor_max: float = 3.0
    warmup_amplitude: float = 0.10
    warmup_tau_s: float = 0.5
    warmup_idle_threshold_s: float = 1.0
    throttle_amplitude: float = 0.0
    throttle_period_s: float = 60.0
    throttle_duration_s: float = 6.0
    stall_prob: float = 2e-4
    stall_s_min: float = 0.02
    stall_s_max: float = 0.2
    # Attention reading the KV cache: seconds per KV token per request per step, relative
    # to the context at which the costs above (and the truth) are stated.
    kv_per_token_s: float = 1.0e-7
    kv_reference_tokens: int = 300
    token_capacity: int = 812_345
    # Default decode CUDA-graph max bs when the command line gives none: for tp<4 and tp>=4.
    cuda_graph_max_bs_small_tp: int = 256
    cuda_graph_max_bs_large_tp: int = 512

    def decode_seconds(self, bs: int, tokens: int, *, eager: bool = False) -> float:
        """Noise-free step time of a decode step replaying ``tokens`` tokens for ``bs`` reqs."""
        above = max(0.0, tokens - self.knee_tokens)
        seconds = (
            self.bias_s
            + self.per_request_s * bs
            + self.per_token_s * tokens
            + self.per_token_above_knee_s * above
            + self.interaction_s * bs * tokens
        )
        if eager:
            seconds += self.eager_overhead_s
        return seconds

    def decode_seconds_at_context(
        self, bs: int, tokens: int, context_tokens: int, *, eager: bool = False
    ) -> float:
        """Noise-free step time when the ``bs`` requests hold ``context_tokens`` KV tokens in
        all: the truth plus the KV reads beyond (or short of) the reference context."""
        base = self.decode_seconds(bs, tokens, eager=eager)
        kv = self.kv_per_token_s * (context_tokens - bs * self.kv_reference_tokens)
        # Very short contexts cannot make a step cheaper than its weights' reads.
        return max(base + kv, 0.5 * base)

    def prefill_seconds(self, num_requests: int, num_tokens: int) -> float:
        """Noise-free time of one prefill (extend) step."""
        return (
            self.prefill_base_s
            + self.prefill_per_request_s * num_requests
            + self.prefill_per_token_s * num_tokens
        )

    def default_cuda_graph_max_bs(self, tp_size: int) -> int:
        return self.cuda_graph_max_bs_large_tp if tp_size >= 4 else self.cuda_graph_max_bs_small_tp


PRESETS: dict[str, CostPreset] = {
    GPU_H100: CostPreset(
        name=GPU_H100,
        bias_s=0.0105,
        per_request_s=45e-6,
        per_token_s=12.0e-6,
        knee_tokens=512,
        per_token_above_knee_s=14e-6,
        interaction_s=2.0e-9,
        prefill_base_s=0.015,
        prefill_per_token_s=1.5e-6,
        prefill_per_request_s=20e-6,
        eager_overhead_s=0.004,
        token_capacity=812_345,
        kv_per_token_s=1.0e-7,
    ),
    GPU_H200: CostPreset(
        name=GPU_H200,
        bias_s=0.0092,
        per_request_s=40e-6,
        per_token_s=9.0e-6,
        knee_tokens=640,
        per_token_above_knee_s=12e-6,
        interaction_s=1.5e-9,
        prefill_base_s=0.013,
        prefill_per_token_s=1.2e-6,
        prefill_per_request_s=18e-6,
        eager_overhead_s=0.004,
        token_capacity=1_412_345,
        kv_per_token_s=0.7e-7,
    ),
    GPU_RTX_PRO_6000: CostPreset(
        name=GPU_RTX_PRO_6000,
        bias_s=0.0135,
        per_request_s=60e-6,
        per_token_s=18.0e-6,
        knee_tokens=384,
        per_token_above_knee_s=24e-6,
        interaction_s=3.0e-9,
        prefill_base_s=0.02,
        prefill_per_token_s=2.5e-6,
        prefill_per_request_s=25e-6,
        eager_overhead_s=0.005,
        token_capacity=912_345,
        kv_per_token_s=1.8e-7,
        # SGLang has no memory-class rule for this product: the "unknown GPU" default.
        cuda_graph_max_bs_small_tp=160,
        cuda_graph_max_bs_large_tp=160,
    ),
}

DEFAULT_PRESET = GPU_H100


def load_preset(name_or_path: str) -> CostPreset:
    """A preset by GPU product name, or from a JSON/YAML file of ``CostPreset`` fields.

    A file may give ``base: <product>`` and override only some fields. Raises ValueError with
    a message naming the problem.
    """
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        known = ", ".join(sorted(PRESETS))
        raise ValueError(f"unknown preset {name_or_path!r}: not a GPU product ({known}) nor a file")
    text = path.read_text()
    data: Any
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"preset file {path}: invalid JSON: {exc}") from exc
    return preset_from_mapping(data, source=str(path))


def derived_preset(product: str) -> CostPreset:
    """A stand-in for a GPU product with no preset: the H100 costs scaled by a factor in
    [0.75, 1.35) drawn from the name, so different products still give different tables."""
    import hashlib

    digest = hashlib.sha256(product.encode()).digest()
    factor = 0.75 + 0.6 * int.from_bytes(digest[:4], "big") / 2**32
    base = PRESETS[DEFAULT_PRESET]
    return replace(
        base,
        name=product,
        bias_s=base.bias_s * factor,
        per_request_s=base.per_request_s * factor,
        per_token_s=base.per_token_s * factor,
        per_token_above_knee_s=base.per_token_above_knee_s * factor,
        prefill_base_s=base.prefill_base_s * factor,
        prefill_per_token_s=base.prefill_per_token_s * factor,
    )


def preset_from_mapping(data: Any, *, source: str = "preset") -> CostPreset:
    if not isinstance(data, dict):
        raise ValueError(f"{source}: a preset must be a mapping of cost parameters")
    data = dict(data)
    base_name = data.pop("base", None)
    if base_name is not None and base_name not in PRESETS:
        raise ValueError(f"{source}: unknown base preset {base_name!r}")
    base = PRESETS[base_name] if base_name is not None else None
    known = {f.name: f for f in fields(CostPreset)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{source}: unknown preset field(s) {unknown}")
    if base is None:
        missing = sorted(
            name
            for name, f in known.items()
            if name not in data and f.default is MISSING and f.default_factory is MISSING
        )
        missing = [m for m in missing if m != "name"]
        if missing:
            raise ValueError(f"{source}: missing preset field(s) {missing} (or give 'base')")
        data.setdefault("name", Path(source).stem)
        values: dict[str, Any] = {}
    else:
        values = asdict(base)
        values["name"] = data.get("name", f"{base.name}+{Path(source).stem}")
    for key, value in data.items():
        expected = known[key].type
        if key == "name":
            if not isinstance(value, str):
                raise ValueError(f"{source}: name must be a string")
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{source}: {key} must be a number, got {value!r}")
        elif expected == "int" and not float(value).is_integer():
            raise ValueError(f"{source}: {key} must be an integer, got {value!r}")
        values[key] = int(value) if expected == "int" else value
    preset = CostPreset(**values)
    validate_preset(preset, source=source)
    return preset


def validate_preset(preset: CostPreset, *, source: str = "preset") -> None:
    if preset.bias_s <= 0:
        raise ValueError(f"{source}: bias_s must be > 0")
    for name in (
        "per_request_s",
        "per_token_s",
        "per_token_above_knee_s",
        "knee_tokens",
        "kv_per_token_s",
        "kv_reference_tokens",
        "warmup_amplitude",
        "throttle_amplitude",
        "stall_s_min",
    ):
        if getattr(preset, name) < 0:
            raise ValueError(f"{source}: {name} must be >= 0")
    for name in ("noise_cv", "noise_ar1", "outlier_prob", "stall_prob"):
        if not 0 <= getattr(preset, name) < 1:
            raise ValueError(f"{source}: {name} must be in [0, 1)")
    for low, high in (("outlier_factor_min", "outlier_factor_max"), ("stall_s_min", "stall_s_max")):
        if getattr(preset, low) > getattr(preset, high):
            raise ValueError(f"{source}: {low} must be <= {high}")
    if preset.throttle_amplitude and not 0 < preset.throttle_duration_s <= preset.throttle_period_s:
        raise ValueError(f"{source}: throttle_duration_s must be in (0, throttle_period_s]")
    if preset.token_capacity < 1:
        raise ValueError(f"{source}: token_capacity must be >= 1")


def with_noise_cv(preset: CostPreset, noise_cv: float | None) -> CostPreset:
    if noise_cv is None:
        return preset
    if not 0 <= noise_cv < 1:
        raise ValueError(f"--noise-cv must be in [0, 1), got {noise_cv}")
    return replace(preset, noise_cv=noise_cv)


class NoiseSource:
    """What separates a step from the truth: autocorrelated lognormal noise (median 1),
    outliers, the clock ramp after idle, periodic throttling and stalls."""

    def __init__(self, preset: CostPreset, seed: int) -> None:
        self._preset = preset
        self._rng = random.Random(seed)
        cv = preset.noise_cv
        self._sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0
        # AR(1) state of the log-noise, per stream (a DP rank): z ~ N(0, 1) marginally.
        self._z: dict[int, float] = {}

    def gauss(self, mu: float, sigma: float) -> float:
        return self._rng.gauss(mu, sigma)

    def _log_noise(self, stream: int) -> float:
        phi = self._preset.noise_ar1
        previous = self._z.get(stream)
        fresh = self._rng.gauss(0.0, 1.0)
        z = fresh if previous is None else phi * previous + math.sqrt(1 - phi * phi) * fresh
        self._z[stream] = z
        return self._sigma * z

    def factor(self, seconds_since_warm_start: float, now: float = 0.0, stream: int = 0) -> float:
        """Multiplier of the truth for a step starting at model time ``now``."""
        p = self._preset
        value = math.exp(self._log_noise(stream)) if self._sigma else 1.0
        if p.outlier_prob and self._rng.random() < p.outlier_prob:
            value *= self._rng.uniform(p.outlier_factor_min, p.outlier_factor_max)
        return value * warmup_factor(p, seconds_since_warm_start) * throttle_factor(p, now)

    def stall_seconds(self) -> float:
        p = self._preset
        if p.stall_prob and self._rng.random() < p.stall_prob:
            return self._rng.uniform(p.stall_s_min, p.stall_s_max)
        return 0.0


def warmup_factor(preset: CostPreset, seconds_since_warm_start: float) -> float:
    """Clocks ramp up after idle: steps are slower by ``amplitude`` decaying with ``tau``."""
    if preset.warmup_amplitude <= 0 or preset.warmup_tau_s <= 0:
        return 1.0
    t = max(0.0, seconds_since_warm_start)
    return 1.0 + preset.warmup_amplitude * math.exp(-t / preset.warmup_tau_s)


def throttle_factor(preset: CostPreset, now: float) -> float:
    """Power/thermal capping: the last ``duration`` of every ``period`` runs slower."""
    if preset.throttle_amplitude <= 0:
        return 1.0
    phase = now % preset.throttle_period_s
    throttled = phase >= preset.throttle_period_s - preset.throttle_duration_s
    return 1.0 + preset.throttle_amplitude if throttled else 1.0


# The preset fields that, at these values, turn off every effect separating a step from the
# truth.
EFFECTS_OFF: dict[str, Any] = {
    "noise_cv": 0.0,
    "noise_ar1": 0.0,
    "outlier_prob": 0.0,
    "warmup_amplitude": 0.0,
    "throttle_amplitude": 0.0,
    "stall_prob": 0.0,
    "kv_per_token_s": 0.0,
}


def without_effects(preset: CostPreset) -> CostPreset:
    """The preset with every effect that separates a step from the truth turned off."""
    return replace(preset, **EFFECTS_OFF)
