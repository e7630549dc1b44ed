"""Start-up configuration of sps-sim from an SGLang command line and environment (pure).

The command line is ``sglang.launch_server``'s; flags the simulator does not model are
accepted and reported once as ignored. Simulator-only options exist both as flags and as
``SPS_SIM_*`` environment variables (Jobs and the node agent pass environment).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sps_operator import dspark_arith
from sps_operator.tables.formats import SpsAdditiveCostTable, build_uninitialized_sps_table
from sps_sim import capture_derived, flavors
from sps_sim.costmodel import (
    DEFAULT_PRESET,
    PRESETS,
    CostPreset,
    derived_preset,
    load_preset,
    with_noise_cv,
)
from sps_sim.engine import KNOWN_COMPONENTS, MODES, EngineConfig
from sps_sim.group import (
    DEFAULT_JOIN_TIMEOUT_S,
    GroupConfig,
    group_preset,
    group_server_args,
    parse_group,
)
from sps_sim.tableload import LoadedTable, built_table, load_table_file

DEFAULT_GAMMA = 7
DSPARK_DEFAULT_MAX_RUNNING_REQUESTS = 48
DEFAULT_RING_SIZE = 200_000


class ConfigError(ValueError):
    """Bad start-up configuration: the message is shown and the process exits non-zero."""


@dataclass
class SimSettings:
    host: str
    port: int
    server_args: dict[str, Any]
    engine: EngineConfig
    preset: CostPreset
    time_scale: float
    seed: int
    # False when the seed was drawn at start-up (no --seed / SPS_SIM_SEED).
    seed_given: bool
    accept_null_pin: bool
    legacy_set_internal_state: bool
    verify_all_bug_setting: str
    ignored_args: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    token_capacity_per_dp: int = 0
    # The table start-up installed: from the path, the fork's `const`, or derived at
    # capture (None without one).
    table_info: dict[str, Any] | None = None
    sglang_flavor: str = flavors.UPSTREAM
    # The capture-derived table's fate when the switch is on: installed / skipped / refused.
    capture_derived_status: str | None = None
    # INFO lines start-up prints (as the real server logs them).
    notices: list[str] = field(default_factory=list)
    # A multi-node group (sps_sim.group); None for a single node.
    group: GroupConfig | None = None
    # The server's own environment, reported in /server_info when it was started with
    # SGLANG_EXPOSE_OWN_ENV_VARS=1 (newer SGLang); None otherwise.
    own_env: dict[str, str] | None = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and exit
        raise ConfigError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="sps-sim",
        description=(
            "Simulated SGLang DSpark server (profiling mode) with a ground-truth cost model. "
            "Takes sglang.launch_server's command line; other flags are ignored."
        ),
        allow_abbrev=False,
    )
    g = p.add_argument_group("sglang.launch_server flags")
    g.add_argument("--model-path", "--model", dest="model_path", default="sps-sim/dspark-model")
    g.add_argument("--tokenizer-path", dest="tokenizer_path", default=None)
    g.add_argument("--served-model-name", dest="served_model_name", default=None)
    g.add_argument("--host", default="127.0.0.1")
    g.add_argument("--port", type=int, default=30000)
    g.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=1)
    g.add_argument("--dp-size", "--dp", dest="dp_size", type=int, default=1)
    g.add_argument("--enable-dp-attention", action="store_true")
    g.add_argument("--enable-dp-lm-head", action="store_true")
    g.add_argument("--speculative-algorithm", default=None)
    g.add_argument("--speculative-draft-model-path", default=None)
    g.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    g.add_argument("--speculative-dspark-block-size", type=int, default=None)
    g.add_argument("--speculative-dspark-sps-table-path", default=None)
    g.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)
    g.add_argument("--cuda-graph-max-bs", type=int, default=None)
    g.add_argument("--cuda-graph-bs-decode", type=int, nargs="+", default=None)
    g.add_argument("--cuda-graph-bs", type=int, nargs="+", default=None)
    g.add_argument("--cuda-graph-config", default=None)
    g.add_argument("--disable-cuda-graph", action="store_true")
    # Decode-only switches: they do NOT set the legacy disable_cuda_graph bool (contract §5).
    g.add_argument("--cuda-graph-backend-decode", default=None)
    g.add_argument("--disable-decode-cuda-graph", action="store_true")
    g.add_argument("--disable-overlap-schedule", action="store_true")
    g.add_argument("--max-running-requests", type=int, default=None)
    g.add_argument("--context-length", type=int, default=None)
    g.add_argument("--enable-lora", action="store_true", default=None)
    g.add_argument("--lora-paths", nargs="*", default=None)
    g.add_argument("--nnodes", type=int, default=1)
    g.add_argument("--node-rank", type=int, default=0)
    g.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    s = p.add_argument_group("simulator options (also SPS_SIM_* environment variables)")
    s.add_argument("--preset", default=None, help="GPU product name or a JSON/YAML cost file")
    s.add_argument("--time-scale", type=float, default=None, help="model seconds per real second")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--verify-all-bug", choices=("on", "off", "auto"), default=None)
    s.add_argument("--accept-null-pin", action="store_true", default=None)
    s.add_argument("--legacy-set-internal-state", action="store_true", default=None)
    s.add_argument("--record-ring-size", type=int, default=None)
    s.add_argument("--noise-cv", type=float, default=None)
    s.add_argument(
        "--sglang-flavor",
        choices=flavors.FLAVORS,
        default=None,
        help="which SGLang build to play (docs/compatibility.md); default upstream",
    )
    return p


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def resolve_components(env: Mapping[str, str]) -> frozenset[str]:
    """SGLang's ``resolve_enabled_components``."""
    out: set[str] = set()
    raw = env.get("SGLANG_DSPARK_DEBUG_DUMP", "").strip()
    for token in (t.strip() for t in raw.split(",")):
        if not token:
            continue
        if token == "all":
            out.update(KNOWN_COMPONENTS)
        elif token in KNOWN_COMPONENTS:
            out.add(token)
        else:
            raise ConfigError(
                f"Unknown SGLANG_DSPARK_DEBUG_DUMP component {token!r}; "
                f"expected a comma list of {list(KNOWN_COMPONENTS)} or 'all'"
            )
    if _env_flag(env, "SGLANG_DSPARK_ENABLE_SPS_RECORD"):
        out.update(("core", "step_cpu_time"))
    try:
        pred_interval = float(env.get("SGLANG_DSPARK_LOG_SPS_PRED_INTERVAL", "0") or 0)
    except ValueError as exc:
        raise ConfigError(f"SGLANG_DSPARK_LOG_SPS_PRED_INTERVAL: {exc}") from exc
    if pred_interval > 0:
        out.add("step_gpu_time")
    return frozenset(out)


