"""The two SPS cost-table formats SGLang's DSpark planner loads, modelled exactly.

`SpsCostTable` (diagonal, 1-D) and `SpsAdditiveCostTable` (2-D additive) carry the
same invariants, with the same error messages, as SGLang's `dspark_sps.py`
`__post_init__`; the same lookup semantics (floor step for the diagonal table,
clamped linear interpolation for the additive one); and `to_json()` emits compact
JSON that SGLang's msgspec loader accepts (integers as JSON integers).

`load_sps_table_text` reproduces the loader's rules (contract section 10): dispatch
on the substring ``"bias_seconds"``, int fields reject floats and booleans, float
fields accept ints, unknown keys are ignored, missing keys raise, malformed JSON
raises, and every failure is a `ValueError` whose message reads like msgspec's.

Pure: no I/O. Metadata (GPU, fingerprint, quality) never goes inside a table.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


class SpsTableError(ValueError):
    """A table text or value SGLang's loader would reject."""


def floor_probe_index(edges: Sequence[int], batch_tokens: float) -> int:
    """Index of the last probe <= batch_tokens, clamped to the table (SGLang's floor step)."""
    idx = bisect.bisect_right(edges, batch_tokens) - 1
    return max(0, min(idx, len(edges) - 1))


def interp_clamped(xs: Sequence[int], ys: Sequence[float], x: float) -> float:
    """Linear interpolation with end clamping, as SGLang's `_interp_clamped`."""
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    hi = bisect.bisect_right(xs, x)
    lo = hi - 1
    frac = (x - xs[lo]) / (xs[hi] - xs[lo])
    return float(ys[lo] + frac * (ys[hi] - ys[lo]))


def _is_strictly_increasing(values: Sequence[int]) -> bool:
    return list(values) == sorted(set(values))


def _finite_or_raise(name: str, values: Iterable[float]) -> None:
    # SGLang never sees NaN/inf from JSON (msgspec rejects them), so refuse to write one.
    for value in values:
        if not math.isfinite(value):
            raise SpsTableError(f"{name} must be finite to serialise, got {value}.")


