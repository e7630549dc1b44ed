"""Ground-truth cost model of the simulated DSpark server (pure, no I/O but preset files).

Step time of one DP rank for a decode step that replays ``tokens`` verify tokens for ``bs``
requests:

    T(bs, tokens) = bias + a(bs) + t(tokens) + interaction * bs * tokens   (+ eager overhead)

with ``a(bs) = per_request * bs`` and ``t`` a two-slope roofline: memory-bound up to
``knee_tokens``, then compute-bound with the extra ``per_token_above_knee`` slope. ``T`` is the
noise-free (median) step time; the simulator multiplies it by lognormal noise with median 1 (so
the median of many steps is ``T``), rare outliers, and a clock warm-up factor after idle gaps.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from sps_operator.constants import GPU_H100, GPU_H200, GPU_RTX_PRO_6000


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
    outlier_prob: float = 0.002
    outlier_factor_min: float = 1.5
    outlier_factor_max: float = 3.0
    warmup_amplitude: float = 0.10
    warmup_tau_s: float = 0.5
    warmup_idle_threshold_s: float = 1.0
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
    for name in ("per_request_s", "per_token_s", "per_token_above_knee_s", "knee_tokens"):
        if getattr(preset, name) < 0:
            raise ValueError(f"{source}: {name} must be >= 0")
    if not 0 <= preset.noise_cv < 1:
        raise ValueError(f"{source}: noise_cv must be in [0, 1)")
    if not 0 <= preset.outlier_prob < 1:
        raise ValueError(f"{source}: outlier_prob must be in [0, 1)")
    if preset.token_capacity < 1:
        raise ValueError(f"{source}: token_capacity must be >= 1")


def with_noise_cv(preset: CostPreset, noise_cv: float | None) -> CostPreset:
    if noise_cv is None:
        return preset
    if not 0 <= noise_cv < 1:
        raise ValueError(f"--noise-cv must be in [0, 1), got {noise_cv}")
    return replace(preset, noise_cv=noise_cv)


class NoiseSource:
    """Multiplicative step-time noise: lognormal (median 1), rare outliers, warm-up drift."""

    def __init__(self, preset: CostPreset, seed: int) -> None:
        self._preset = preset
        self._rng = random.Random(seed)
        cv = preset.noise_cv
        self._sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0

    def gauss(self, mu: float, sigma: float) -> float:
        return self._rng.gauss(mu, sigma)

    def factor(self, seconds_since_warm_start: float) -> float:
        p = self._preset
        value = math.exp(self._rng.gauss(0.0, self._sigma)) if self._sigma else 1.0
        if p.outlier_prob and self._rng.random() < p.outlier_prob:
            value *= self._rng.uniform(p.outlier_factor_min, p.outlier_factor_max)
        return value * warmup_factor(p, seconds_since_warm_start)


def warmup_factor(preset: CostPreset, seconds_since_warm_start: float) -> float:
    """Clocks ramp up after idle: steps are slower by ``amplitude`` decaying with ``tau``."""
    if preset.warmup_amplitude <= 0 or preset.warmup_tau_s <= 0:
        return 1.0
    t = max(0.0, seconds_since_warm_start)
    return 1.0 + preset.warmup_amplitude * math.exp(-t / preset.warmup_tau_s)