_Number = TypeVar("_Number", int, float)


def _float_env(env: Mapping[str, str], name: str, default: float) -> float:
    return _number_env(env, name, default, float, "a number")


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    return _number_env(env, name, default, int, "an integer")


def _number_env(
    env: Mapping[str, str], name: str, default: _Number, parse: Callable[[str], _Number], what: str
) -> _Number:
    """`parse` of the variable `name`; `default` when unset or blank."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not {what}") from exc


def resolve_decode_capture(
    ns: argparse.Namespace, preset: CostPreset
) -> tuple[int, list[int], str]:
    """(max_bs, server-args decode bs list, backend) as /server_info reports them."""
    max_bs = ns.cuda_graph_max_bs_decode or ns.cuda_graph_max_bs
    bs_list = ns.cuda_graph_bs_decode or ns.cuda_graph_bs
    backend = "full"
    if ns.cuda_graph_config:
        try:
            cfg = json.loads(ns.cuda_graph_config)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"--cuda-graph-config is not valid JSON: {exc}") from exc
        decode = cfg.get("decode") if isinstance(cfg, dict) else None
        if isinstance(decode, dict):
            max_bs = decode.get("max_bs", max_bs)
            bs_list = decode.get("bs", bs_list)
            backend = decode.get("backend", backend)
    if max_bs is None:
        max_bs = max(bs_list) if bs_list else preset.default_cuda_graph_max_bs(ns.tp_size)
    if not isinstance(max_bs, int) or max_bs < 1:
        raise ConfigError(f"cuda graph max bs must be a positive integer, got {max_bs!r}")
    if bs_list:
        if any(not isinstance(b, int) or b < 1 for b in bs_list):
            raise ConfigError(f"cuda graph bs list must hold positive integers: {bs_list!r}")
        bs_list = sorted(set(bs_list))
    else:
        bs_list = dspark_arith.default_decode_capture_bs(max_bs)
    if ns.cuda_graph_backend_decode:
        backend = ns.cuda_graph_backend_decode
    if ns.disable_cuda_graph or ns.disable_decode_cuda_graph:
        backend = "disabled"
    return int(max_bs), list(bs_list), str(backend)


def build_settings(argv: Sequence[str], env: Mapping[str, str] | None = None) -> SimSettings:
    """Parse a launch_server command line and environment into simulator settings."""
    env = sglang_environ(os.environ if env is None else env)
    ns, unknown = build_parser().parse_known_args(list(argv))
    warnings: list[str] = []
    group = _group(ns, env)
    preset = group_preset(_preset(ns, env, warnings), ns.nnodes)
    opts = _sim_options(ns, env)
    dspark = _is_dspark(ns, warnings)
    gamma = _gamma(ns, dspark)
    flavor, mode, enable_lora = _flavor_and_mode(ns, env, dspark)
    components = resolve_components(env)
    simulate_acc_len, acc_method, lag_env = _simulated_acceptance(env)
    max_running = _max_running(ns, dspark)
    max_running_per_dp = max(1, max_running // (ns.dp_size if ns.enable_dp_attention else 1))

    max_bs, decode_bs, backend = resolve_decode_capture(ns, preset)

    table, table_info = _startup_table(
        ns.speculative_dspark_sps_table_path,
        flavor=flavor,
        dspark=dspark,
        mode=mode,
        flat_max_batch_tokens=max(1, max_running * (gamma + 1)),
        warnings=warnings,
    )
    _check_verify_all(dspark, simulate_acc_len, mode, table)

    notices: list[str] = []
    capture_status: str | None = None
    min_predicted_gain = 0.0
    if (
        dspark
        and mode == "compact"
        and flavors.capture_derivation_requested(flavor, env)
        and (table is None or table.uninitialized)
        and not (simulate_acc_len is not None and simulate_acc_len != 1.0)
    ):
        capture_status, derived, message = _derive_at_capture(
            preset, decode_bs, max_running_per_dp, gamma + 1, backend, opts.seed
        )
        (warnings if capture_status == "refused" else notices).append(message)
        if derived is not None:
            table = built_table(derived)
            table_info = _table_info(
                ns.speculative_dspark_sps_table_path, table, source="capture-derived"
            )
            table_info["table"] = derived.to_dict()
            min_predicted_gain = capture_derived.MIN_PREDICTED_GAIN

    engine = EngineConfig(
        mode=mode,
        gamma=max(gamma, 0),
        dp_size=ns.dp_size,
        dp_attention=bool(ns.enable_dp_attention),
        dspark=dspark,
        capture_bs=() if backend == "disabled" else tuple(decode_bs),
        max_running_per_dp=max_running_per_dp,
        token_capacity_per_dp=preset.token_capacity,
        components=components if dspark else frozenset(),
        simulate_acc_len=simulate_acc_len if dspark else None,
        simulate_acc_method=acc_method,
        verify_all_bug=opts.bug_setting in ("on", "auto"),
        table=table,
        min_predicted_gain=min_predicted_gain,
        lag_steps=max(lag_env, 1),
        overlap_schedule=not ns.disable_overlap_schedule,
        ring_size=opts.ring_size,
        seed=opts.seed,
    )
    server_args = _server_args(
        ns,
        dspark=dspark,
        gamma=gamma,
        max_running=max_running,
        enable_lora=enable_lora,
        capture=(max_bs, decode_bs, backend),
    ) | group_server_args(group, ns.dist_init_addr, ns.tp_size)
    return SimSettings(
        host=ns.host,
        port=ns.port,
        server_args=server_args,
        engine=engine,
        preset=preset,
        time_scale=opts.time_scale,
        seed=opts.seed,
        seed_given=opts.seed_given,
        accept_null_pin=opts.accept_null_pin,
        legacy_set_internal_state=opts.legacy,
        verify_all_bug_setting=opts.bug_setting,
        ignored_args=list(unknown),
        warnings=warnings,
        token_capacity_per_dp=preset.token_capacity,
        table_info=table_info,
        sglang_flavor=flavor,
        capture_derived_status=capture_status,
        notices=notices,
        group=group,
        own_env=own_env(env),
    )


def sglang_environ(env: Mapping[str, str]) -> dict[str, str]:
    """The environment as SGLang leaves it at import: every `SGL_X` copied over `SGLANG_X`."""
    out = dict(env)
    for key, value in env.items():
        if key.startswith("SGL_"):
            out[key.replace("SGL_", "SGLANG_", 1)] = value
    return out


def own_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """What newer SGLang reports of its environment (`exportable_env_vars`: the variables
    it declares that are set; here every `SGLANG_` one) when asked to; None when not."""
    if not _env_flag(env, "SGLANG_EXPOSE_OWN_ENV_VARS"):
        return None
    return {k: v for k, v in sorted(env.items()) if k.startswith("SGLANG_")}


def _group(ns: argparse.Namespace, env: Mapping[str, str]) -> GroupConfig | None:
    try:
        join_timeout = _float_env(env, "SPS_SIM_GROUP_JOIN_TIMEOUT", DEFAULT_JOIN_TIMEOUT_S)
        return parse_group(ns.nnodes, ns.node_rank, ns.dist_init_addr, join_timeout)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _preset(ns: argparse.Namespace, env: Mapping[str, str], warnings: list[str]) -> CostPreset:
    """The cost preset: named, else the node's GPU product's, with the noise asked for."""
    explicit = ns.preset or env.get("SPS_SIM_PRESET")
    node_product = env.get("SPS_SIM_GPU_PRODUCT", "").strip()
    preset_name = explicit or node_product or DEFAULT_PRESET
    if not explicit and node_product and node_product not in PRESETS:
        # A node agent reports whatever the node's label says: never refuse to start on it.
        preset = derived_preset(node_product)
        warnings.append(
            f"no cost preset for GPU product {node_product!r}: using H100 costs scaled by "
            f"{preset.bias_s / PRESETS[DEFAULT_PRESET].bias_s:.3f}"
        )
    else:
        try:
            preset = load_preset(preset_name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
    noise_cv = ns.noise_cv
    if noise_cv is None and env.get("SPS_SIM_NOISE_CV"):
        noise_cv = _float_env(env, "SPS_SIM_NOISE_CV", preset.noise_cv)
    try:
        return with_noise_cv(preset, noise_cv)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


@dataclass(frozen=True)
class _SimOptions:
    """The simulator's own options (flags or SPS_SIM_* variables)."""

    time_scale: float
    seed: int
    seed_given: bool
    bug_setting: str
    accept_null_pin: bool
    legacy: bool
    ring_size: int