def _compact(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class SpsCostTable:
    """Diagonal table: steps/s sampled at batch_tokens probes, floor-step lookup."""

    sample_batch_tokens: tuple[int, ...]
    sample_steps_per_sec: tuple[float, ...]
    max_batch_tokens: int

    def __init__(
        self,
        sample_batch_tokens: Sequence[int],
        sample_steps_per_sec: Sequence[float],
        max_batch_tokens: int,
    ) -> None:
        object.__setattr__(self, "sample_batch_tokens", tuple(int(v) for v in sample_batch_tokens))
        object.__setattr__(
            self, "sample_steps_per_sec", tuple(float(v) for v in sample_steps_per_sec)
        )
        object.__setattr__(self, "max_batch_tokens", int(max_batch_tokens))
        self._validate()

    def _validate(self) -> None:
        # Same checks and messages as SGLang's SpsCostTable.__post_init__.
        probes = list(self.sample_batch_tokens)
        if not probes:
            raise SpsTableError("SpsCostTable requires at least one probe.")
        if not _is_strictly_increasing(probes):
            raise SpsTableError(
                "sample_batch_tokens must be strictly increasing (monotone-sorted "
                f"invariant), got {probes}."
            )
        if len(probes) != len(self.sample_steps_per_sec):
            raise SpsTableError(
                "sample_batch_tokens and sample_steps_per_sec must have equal length, "
                f"got {len(probes)} vs {len(self.sample_steps_per_sec)}."
            )
        if self.max_batch_tokens < probes[-1]:
            raise SpsTableError(
                "max_batch_tokens must be >= the largest probe, got "
                f"{self.max_batch_tokens} < {probes[-1]}."
            )

    def lookup(self, batch_tokens: float) -> float:
        """Steps/s at `batch_tokens`: floor step, clamped at both ends (no interpolation)."""
        return self.sample_steps_per_sec[floor_probe_index(self.sample_batch_tokens, batch_tokens)]

    def step_seconds(self, batch_tokens: float) -> float:
        """Seconds per step the planner infers at `batch_tokens` (1 / lookup)."""
        return 1.0 / self.lookup(batch_tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sample_batch_tokens": list(self.sample_batch_tokens),
            "sample_steps_per_sec": list(self.sample_steps_per_sec),
            "max_batch_tokens": self.max_batch_tokens,
        }

    def to_json(self) -> str:
        _finite_or_raise("sample_steps_per_sec", self.sample_steps_per_sec)
        return _compact(self.to_dict())


@dataclass(frozen=True)
class SpsAdditiveCostTable:
    """Additive table: T(bs, M) = bias + alpha(bs) + theta(M), each clamped-linear."""

    bias_seconds: float
    bs_probes: tuple[int, ...]
    alpha_seconds: tuple[float, ...]
    m_probes: tuple[int, ...]
    theta_seconds: tuple[float, ...]

    def __init__(
        self,
        bias_seconds: float,
        bs_probes: Sequence[int],
        alpha_seconds: Sequence[float],
        m_probes: Sequence[int],
        theta_seconds: Sequence[float],
    ) -> None:
        object.__setattr__(self, "bias_seconds", float(bias_seconds))
        object.__setattr__(self, "bs_probes", tuple(int(v) for v in bs_probes))
        object.__setattr__(self, "alpha_seconds", tuple(float(v) for v in alpha_seconds))
        object.__setattr__(self, "m_probes", tuple(int(v) for v in m_probes))
        object.__setattr__(self, "theta_seconds", tuple(float(v) for v in theta_seconds))
        self._validate()

    def _validate(self) -> None:
        # Same checks and messages as SGLang's SpsAdditiveCostTable.__post_init__.
        for name, probes, values in (
            ("bs", list(self.bs_probes), self.alpha_seconds),
            ("m", list(self.m_probes), self.theta_seconds),
        ):
            if not probes:
                raise SpsTableError(f"SpsAdditiveCostTable requires {name}_probes.")
            if not _is_strictly_increasing(probes):
                raise SpsTableError(f"{name}_probes must be strictly increasing, got {probes}.")
            if len(probes) != len(values):
                raise SpsTableError(
                    f"{name}_probes and its values must have equal length, got "
                    f"{len(probes)} vs {len(values)}."
                )
        if not self.bias_seconds > 0:
            raise SpsTableError(f"bias_seconds must be > 0, got {self.bias_seconds}.")

    def alpha(self, num_reqs: float) -> float:
        return interp_clamped(self.bs_probes, self.alpha_seconds, float(num_reqs))

    def theta(self, m: float) -> float:
        return interp_clamped(self.m_probes, self.theta_seconds, float(m))

    def step_time(self, *, num_reqs: int, budget: int) -> float:
        """Seconds per step for `num_reqs` requests and `budget` extra verify tokens."""
        return self.bias_seconds + self.alpha(num_reqs) + self.theta(num_reqs + budget)

    def step_seconds_at(self, bs: int, m: int) -> float:
        """Seconds per step at (bs, M): `step_time(bs, M - bs)`."""
        return self.step_time(num_reqs=bs, budget=max(0, m - bs))

    def to_dict(self) -> dict[str, Any]:
        return {
            "bias_seconds": self.bias_seconds,
            "bs_probes": list(self.bs_probes),
            "alpha_seconds": list(self.alpha_seconds),
            "m_probes": list(self.m_probes),
            "theta_seconds": list(self.theta_seconds),
        }

    def to_json(self) -> str:
        _finite_or_raise("bias_seconds", [self.bias_seconds])
        _finite_or_raise("alpha_seconds", self.alpha_seconds)
        _finite_or_raise("theta_seconds", self.theta_seconds)
        return _compact(self.to_dict())


SpsTable = SpsCostTable | SpsAdditiveCostTable


# --- loader --------------------------------------------------------------------------------


def _json_type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "array"
    return "object"


def _reject_constant(token: str) -> float:
    # Python's json accepts NaN/Infinity; msgspec (and strict JSON) does not.
    raise SpsTableError(f"JSON is malformed: invalid character ({token!r})")


def _decode_int(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpsTableError(f"Expected `int`, got `{_json_type_name(value)}` - at `{path}`")
    return value


def _decode_float(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SpsTableError(f"Expected `float`, got `{_json_type_name(value)}` - at `{path}`")
    try:
        result = float(value)
    except OverflowError:  # an integer too large for a double
        raise SpsTableError(f"Number out of range - at `{path}`") from None
    if not math.isfinite(result):
        raise SpsTableError(f"Number out of range - at `{path}`")
    return result


def _decode_list(value: Any, path: str, *, of_int: bool) -> list[Any]:
    if not isinstance(value, list):
        raise SpsTableError(f"Expected `array`, got `{_json_type_name(value)}` - at `{path}`")
    decode = _decode_int if of_int else _decode_float
    return [decode(item, f"{path}[{index}]") for index, item in enumerate(value)]


_DIAGONAL_FIELDS: tuple[tuple[str, str], ...] = (
    ("sample_batch_tokens", "list[int]"),
    ("sample_steps_per_sec", "list[float]"),
    ("max_batch_tokens", "int"),
)
_ADDITIVE_FIELDS: tuple[tuple[str, str], ...] = (
    ("bias_seconds", "float"),
    ("bs_probes", "list[int]"),
    ("alpha_seconds", "list[float]"),
    ("m_probes", "list[int]"),
    ("theta_seconds", "list[float]"),
)


def _decode_fields(obj: Any, fields: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise SpsTableError(f"Expected `object`, got `{_json_type_name(obj)}`")
    kinds = dict(fields)
    decoded: dict[str, Any] = {}
    # Document order, like msgspec: a bad value before a missing key is reported first.
    for name, value in obj.items():
        kind = kinds.get(name)
        if kind is None:
            continue  # unknown keys are ignored
        path = f"$.{name}"
        if kind == "int":
            decoded[name] = _decode_int(value, path)
        elif kind == "float":
            decoded[name] = _decode_float(value, path)
        else:
            decoded[name] = _decode_list(value, path, of_int=kind == "list[int]")
    for name, _kind in fields:
        if name not in decoded:
            raise SpsTableError(f"Object missing required field `{name}`")
    return decoded


def _parse_json(text: str) -> Any:
    if not text.strip():
        raise SpsTableError("Input data was truncated")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise SpsTableError(f"JSON is malformed: {exc.msg} (char {exc.pos})") from None
    except SpsTableError:
        raise
    except RecursionError:
        raise SpsTableError("JSON is malformed: nested too deeply") from None
    except ValueError:  # an integer beyond Python's int-string limit, not a JSONDecodeError
        raise SpsTableError(
            f"JSON is malformed: a number has more than {sys.get_int_max_str_digits()} digits"
        ) from None


def load_sps_table_text(text: str, *, diagonal_only: bool = False) -> SpsTable:
    """Decode a table text exactly as SGLang's `load_sps_table_from_path` would.

    Raises `SpsTableError` (a `ValueError`) with a loader-like message on any input
    SGLang would refuse. `diagonal_only` is the loader of builds that know only
    `SpsCostTable` (the fzyzcjy/sglang fork's `dspark_sps_table.py`): every text is decoded
    as a diagonal table, so an additive one fails on its first missing field.
    """
    obj = _parse_json(text)
    if not diagonal_only and '"bias_seconds"' in text:
        fields = _decode_fields(obj, _ADDITIVE_FIELDS)
        return SpsAdditiveCostTable(**fields)
    fields = _decode_fields(obj, _DIAGONAL_FIELDS)
    return SpsCostTable(**fields)


def build_uninitialized_sps_table(*, max_batch_tokens: int) -> SpsCostTable:
    """The flat 1-probe table the server builds when it has none (verify-all in compact)."""
    return SpsCostTable([1], [1.0], max_batch_tokens)


def is_uninitialized_sps_table(table: SpsTable) -> bool:
    """True for any diagonal table with <= 1 probe: compact mode then verifies everything."""
    if isinstance(table, SpsAdditiveCostTable):
        return False
    return len(table.sample_batch_tokens) <= 1


def profile_sps_table(
    probes: Iterable[tuple[int, float]], max_batch_tokens: int | None = None
) -> SpsCostTable:
    """Assemble a diagonal table from (batch_tokens, steps_per_sec) probes, as SGLang does."""
    sorted_probes = sorted(probes, key=lambda probe: probe[0])
    if not sorted_probes:
        raise SpsTableError("profile_sps_table requires at least one probe.")
    batch_tokens_list: list[int] = []
    steps_per_sec_list: list[float] = []
    for raw_batch_tokens, steps_per_sec in sorted_probes:
        batch_tokens = int(raw_batch_tokens)
        if batch_tokens < 1:
            raise SpsTableError(
                f"profile_sps_table requires batch_tokens >= 1, got {batch_tokens}."
            )
        if batch_tokens_list and batch_tokens == batch_tokens_list[-1]:
            raise SpsTableError(
                "profile_sps_table requires unique batch_tokens per probe; "
                f"batch_tokens={batch_tokens} appears more than once. Median the "
                "repeated samples per batch_tokens before calling the assembler."
            )
        batch_tokens_list.append(batch_tokens)
        steps_per_sec_list.append(float(steps_per_sec))
    resolved_max = int(max_batch_tokens) if max_batch_tokens is not None else batch_tokens_list[-1]
    return SpsCostTable(batch_tokens_list, steps_per_sec_list, resolved_max)


# The bias of a table whose whole cost sits in its curves (SGLang PR #35413 uses the same).
NEGLIGIBLE_BIAS_SECONDS = 1e-9


def diagonal_as_additive(table: SpsCostTable) -> SpsAdditiveCostTable:
    """The same step times in the additive format: θ(M) = 1/sps(M) over the diagonal's
    probes, no per-request term. A server that loads it leaves verify-all as with the
    diagonal, and a loader that reads only the diagonal format refuses it."""
    return SpsAdditiveCostTable(
        bias_seconds=NEGLIGIBLE_BIAS_SECONDS,
        bs_probes=[1],
        alpha_seconds=[0.0],
        m_probes=list(table.sample_batch_tokens),
        theta_seconds=[
            max(1.0 / sps - NEGLIGIBLE_BIAS_SECONDS, 0.0) for sps in table.sample_steps_per_sec
        ],
    )


_DERIVED_LINE = re.compile(
    r"DSpark SPS table derived from [0-9]+ verify tiers.*?"
    r"Verify cost \(tokens: ms\) (?P<verify>[0-9.:, ]+)\. "
    r"Draft cost \(requests: ms\) (?P<draft>[0-9.:, ]+)\."
)


def _probe_pairs(text: str) -> tuple[list[int], list[float]]:
    probes: list[int] = []
    seconds: list[float] = []
    for pair in text.split(","):
        key, _, value = pair.partition(":")
        probes.append(int(key.strip()))
        seconds.append(float(value.strip()) / 1000.0)
    return probes, seconds


def capture_derived_from_log(log: str) -> SpsAdditiveCostTable | None:
    """The table a server with SGLang PR #35413 derived at start-up, from the line it logs
    (`DSpark SPS table derived from N verify tiers ... Verify cost (tokens: ms) 8: 10.23,
    ... Draft cost (requests: ms) 1: 0.05, ...`): bias 1e-9, θ per verify tier, α per draft
    batch size, in the log's precision. The last such line wins; None without one."""
    found = None
    for match in _DERIVED_LINE.finditer(log):
        found = match
    if found is None:
        return None
    try:
        m_probes, theta = _probe_pairs(found["verify"])
        bs_probes, alpha = _probe_pairs(found["draft"])
        return SpsAdditiveCostTable(
            bias_seconds=NEGLIGIBLE_BIAS_SECONDS,
            bs_probes=bs_probes,
            alpha_seconds=alpha,
            m_probes=m_probes,
            theta_seconds=theta,
        )
    except ValueError:  # SpsTableError too: not a table SGLang could have built
        return None
