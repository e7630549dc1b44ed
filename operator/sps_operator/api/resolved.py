"""What an SGLang server reports it resolved, and what drifted since (pure, no I/O).

The pod spec says what a server is started with; some settings it resolves itself (an
auto-chosen value, a variable copied from another spelling, an `envFrom` the operator
cannot read). Newer SGLang reports some of that in `/server_info`: `world_size`,
`disaggregation_mode`, and, when started with `SGLANG_EXPOSE_OWN_ENV_VARS=1` (the
profiling clone is), its own environment as `internal_states[*].env_vars` (the variables
SGLang declares that are set, after its `SGL_` copy).

The profiler records `resolved_report(/server_info)` in its manifest (`server.resolved`),
which the operator keeps in the table's metadata; `resolved_drift(recorded, reported)`
compares that record with what a serving server reports, where both give a value. Both
sides are untrusted: `clean_resolved` bounds and types them before anything compares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sps_operator.api import fingerprint as F

REPORTED_FIELDS = ("world_size", "disaggregation_mode")
ENV_VARS_KEY = "env_vars"
# The clone sets these itself (it profiles in static, then compact mode), so its report
# of them never says what the serving server runs.
SET_BY_THE_CLONE = frozenset({"SGLANG_RAGGED_VERIFY_MODE"})
# The fingerprinted variables a report is compared on.
COMPARED_ENV: dict[str, F.CostInput] = {
    e.name: e for e in F.ENV_INPUTS if e.fingerprinted and e.name not in SET_BY_THE_CLONE
}
MAX_VALUE_CHARS = 256
MAX_WORLD_SIZE = 1 << 20


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= MAX_VALUE_CHARS else value[: MAX_VALUE_CHARS - 1] + "…"


def _world_size(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= MAX_WORLD_SIZE else None


def clean_resolved(raw: Any) -> dict[str, Any]:
    """A recorded or reported `resolved` object with only what is well-formed: `world_size`
    (a positive int), `disaggregation_mode` (text), `env` (the compared variables, text;
    present only when the server exposed its environment)."""
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, Any] = {}
    world = _world_size(raw.get("world_size"))
    if world is not None:
        out["world_size"] = world
    mode = _text(raw.get("disaggregation_mode"))
    if mode is not None:
        out["disaggregation_mode"] = mode
    env = raw.get("env")
    if isinstance(env, Mapping):
        out["env"] = {
            name: text
            for name in sorted(COMPARED_ENV)
            if (text := _text(env.get(name))) is not None
        }
    return out


def resolved_report(info: Any) -> dict[str, Any]:
    """What a `/server_info` response says the server resolved (see the module doc): the
    top-level fields, else DP rank 0's; the environment of rank 0 when it is exposed."""
    if not isinstance(info, Mapping):
        return {}
    states = info.get("internal_states")
    state0 = states[0] if isinstance(states, list) and states else {}
    state0 = state0 if isinstance(state0, Mapping) else {}
    raw: dict[str, Any] = {
        key: info[key] if key in info else state0.get(key) for key in REPORTED_FIELDS
    }
    env = state0.get(ENV_VARS_KEY, info.get(ENV_VARS_KEY))
    if isinstance(env, Mapping):
        raw["env"] = env
    return clean_resolved(raw)


def _env_value(entry: F.CostInput, value: str | None) -> str | None:
    """The variable as SGLang reads it; None for unset or set to its default."""
    if value is None:
        return None
    normal = F.normalised(entry, value)
    return None if entry.default is not None and normal == entry.default else normal


def resolved_drift(recorded: Any, reported: Any) -> list[str]:
    """What a serving server reports differently from what its table's profiling clone
    reported (both `clean_resolved`-able), one line each, in the words of `sps-operator
    fingerprint`; only what both report (an older SGLang reports nothing, and a server
    not started with SGLANG_EXPOSE_OWN_ENV_VARS=1 no environment)."""
    before, after = clean_resolved(recorded), clean_resolved(reported)
    lines: list[str] = []
    for key in REPORTED_FIELDS:
        if key in before and key in after and before[key] != after[key]:
            lines.append(f"{key}: {before[key]} -> {after[key]} (reported by the server)")
    if "env" in before and "env" in after:
        for name, entry in COMPARED_ENV.items():
            was = _env_value(entry, before["env"].get(name))
            now = _env_value(entry, after["env"].get(name))
            if was != now:
                lines.append(
                    f"{name}: {was or 'unset'} -> {now or 'unset'} (the server's own "
                    "environment, as it resolved it)"
                )
    return lines