def _sim_options(ns: argparse.Namespace, env: Mapping[str, str]) -> _SimOptions:
    time_scale = (
        ns.time_scale if ns.time_scale is not None else _float_env(env, "SPS_SIM_TIME_SCALE", 1.0)
    )
    if not time_scale > 0:
        raise ConfigError(f"--time-scale must be > 0, got {time_scale}")
    if ns.seed is not None:
        seed, seed_given = ns.seed, True
    elif env.get("SPS_SIM_SEED", "").strip():
        seed, seed_given = _int_env(env, "SPS_SIM_SEED", 0), True
    else:
        # A real GPU never measures the same twice: every run draws its own noise.
        seed, seed_given = secrets.randbits(31), False
    bug_setting = ns.verify_all_bug or env.get("SPS_SIM_VERIFY_ALL_BUG", "auto").strip().lower()
    if bug_setting not in ("on", "off", "auto"):
        raise ConfigError(f"SPS_SIM_VERIFY_ALL_BUG must be on|off|auto, got {bug_setting!r}")
    accept_null_pin = bool(ns.accept_null_pin) or _env_flag(env, "SPS_SIM_ACCEPT_NULL_PIN")
    legacy = bool(ns.legacy_set_internal_state) or _env_flag(
        env, "SPS_SIM_LEGACY_SET_INTERNAL_STATE"
    )
    ring_size = (
        ns.record_ring_size
        if ns.record_ring_size is not None
        else _int_env(env, "SPS_SIM_RECORD_RING_SIZE", DEFAULT_RING_SIZE)
    )
    if ring_size < 1:
        raise ConfigError(f"--record-ring-size must be >= 1, got {ring_size}")
    return _SimOptions(
        time_scale=time_scale,
        seed=seed,
        seed_given=seed_given,
        bug_setting=bug_setting,
        accept_null_pin=accept_null_pin,
        legacy=legacy,
        ring_size=ring_size,
    )


def _is_dspark(ns: argparse.Namespace, warnings: list[str]) -> bool:
    """Whether the server runs DSpark (checking its parallelism and port on the way)."""
    if ns.tp_size < 1 or ns.dp_size < 1:
        raise ConfigError("--tp-size and --dp-size must be >= 1")
    if ns.port < 0 or ns.port > 65535:
        raise ConfigError(f"--port out of range: {ns.port}")
    algorithm = ns.speculative_algorithm
    dspark = (algorithm or "").upper() == "DSPARK"
    if algorithm is not None and algorithm.upper() not in ("DSPARK", "NONE"):
        warnings.append(
            f"speculative algorithm {algorithm!r} is simulated as plain decoding (no DSpark)"
        )
    return dspark


def _gamma(ns: argparse.Namespace, dspark: bool) -> int:
    """Draft tokens per request and step (0 for plain decode)."""
    gamma = DEFAULT_GAMMA
    k_flag = ns.speculative_num_draft_tokens
    if ns.speculative_dspark_block_size is not None:
        gamma = ns.speculative_dspark_block_size
        if gamma < 1:
            raise ConfigError("--speculative-dspark-block-size must be >= 1")
        if k_flag is not None and k_flag != gamma + 1:
            raise ConfigError(
                f"--speculative-num-draft-tokens ({k_flag}) must equal "
                f"--speculative-dspark-block-size + 1 ({gamma + 1}) for DSPARK"
            )
    elif k_flag is not None:
        if k_flag < 2:
            raise ConfigError("--speculative-num-draft-tokens must be >= 2 for DSPARK")
        gamma = k_flag - 1
    if not dspark:
        gamma = 0  # plain decode: one token per request per step
    return gamma


def _flavor_and_mode(
    ns: argparse.Namespace, env: Mapping[str, str], dspark: bool
) -> tuple[str, str, bool]:
    """(SGLang flavor, ragged verify mode, whether LoRA is on), checked as the server does."""
    flavor = ns.sglang_flavor or env.get(flavors.FLAVOR_ENV, "").strip() or flavors.UPSTREAM
    if flavor not in flavors.FLAVORS:
        raise ConfigError(
            f"{flavors.FLAVOR_ENV}={flavor!r} is invalid; expected one of {list(flavors.FLAVORS)}"
        )
    mode = env.get("SGLANG_RAGGED_VERIFY_MODE", "static").strip() or "static"
    # Server-argument checks run before the worker reads the mode (upstream
    # ServerArgs._check_lora_speculative_compatibility).
    enable_lora = bool(ns.enable_lora) or bool(ns.lora_paths)
    if dspark and enable_lora and mode != "static":
        raise ConfigError(flavors.lora_refusal(mode))
    if mode not in MODES:
        raise ConfigError(
            f"SGLANG_RAGGED_VERIFY_MODE={mode!r} is invalid; expected one of {list(MODES)}"
        )
    return flavor, mode, enable_lora


def _simulated_acceptance(env: Mapping[str, str]) -> tuple[float | None, str, int]:
    """(SGLANG_SIMULATE_ACC_LEN or None, its method, the confidence relay's lag)."""
    acc_raw = _float_env(env, "SGLANG_SIMULATE_ACC_LEN", -1.0)
    simulate_acc_len = acc_raw if acc_raw > 0 else None
    acc_method = env.get("SGLANG_SIMULATE_ACC_METHOD", "match-expected").strip() or "match-expected"
    if acc_method not in ("match-expected", "multinomial"):
        raise ConfigError(
            f"SGLANG_SIMULATE_ACC_METHOD={acc_method!r}; expected match-expected or multinomial"
        )
    lag_env = _int_env(env, "SGLANG_DSPARK_CONFIDENCE_RELAY_LAG_STEPS", 2)
    return simulate_acc_len, acc_method, lag_env


def _max_running(ns: argparse.Namespace, dspark: bool) -> int:
    max_running = ns.max_running_requests
    if max_running is None:
        max_running = DSPARK_DEFAULT_MAX_RUNNING_REQUESTS if dspark else 4096
    if max_running < 1:
        raise ConfigError("--max-running-requests must be >= 1")
    return max_running


def _check_verify_all(
    dspark: bool, simulate_acc_len: float | None, mode: str, table: LoadedTable | None
) -> None:
    """A simulated acceptance length other than 1 needs a server that verifies all."""
    if dspark and simulate_acc_len is not None and simulate_acc_len != 1.0:
        verify_all = mode == "static" or (
            mode == "compact" and (table is None or table.uninitialized)
        )
        if not verify_all:
            raise ConfigError(
                f"SGLANG_SIMULATE_ACC_LEN={simulate_acc_len} requires verify-all "
                "(static mode, or compact with no/flat SPS table)"
            )


def _server_args(
    ns: argparse.Namespace,
    *,
    dspark: bool,
    gamma: int,
    max_running: int,
    enable_lora: bool,
    capture: tuple[int, list[int], str],
) -> dict[str, Any]:
    """What /server_info reports as the server's arguments."""
    algorithm, k_flag, k = ns.speculative_algorithm, ns.speculative_num_draft_tokens, gamma + 1
    max_bs, decode_bs, backend = capture
    return {
        "model_path": ns.model_path,
        "tokenizer_path": ns.tokenizer_path or ns.model_path,
        "served_model_name": ns.served_model_name or ns.model_path,
        "host": ns.host,
        "port": ns.port,
        "tp_size": ns.tp_size,
        "dp_size": ns.dp_size,
        "pp_size": 1,
        "enable_dp_attention": bool(ns.enable_dp_attention),
        "enable_dp_lm_head": bool(ns.enable_dp_lm_head),
        "speculative_algorithm": algorithm.upper() if algorithm else None,
        "speculative_draft_model_path": ns.speculative_draft_model_path,
        "speculative_num_draft_tokens": k if dspark else k_flag,
        "speculative_dspark_block_size": gamma if dspark else ns.speculative_dspark_block_size,
        "speculative_dspark_sps_table_path": ns.speculative_dspark_sps_table_path,
        "max_running_requests": max_running,
        "disable_cuda_graph": bool(ns.disable_cuda_graph),
        "disable_overlap_schedule": bool(ns.disable_overlap_schedule),
        "context_length": ns.context_length,
        "enable_lora": True if enable_lora else ns.enable_lora,
        "lora_paths": ns.lora_paths,
        # The per-phase flags as given (SGLang has no `cuda_graph_max_bs` field since
        # #23906); the resolved capture list is cuda_graph_config.decode.
        "cuda_graph_max_bs_decode": ns.cuda_graph_max_bs_decode or ns.cuda_graph_max_bs,
        "cuda_graph_bs_decode": ns.cuda_graph_bs_decode or ns.cuda_graph_bs,
        "cuda_graph_backend_decode": ns.cuda_graph_backend_decode,
        "disable_decode_cuda_graph": bool(ns.disable_decode_cuda_graph),
        "cuda_graph_config": {
            "decode": {
                "backend": backend,
                "max_bs": max_bs,
                "bs": decode_bs,
                "tc_compiler": "eager",
                "full_prefill_max_req": None,
                "full_prefill_prefix_chunk_tokens": None,
            },
            "prefill": {
                "backend": "disabled" if ns.disable_cuda_graph else "breakable",
                "max_bs": 8192,
                "bs": [],
            },
        },
        "pp_max_micro_batch_size": None,
        "speculative_accept_threshold_single": 1.0,
        "speculative_accept_threshold_acc": 1.0,
    }


def _table_info(path: str | None, table: LoadedTable, *, source: str) -> dict[str, Any]:
    return {
        "path": path,
        "loaded": True,
        "kind": table.kind,
        "sha256": table.sha256,
        "uninitialized": table.uninitialized,
        "source": source,
    }


def _derive_at_capture(
    preset: CostPreset,
    decode_bs: list[int],
    max_running_per_dp: int,
    verify_num_draft_tokens: int,
    backend: str,
    seed: int,
) -> tuple[str, SpsAdditiveCostTable | None, str]:
    """PR #35413 at start-up: (installed|skipped|refused, the table, the line it logs)."""
    runner_bs = dspark_arith.runner_capture_bs(decode_bs, max_running_per_dp)
    tiers = dspark_arith.compact_tiers(runner_bs, verify_num_draft_tokens)
    if backend == "disabled" or not tiers:
        return "skipped", None, capture_derived.SKIPPED_NO_GRAPHS
    derivation = capture_derived.derive(
        preset,
        tiers=tiers,
        draft_batch_sizes=runner_bs,
        verify_num_draft_tokens=verify_num_draft_tokens,
        seed=seed,
    )
    status = "refused" if derivation.table is None else "installed"
    return status, derivation.table, derivation.log_line()


def _startup_table(
    path: str | None,
    *,
    flavor: str,
    dspark: bool,
    mode: str,
    flat_max_batch_tokens: int,
    warnings: list[str],
) -> tuple[LoadedTable | None, dict[str, Any] | None]:
    """The table the planner starts with, by the flavor's rules; ConfigError = no start."""
    if not dspark:
        return None, None
    if mode != "static" and not path and flavors.requires_table_path(flavor):
        raise ConfigError(flavors.REQUIRE_PATH_MESSAGE)
    if not path:
        return None, None
    if mode == "static":
        warnings.append(
            "--speculative-dspark-sps-table-path is a no-op under "
            "SGLANG_RAGGED_VERIFY_MODE=static (no budget planner)"
        )
        return None, {"path": path, "loaded": False, "kind": None, "sha256": None}
    if path == flavors.CONST_TABLE_PATH and flavors.requires_table_path(flavor):
        table = built_table(build_uninitialized_sps_table(max_batch_tokens=flat_max_batch_tokens))
        return table, _table_info(path, table, source="const")
    try:
        table = load_table_file(path, diagonal_only=flavors.loader_is_diagonal_only(flavor))
    except ValueError as exc:
        raise ConfigError(f"failed to load SPS table {path}: {exc}") from exc
    return table, _table_info(path, table, source="path")
